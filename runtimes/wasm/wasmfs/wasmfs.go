// Package wasmfs gives a wasm guest a filesystem backed by an os.Root, so
// that neither ".." nor symlinks can reach outside the sandbox's workspace.
//
// The filesystem implements wazero's experimental sys.FS and is mounted with
//
//	wazero.NewFSConfig().(sysfs.FSConfig).WithSysFSMount(wasmfs.New(root), "/")
//
// Every path operation goes through the os.Root, which resolves ".." and
// symbolic links itself and refuses any that would leave the root (the
// guest sees EPERM). Symbolic links may be created with any target, relative
// or absolute, because following them is confined the same way: a link
// whose target lies outside the root, or is absolute, simply fails to
// resolve.
package wasmfs

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
)

// New returns a wazero filesystem whose "/" is root. The caller keeps
// ownership of root: once it is closed every path operation fails with
// EBADF (files the guest already opened stay usable until it closes them).
// A nil root gives a filesystem that refuses everything (an unbound Switch).
//
// Errors reach the guest as errno values: those of the underlying system
// calls, EPERM for a path or symlink that would leave the root, ELOOP for
// O_NOFOLLOW on a symlink, EROFS for a change in SystemDirs.
func New(root *os.Root) experimentalsys.FS {
	if root == nil {
		return NewSwitch()
	}
	return &rootFS{root: root}
}

// rootFS is the experimentalsys.FS over an os.Root.
type rootFS struct {
	experimentalsys.UnimplementedFS
	root *os.Root
}

var _ experimentalsys.FS = (*rootFS)(nil)

// relPath turns a mount-relative path from wazero into a name for os.Root.
// wazero passes cleaned relative paths (possibly "." or with a trailing
// slash); leading slashes are tolerated and mean the root.
func relPath(p string) string {
	p = strings.TrimLeft(p, "/")
	if p == "" {
		return "."
	}
	return p
}

// OpenFile implements experimentalsys.FS.
func (r *rootFS) OpenFile(path string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	name := relPath(path)
	if flag&experimentalsys.O_DIRECTORY != 0 && flag&(experimentalsys.O_WRONLY|experimentalsys.O_RDWR) != 0 {
		return nil, experimentalsys.EISDIR
	}
	if IsSystem(name) && flag&(experimentalsys.O_WRONLY|experimentalsys.O_RDWR|experimentalsys.O_CREAT|experimentalsys.O_TRUNC|experimentalsys.O_APPEND) != 0 {
		return nil, experimentalsys.EROFS
	}
	if flag&experimentalsys.O_NOFOLLOW != 0 {
		// os.Root always follows a final symlink (inside the root), so
		// O_NOFOLLOW is enforced here. A race that swaps in a link after
		// this check is still confined to the root.
		if fi, err := r.root.Lstat(name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, experimentalsys.ELOOP
		}
	}
	fresh := flag&experimentalsys.O_CREAT != 0 && !exists(r.root, name)
	f, err := r.root.OpenFile(name, toOSFlag(flag), perm&fs.ModePerm)
	if err != nil {
		return nil, toErrno(err)
	}
	if fresh {
		ownFile(f) // the guest made it: its user's, as `id` says
	}
	return newFile(f, flag), 0
}

// toOSFlag converts wazero's open flags to os.OpenFile flags. O_NOFOLLOW is
// handled by OpenFile and O_NONBLOCK is dropped: regular files and
// directories never block.
func toOSFlag(flag experimentalsys.Oflag) int {
	var f int
	switch flag & (experimentalsys.O_RDONLY | experimentalsys.O_RDWR | experimentalsys.O_WRONLY) {
	case experimentalsys.O_RDWR:
		f = os.O_RDWR
	case experimentalsys.O_WRONLY:
		f = os.O_WRONLY
	default:
		f = os.O_RDONLY
	}
	for _, m := range []struct {
		w  experimentalsys.Oflag
		os int
	}{
		{experimentalsys.O_APPEND, os.O_APPEND},
		{experimentalsys.O_CREAT, os.O_CREATE},
		{experimentalsys.O_EXCL, os.O_EXCL},
		{experimentalsys.O_TRUNC, os.O_TRUNC},
		{experimentalsys.O_SYNC, os.O_SYNC},
		{experimentalsys.O_DIRECTORY, oDirectory},
		{experimentalsys.O_DSYNC, oDsync},
		{experimentalsys.O_RSYNC, oRsync},
	} {
		if flag&m.w != 0 {
			f |= m.os
		}
	}
	return f
}

// Lstat implements experimentalsys.FS.
func (r *rootFS) Lstat(path string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := r.root.Lstat(relPath(path))
	if err != nil {
		return sys.Stat_t{}, toErrno(err)
	}
	return sys.NewStat_t(fi), 0
}

// Stat implements experimentalsys.FS.
func (r *rootFS) Stat(path string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := r.root.Stat(relPath(path))
	if err != nil {
		return sys.Stat_t{}, toErrno(err)
	}
	return sys.NewStat_t(fi), 0
}

// Mkdir implements experimentalsys.FS.
func (r *rootFS) Mkdir(path string, perm fs.FileMode) experimentalsys.Errno {
	if IsSystem(relPath(path)) {
		return experimentalsys.EROFS
	}
	errno := toErrno(r.root.Mkdir(relPath(path), perm&fs.ModePerm))
	if errno == 0 {
		own(r.root, relPath(path))
	}
	if errno == experimentalsys.ENOTDIR {
		// Same convention as wazero's own DirFS: a parent that is a file
		// reads as a missing directory.
		errno = experimentalsys.ENOENT
	}
	return errno
}

// Chmod implements experimentalsys.FS.
func (r *rootFS) Chmod(path string, perm fs.FileMode) experimentalsys.Errno {
	if IsSystem(relPath(path)) {
		return experimentalsys.EROFS
	}
	return toErrno(r.root.Chmod(relPath(path), perm&fs.ModePerm))
}

// Rename implements experimentalsys.FS with POSIX semantics: a directory
// may replace an empty directory (os.Root refuses that with EEXIST).
func (r *rootFS) Rename(from, to string) experimentalsys.Errno {
	if IsSystem(relPath(from)) || IsSystem(relPath(to)) {
		return experimentalsys.EROFS
	}
	from, to = relPath(from), relPath(to)
	if from == to {
		return 0
	}
	errno := toErrno(r.root.Rename(from, to))
	if errno != experimentalsys.EEXIST {
		return errno
	}
	toInfo, err := r.root.Lstat(to)
	if err != nil || !toInfo.IsDir() {
		return errno
	}
	fromInfo, err := r.root.Lstat(from)
	if err != nil {
		return toErrno(err)
	}
	if !fromInfo.IsDir() {
		return experimentalsys.EISDIR
	}
	if os.SameFile(fromInfo, toInfo) {
		return 0
	}
	// Removing fails with ENOTEMPTY unless the target is empty, which is
	// exactly rename's rule.
	if errno := r.Rmdir(to); errno != 0 {
		return errno
	}
	return toErrno(r.root.Rename(from, to))
}

// Rmdir implements experimentalsys.FS.
func (r *rootFS) Rmdir(path string) experimentalsys.Errno {
	if IsSystem(relPath(path)) {
		return experimentalsys.EROFS
	}
	name := relPath(path)
	fi, err := r.root.Lstat(name)
	if err != nil {
		return toErrno(err)
	}
	if !fi.IsDir() {
		return experimentalsys.ENOTDIR
	}
	return toErrno(r.root.Remove(name))
}

// Unlink implements experimentalsys.FS. A symlink is removed itself, never
// its target.
func (r *rootFS) Unlink(path string) experimentalsys.Errno {
	if IsSystem(relPath(path)) {
		return experimentalsys.EROFS
	}
	name := relPath(path)
	fi, err := r.root.Lstat(name)
	if err != nil {
		return toErrno(err)
	}
	if fi.IsDir() {
		return experimentalsys.EISDIR
	}
	return toErrno(r.root.Remove(name))
}

// Link implements experimentalsys.FS.
func (r *rootFS) Link(oldPath, newPath string) experimentalsys.Errno {
	if IsSystem(relPath(oldPath)) || IsSystem(relPath(newPath)) {
		return experimentalsys.EROFS
	}
	return toErrno(r.root.Link(relPath(oldPath), relPath(newPath)))
}

// Symlink implements experimentalsys.FS. The target is stored as given;
// following it later is confined to the root.
func (r *rootFS) Symlink(oldPath, linkName string) experimentalsys.Errno {
	if IsSystem(relPath(linkName)) {
		return experimentalsys.EROFS
	}
	if oldPath == "" {
		return experimentalsys.ENOENT
	}
	if err := r.root.Symlink(oldPath, relPath(linkName)); err != nil {
		return toErrno(err)
	}
	own(r.root, relPath(linkName))
	return 0
}

// Readlink implements experimentalsys.FS.
func (r *rootFS) Readlink(path string) (string, experimentalsys.Errno) {
	dst, err := r.root.Readlink(relPath(path))
	if err != nil {
		return "", toErrno(err)
	}
	return dst, 0
}

// Utimens implements experimentalsys.FS; symlinks are followed.
func (r *rootFS) Utimens(path string, atim, mtim int64) experimentalsys.Errno {
	if IsSystem(relPath(path)) {
		return experimentalsys.EROFS
	}
	if atim == experimentalsys.UTIME_OMIT && mtim == experimentalsys.UTIME_OMIT {
		return 0
	}
	return toErrno(r.root.Chtimes(relPath(path), nanosToTime(atim), nanosToTime(mtim)))
}

// nanosToTime converts an epoch-nanosecond timestamp; UTIME_OMIT becomes the
// zero time.Time, which os.Chtimes leaves unchanged.
func nanosToTime(n int64) time.Time {
	if n == experimentalsys.UTIME_OMIT {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// toErrno maps an error from os or os.Root to an Errno. A path that would
// escape the root is EPERM, like wazero's own refusal of "..".
func toErrno(err error) experimentalsys.Errno {
	if err == nil {
		return 0
	}
	inner := err
	var pe *os.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		inner = pe.Err
	case errors.As(err, &le):
		inner = le.Err
	}
	if _, ok := inner.(syscall.Errno); !ok && isEscape(inner) {
		return experimentalsys.EPERM
	}
	return experimentalsys.UnwrapOSError(err)
}

// isEscape reports whether err is os.Root's (unexported) "path escapes from
// parent" error.
func isEscape(err error) bool {
	return err != nil && strings.Contains(err.Error(), "escapes")
}
