package wsh

import (
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
)

// sysRoot is the workspace root as the shell's commands use it: every call
// that would change something in wasmfs.SystemDirs (the sandbox's /etc and /proc)
// fails with EROFS, as on a read-only mount. Names are root-relative and
// already resolved by shell.resolve, so a symlink into /etc is refused too.
type sysRoot struct{ *os.Root }

// writeFlags are the open flags that change a file.
const writeFlags = os.O_WRONLY | os.O_RDWR | os.O_CREATE | os.O_TRUNC | os.O_APPEND

func readOnly(op, name string) error {
	return &os.PathError{Op: op, Path: name, Err: syscall.EROFS}
}

func (r sysRoot) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	if flag&writeFlags != 0 && wasmfs.IsSystem(name) {
		return nil, readOnly("open", name)
	}
	return r.Root.OpenFile(name, flag, perm)
}

func (r sysRoot) WriteFile(name string, data []byte, perm fs.FileMode) error {
	if wasmfs.IsSystem(name) {
		return readOnly("open", name)
	}
	return r.Root.WriteFile(name, data, perm)
}

func (r sysRoot) Mkdir(name string, perm fs.FileMode) error {
	if wasmfs.IsSystem(name) {
		return readOnly("mkdir", name)
	}
	return r.Root.Mkdir(name, perm)
}

func (r sysRoot) MkdirAll(name string, perm fs.FileMode) error {
	if wasmfs.IsSystem(name) {
		if fi, err := r.Root.Stat(name); err == nil && fi.IsDir() {
			return nil // mkdir -p of an existing directory changes nothing
		}
		return readOnly("mkdir", name)
	}
	return r.Root.MkdirAll(name, perm)
}

func (r sysRoot) Remove(name string) error {
	if wasmfs.IsSystem(name) {
		return readOnly("remove", name)
	}
	return r.Root.Remove(name)
}

func (r sysRoot) RemoveAll(name string) error {
	if wasmfs.IsSystem(name) {
		return readOnly("remove", name)
	}
	return r.Root.RemoveAll(name)
}

func (r sysRoot) Rename(from, to string) error {
	if wasmfs.IsSystem(from) || wasmfs.IsSystem(to) {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: syscall.EROFS}
	}
	return r.Root.Rename(from, to)
}

func (r sysRoot) Chmod(name string, mode fs.FileMode) error {
	if wasmfs.IsSystem(name) {
		return readOnly("chmod", name)
	}
	return r.Root.Chmod(name, mode)
}

func (r sysRoot) Chtimes(name string, atime, mtime time.Time) error {
	if wasmfs.IsSystem(name) {
		return readOnly("chtimes", name)
	}
	return r.Root.Chtimes(name, atime, mtime)
}

func (r sysRoot) Symlink(target, name string) error {
	if wasmfs.IsSystem(name) {
		return &os.LinkError{Op: "symlink", Old: target, New: name, Err: syscall.EROFS}
	}
	return r.Root.Symlink(target, name)
}

func (r sysRoot) Link(oldname, newname string) error {
	if wasmfs.IsSystem(oldname) || wasmfs.IsSystem(newname) {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: syscall.EROFS}
	}
	return r.Root.Link(oldname, newname)
}
