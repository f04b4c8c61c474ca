package wasmfs

import (
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"
)

// GuestRoot is the workspace root as the host-side programs of a sandbox
// (the shell's built-in commands, JavaScript's fs) use it on the guest's
// behalf: every call that would change something in SystemDirs (the
// sandbox's /etc and /proc) fails with EROFS, as on a read-only mount, and
// what it creates belongs to the guest user (GuestUID, GuestGID) when the
// server may give it away, as if the sandbox's user had made it. Names are
// root-relative and already resolved by the caller (the shell resolves
// symlinks itself), so a symlink into /etc is refused too.
type GuestRoot struct{ *os.Root }

// writeFlags are the open flags that change a file.
const writeFlags = os.O_WRONLY | os.O_RDWR | os.O_CREATE | os.O_TRUNC | os.O_APPEND

func readOnly(op, name string) error {
	return &os.PathError{Op: op, Path: name, Err: syscall.EROFS}
}

func (r GuestRoot) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	if flag&writeFlags != 0 && IsSystem(name) {
		return nil, readOnly("open", name)
	}
	fresh := flag&os.O_CREATE != 0 && !exists(r.Root, name)
	f, err := r.Root.OpenFile(name, flag, perm)
	if err == nil && fresh {
		ownFile(f)
	}
	return f, err
}

func (r GuestRoot) WriteFile(name string, data []byte, perm fs.FileMode) error {
	if IsSystem(name) {
		return readOnly("open", name)
	}
	f, err := r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (r GuestRoot) Mkdir(name string, perm fs.FileMode) error {
	if IsSystem(name) {
		return readOnly("mkdir", name)
	}
	err := r.Root.Mkdir(name, perm)
	if err == nil {
		own(r.Root, name)
	}
	return err
}

func (r GuestRoot) MkdirAll(name string, perm fs.FileMode) error {
	if IsSystem(name) {
		if fi, err := r.Root.Stat(name); err == nil && fi.IsDir() {
			return nil // mkdir -p of an existing directory changes nothing
		}
		return readOnly("mkdir", name)
	}
	// The directories it makes, each as Mkdir would.
	var missing []string
	for p := path.Clean(name); p != "." && p != "/" && !exists(r.Root, p); p = path.Dir(p) {
		missing = append(missing, p)
	}
	if err := r.Root.MkdirAll(name, perm); err != nil {
		return err
	}
	for _, p := range missing {
		own(r.Root, p)
	}
	return nil
}

func (r GuestRoot) Remove(name string) error {
	if IsSystem(name) {
		return readOnly("remove", name)
	}
	return r.Root.Remove(name)
}

func (r GuestRoot) RemoveAll(name string) error {
	if IsSystem(name) {
		return readOnly("remove", name)
	}
	return r.Root.RemoveAll(name)
}

func (r GuestRoot) Rename(from, to string) error {
	if IsSystem(from) || IsSystem(to) {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: syscall.EROFS}
	}
	return r.Root.Rename(from, to)
}

func (r GuestRoot) Chmod(name string, mode fs.FileMode) error {
	if IsSystem(name) {
		return readOnly("chmod", name)
	}
	return r.Root.Chmod(name, mode)
}

func (r GuestRoot) Chtimes(name string, atime, mtime time.Time) error {
	if IsSystem(name) {
		return readOnly("chtimes", name)
	}
	return r.Root.Chtimes(name, atime, mtime)
}

func (r GuestRoot) Symlink(target, name string) error {
	if IsSystem(name) {
		return &os.LinkError{Op: "symlink", Old: target, New: name, Err: syscall.EROFS}
	}
	err := r.Root.Symlink(target, name)
	if err == nil {
		own(r.Root, name)
	}
	return err
}

func (r GuestRoot) Link(oldname, newname string) error {
	if IsSystem(oldname) || IsSystem(newname) {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: syscall.EROFS}
	}
	return r.Root.Link(oldname, newname)
}
