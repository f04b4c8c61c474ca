package wasmfs

import (
	"io/fs"
	"os"
	"path"
	"sync/atomic"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
)

// Switch is a filesystem whose backing root is bound after the guest has
// started: pooled interpreters are instantiated with a Switch and bound to a
// sandbox's workspace when claimed. Before Bind every call fails with EACCES.
//
// One exception keeps wazero working: wazero opens the mount's root
// directory (".", read-only) lazily for the preopened descriptor and treats
// any failure other than ENOENT as fatal. That one open succeeds before Bind
// with a directory handle whose every operation fails with EACCES until Bind,
// and then acts on the bound root.
//
// The zero value is an unbound Switch. A Switch is safe for concurrent use.
type Switch struct {
	experimentalsys.UnimplementedFS
	bound atomic.Pointer[rootFS]
	// staged are directories that Stat and Lstat report before Bind
	// (NewStagedSwitch), relative paths as relPath makes them.
	staged map[string]bool
}

var _ experimentalsys.FS = (*Switch)(nil)

// NewSwitch returns an unbound Switch.
func NewSwitch() *Switch { return &Switch{} }

// NewStagedSwitch returns an unbound Switch that, until Bind, reports each
// of dirs (absolute guest paths) and their parents as an empty directory
// to Stat and Lstat, and nothing else: enough for a guest to change into
// one before its workspace is bound (a ready clone, made ahead, starts in
// the directory most contexts start in). The workspace bound later must
// have the directory the guest changed into; nothing is read from or
// written to these directories before then.
func NewStagedSwitch(dirs ...string) *Switch {
	s := &Switch{staged: map[string]bool{".": true}}
	for _, d := range dirs {
		for p := path.Clean("/" + d); p != "/"; p = path.Dir(p) {
			s.staged[relPath(p)] = true
		}
	}
	return s
}

// stagedStat is the stat of a staged directory.
func (s *Switch) stagedStat(p string) (sys.Stat_t, experimentalsys.Errno) {
	if !s.staged[relPath(path.Clean("/"+p))] {
		return sys.Stat_t{}, experimentalsys.EACCES
	}
	return sys.Stat_t{Mode: fs.ModeDir | 0o755, Nlink: 2}, 0
}

// Bind sets the backing root. It may be called once, from any goroutine,
// also while the guest runs; the guest sees the root from its next call.
// The caller keeps ownership of root.
//
// Bind panics when root is nil or the Switch is already bound: re-binding a
// pooled interpreter to another workspace would leak one sandbox's files to
// another, so it is treated as a programming error.
func (s *Switch) Bind(root *os.Root) {
	if root == nil {
		panic("wasmfs: Switch.Bind with a nil root")
	}
	if !s.bound.CompareAndSwap(nil, &rootFS{root: root}) {
		panic("wasmfs: Switch bound twice")
	}
}

// Bound reports whether Bind has been called.
func (s *Switch) Bound() bool { return s.bound.Load() != nil }

// OpenFile implements experimentalsys.FS.
func (s *Switch) OpenFile(path string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	if r := s.bound.Load(); r != nil {
		return r.OpenFile(path, flag, perm)
	}
	if relPath(path) == "." && flag == experimentalsys.O_RDONLY {
		return &pendingRoot{s: s}, 0
	}
	return nil, experimentalsys.EACCES
}

// Lstat implements experimentalsys.FS.
func (s *Switch) Lstat(path string) (sys.Stat_t, experimentalsys.Errno) {
	if r := s.bound.Load(); r != nil {
		return r.Lstat(path)
	}
	return s.stagedStat(path)
}

// Stat implements experimentalsys.FS.
func (s *Switch) Stat(path string) (sys.Stat_t, experimentalsys.Errno) {
	if r := s.bound.Load(); r != nil {
		return r.Stat(path)
	}
	return s.stagedStat(path)
}

// Mkdir implements experimentalsys.FS.
func (s *Switch) Mkdir(path string, perm fs.FileMode) experimentalsys.Errno {
	if r := s.bound.Load(); r != nil {
		return r.Mkdir(path, perm)
	}
	return experimentalsys.EACCES
}

// Chmod implements experimentalsys.FS.
func (s *Switch) Chmod(path string, perm fs.FileMode) experimentalsys.Errno {
	if r := s.bound.Load(); r != nil {
		return r.Chmod(path, perm)
	}
	return experimentalsys.EACCES
}

// Rename implements experimentalsys.FS.
func (s *Switch) Rename(from, to string) experimentalsys.Errno {
	if r := s.bound.Load(); r != nil {
		return r.Rename(from, to)
	}
	return experimentalsys.EACCES
}

// Rmdir implements experimentalsys.FS.
func (s *Switch) Rmdir(path string) experimentalsys.Errno {
	if r := s.bound.Load(); r != nil {
		return r.Rmdir(path)
	}
	return experimentalsys.EACCES
}

// Unlink implements experimentalsys.FS.
func (s *Switch) Unlink(path string) experimentalsys.Errno {
	if r := s.bound.Load(); r != nil {
		return r.Unlink(path)
	}
	return experimentalsys.EACCES
}

// Link implements experimentalsys.FS.
func (s *Switch) Link(oldPath, newPath string) experimentalsys.Errno {
	if r := s.bound.Load(); r != nil {
		return r.Link(oldPath, newPath)
	}
	return experimentalsys.EACCES
}

// Symlink implements experimentalsys.FS.
func (s *Switch) Symlink(oldPath, linkName string) experimentalsys.Errno {
	if r := s.bound.Load(); r != nil {
		return r.Symlink(oldPath, linkName)
	}
	return experimentalsys.EACCES
}

// Readlink implements experimentalsys.FS.
func (s *Switch) Readlink(path string) (string, experimentalsys.Errno) {
	if r := s.bound.Load(); r != nil {
		return r.Readlink(path)
	}
	return "", experimentalsys.EACCES
}

// Utimens implements experimentalsys.FS.
func (s *Switch) Utimens(path string, atim, mtim int64) experimentalsys.Errno {
	if r := s.bound.Load(); r != nil {
		return r.Utimens(path, atim, mtim)
	}
	return experimentalsys.EACCES
}

// pendingRoot is the root directory opened through a Switch before Bind. It
// is a directory from the start; everything else fails with EACCES until
// the Switch is bound, and then goes to the bound root's ".".
type pendingRoot struct {
	experimentalsys.DirFile
	s      *Switch
	f      experimentalsys.File
	closed bool
}

var _ experimentalsys.File = (*pendingRoot)(nil)

// file returns the bound root directory, opening it on first use.
func (p *pendingRoot) file() (experimentalsys.File, experimentalsys.Errno) {
	if p.closed {
		return nil, experimentalsys.EBADF
	}
	if p.f != nil {
		return p.f, 0
	}
	r := p.s.bound.Load()
	if r == nil {
		return nil, experimentalsys.EACCES
	}
	f, errno := r.OpenFile(".", experimentalsys.O_RDONLY, 0)
	if errno != 0 {
		return nil, errno
	}
	p.f = f
	return f, 0
}

// Dev implements experimentalsys.File.
func (p *pendingRoot) Dev() (uint64, experimentalsys.Errno) {
	f, errno := p.file()
	if errno != 0 {
		return 0, errno
	}
	return f.Dev()
}

// Ino implements experimentalsys.File.
func (p *pendingRoot) Ino() (sys.Inode, experimentalsys.Errno) {
	f, errno := p.file()
	if errno != 0 {
		return 0, errno
	}
	return f.Ino()
}

// IsDir implements experimentalsys.File.
func (p *pendingRoot) IsDir() (bool, experimentalsys.Errno) {
	if p.closed {
		return false, experimentalsys.EBADF
	}
	return true, 0
}

// Stat implements experimentalsys.File.
func (p *pendingRoot) Stat() (sys.Stat_t, experimentalsys.Errno) {
	f, errno := p.file()
	if errno != 0 {
		return sys.Stat_t{}, errno
	}
	return f.Stat()
}

// Seek implements experimentalsys.File.
func (p *pendingRoot) Seek(offset int64, whence int) (int64, experimentalsys.Errno) {
	f, errno := p.file()
	if errno != 0 {
		return 0, errno
	}
	return f.Seek(offset, whence)
}

// Readdir implements experimentalsys.File.
func (p *pendingRoot) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	f, errno := p.file()
	if errno != 0 {
		return nil, errno
	}
	return f.Readdir(n)
}

// Sync implements experimentalsys.File.
func (p *pendingRoot) Sync() experimentalsys.Errno {
	f, errno := p.file()
	if errno != 0 {
		return errno
	}
	return f.Sync()
}

// Datasync implements experimentalsys.File.
func (p *pendingRoot) Datasync() experimentalsys.Errno {
	f, errno := p.file()
	if errno != 0 {
		return errno
	}
	return f.Datasync()
}

// Utimens implements experimentalsys.File.
func (p *pendingRoot) Utimens(atim, mtim int64) experimentalsys.Errno {
	f, errno := p.file()
	if errno != 0 {
		return errno
	}
	return f.Utimens(atim, mtim)
}

// Close implements experimentalsys.File.
func (p *pendingRoot) Close() experimentalsys.Errno {
	if p.closed {
		return 0
	}
	p.closed = true
	if p.f != nil {
		return p.f.Close()
	}
	return 0
}
