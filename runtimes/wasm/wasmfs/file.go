package wasmfs

import (
	"io"
	"os"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
)

// file is an experimentalsys.File over an *os.File opened through an
// os.Root. A wasm guest is single threaded, so a file is used by one
// goroutine at a time and needs no lock.
type file struct {
	experimentalsys.UnimplementedFile

	f *os.File
	// openedAppend is whether f was opened with O_APPEND (os.File then
	// refuses WriteAt, so Pwrite goes to the descriptor directly).
	openedAppend bool
	// append is the current append mode, changed by SetAppend.
	append bool
	closed bool

	statCached bool
	dev        uint64
	ino        sys.Inode
	isDir      bool
}

var _ experimentalsys.File = (*file)(nil)

func newFile(f *os.File, flag experimentalsys.Oflag) *file {
	isAppend := flag&experimentalsys.O_APPEND != 0
	return &file{f: f, openedAppend: isAppend, append: isAppend}
}

// cached returns the identity of the file, stat-ing it once.
func (f *file) cached() experimentalsys.Errno {
	if f.statCached {
		return 0
	}
	_, errno := f.Stat()
	return errno
}

// Dev implements experimentalsys.File.
func (f *file) Dev() (uint64, experimentalsys.Errno) {
	if errno := f.cached(); errno != 0 {
		return 0, errno
	}
	return f.dev, 0
}

// Ino implements experimentalsys.File.
func (f *file) Ino() (sys.Inode, experimentalsys.Errno) {
	if errno := f.cached(); errno != 0 {
		return 0, errno
	}
	return f.ino, 0
}

// IsDir implements experimentalsys.File.
func (f *file) IsDir() (bool, experimentalsys.Errno) {
	if errno := f.cached(); errno != 0 {
		return false, errno
	}
	return f.isDir, 0
}

// IsAppend implements experimentalsys.File.
func (f *file) IsAppend() bool { return f.append }

// SetAppend implements experimentalsys.File by changing the descriptor's
// O_APPEND status flag.
func (f *file) SetAppend(enable bool) experimentalsys.Errno {
	if errno := f.check(false); errno != 0 {
		return errno
	}
	if errno := setAppend(f.f, enable); errno != 0 {
		return errno
	}
	f.append = enable
	return 0
}

// check fails with EBADF when f is closed and, if wantFile, with EISDIR when
// f is a directory.
func (f *file) check(wantFile bool) experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	if wantFile {
		isDir, errno := f.IsDir()
		if errno != 0 {
			return errno
		}
		if isDir {
			return experimentalsys.EISDIR
		}
	}
	return 0
}

// Stat implements experimentalsys.File.
func (f *file) Stat() (sys.Stat_t, experimentalsys.Errno) {
	if f.closed {
		return sys.Stat_t{}, experimentalsys.EBADF
	}
	fi, err := f.f.Stat()
	if err != nil {
		return sys.Stat_t{}, toErrno(err)
	}
	st := sys.NewStat_t(fi)
	f.statCached, f.dev, f.ino, f.isDir = true, st.Dev, st.Ino, fi.IsDir()
	return st, 0
}

// Read implements experimentalsys.File.
func (f *file) Read(buf []byte) (int, experimentalsys.Errno) {
	if errno := f.check(true); errno != 0 {
		return 0, errno
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := f.f.Read(buf)
	return n, toErrno(err) // io.EOF maps to 0
}

// Pread implements experimentalsys.File.
func (f *file) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	if errno := f.check(true); errno != 0 {
		return 0, errno
	}
	if off < 0 {
		return 0, experimentalsys.EINVAL
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := f.f.ReadAt(buf, off)
	return n, toErrno(err)
}

// Seek implements experimentalsys.File. On a directory only a rewind
// (offset 0 from the start) is allowed; it restarts Readdir.
func (f *file) Seek(offset int64, whence int) (int64, experimentalsys.Errno) {
	if errno := f.check(false); errno != 0 {
		return 0, errno
	}
	if whence < io.SeekStart || whence > io.SeekEnd {
		return 0, experimentalsys.EINVAL
	}
	isDir, errno := f.IsDir()
	if errno != 0 {
		return 0, errno
	}
	if isDir && (offset != 0 || whence != io.SeekStart) {
		return 0, experimentalsys.EISDIR
	}
	n, err := f.f.Seek(offset, whence)
	return n, toErrno(err)
}

// Readdir implements experimentalsys.File. Entries are stat-ed relative to
// the open directory (never by host path), so they cannot be redirected
// outside the root. "." and ".." are not returned: wazero adds them.
func (f *file) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	if f.closed {
		return nil, experimentalsys.EBADF
	}
	if isDir, errno := f.IsDir(); errno != 0 {
		return nil, errno
	} else if !isDir {
		return nil, experimentalsys.EBADF
	}
	fis, err := f.f.Readdir(n)
	if err != nil && err != io.EOF {
		errno := toErrno(err)
		if errno == experimentalsys.EINVAL || errno == experimentalsys.ENOTDIR {
			errno = experimentalsys.EBADF
		}
		return nil, errno
	}
	out := make([]experimentalsys.Dirent, 0, len(fis))
	for _, fi := range fis {
		st := sys.NewStat_t(fi)
		out = append(out, experimentalsys.Dirent{Name: fi.Name(), Ino: st.Ino, Type: fi.Mode().Type()})
	}
	return out, 0
}

// Write implements experimentalsys.File.
func (f *file) Write(buf []byte) (int, experimentalsys.Errno) {
	if errno := f.check(true); errno != 0 {
		return 0, errno
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := f.f.Write(buf)
	return n, toErrno(err)
}

// Pwrite implements experimentalsys.File.
func (f *file) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	if errno := f.check(true); errno != 0 {
		return 0, errno
	}
	if off < 0 {
		return 0, experimentalsys.EINVAL
	}
	if len(buf) == 0 {
		return 0, 0
	}
	if f.openedAppend {
		return pwriteFd(f.f, buf, off)
	}
	n, err := f.f.WriteAt(buf, off)
	return n, toErrno(err)
}

// Truncate implements experimentalsys.File.
func (f *file) Truncate(size int64) experimentalsys.Errno {
	if errno := f.check(true); errno != 0 {
		return errno
	}
	if size < 0 {
		return experimentalsys.EINVAL
	}
	return toErrno(f.f.Truncate(size))
}

// Sync implements experimentalsys.File.
func (f *file) Sync() experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	return toErrno(f.f.Sync())
}

// Datasync implements experimentalsys.File.
func (f *file) Datasync() experimentalsys.Errno { return f.Sync() }

// Utimens implements experimentalsys.File.
func (f *file) Utimens(atim, mtim int64) experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	if atim == experimentalsys.UTIME_OMIT && mtim == experimentalsys.UTIME_OMIT {
		return 0
	}
	return futimens(f.f, atim, mtim)
}

// Close implements experimentalsys.File; closing twice is not an error.
func (f *file) Close() experimentalsys.Errno {
	if f.closed {
		return 0
	}
	f.closed = true
	return toErrno(f.f.Close())
}
