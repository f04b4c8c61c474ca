package mounts

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Bind mounts the directory src onto the directory dst (not recursively:
// mounts below src are not carried along), nosuid and nodev, read-only when
// readOnly is set, and private, so that it propagates to no other mount namespace.
// dst is given as an open directory: the mount lands on that directory
// even if its path is changed meanwhile (the caller opened it inside the
// workspace's os.Root, so it is confined there).
//
// # Errors
// The mount(2) errors (EPERM when the process may not mount); nothing is
// left mounted on failure.
func Bind(src string, dst *os.File, readOnly bool) error {
	target := "/proc/self/fd/" + strconv.Itoa(int(dst.Fd()))
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	// The magic link now resolves to the directory under the mount; the
	// mount itself is at the directory's path, named by the kernel.
	at, err := os.Readlink(target)
	if err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV)
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", at, "", flags, ""); err != nil {
		_ = unix.Unmount(at, unix.MNT_DETACH)
		return fmt.Errorf("remount %s: %w", at, err)
	}
	if err := unix.Mount("", at, "", unix.MS_PRIVATE, ""); err != nil {
		_ = unix.Unmount(at, unix.MNT_DETACH)
		return fmt.Errorf("make %s private: %w", at, err)
	}
	return nil
}

// Detach unmounts mp lazily: it leaves the namespace at once, and the
// kernel frees it when the last open file in it is closed.
func Detach(mp string) error {
	err := unix.Unmount(mp, unix.MNT_DETACH)
	if err == unix.EINVAL || err == unix.ENOENT {
		return nil // not (or no longer) a mount point
	}
	return err
}

// Supported reports whether this process can make bind mounts, and why not.
func Supported() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "the server is not running as root, and volumes are bind mounts"
	}
	return true, ""
}
