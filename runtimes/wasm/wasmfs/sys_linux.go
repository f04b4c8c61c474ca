//go:build linux

package wasmfs

import (
	"os"
	"syscall"
	"unsafe"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

const (
	oDirectory = syscall.O_DIRECTORY
	oDsync     = syscall.O_DSYNC
	oRsync     = syscall.O_RSYNC
	// utimeOmit is Linux's UTIME_OMIT nanoseconds marker.
	utimeOmit = (1 << 30) - 2
)

// control runs fn with the descriptor of f, keeping it open meanwhile.
func control(f *os.File, fn func(fd uintptr) syscall.Errno) experimentalsys.Errno {
	rc, err := f.SyscallConn()
	if err != nil {
		return toErrno(err)
	}
	var e syscall.Errno
	if err := rc.Control(func(fd uintptr) { e = fn(fd) }); err != nil {
		return toErrno(err)
	}
	if e != 0 {
		return experimentalsys.UnwrapOSError(e)
	}
	return 0
}

// setAppend sets or clears O_APPEND on the open descriptor.
func setAppend(f *os.File, enable bool) experimentalsys.Errno {
	return control(f, func(fd uintptr) syscall.Errno {
		fl, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		if e != 0 {
			return e
		}
		if enable {
			fl |= syscall.O_APPEND
		} else {
			fl &^= syscall.O_APPEND
		}
		_, _, e = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETFL, fl)
		return e
	})
}

// pwriteFd writes buf at off with pwrite(2) directly, for descriptors
// os.File refuses WriteAt on (opened with O_APPEND).
func pwriteFd(f *os.File, buf []byte, off int64) (int, experimentalsys.Errno) {
	var n int
	errno := control(f, func(fd uintptr) syscall.Errno {
		for len(buf) > 0 {
			m, err := syscall.Pwrite(int(fd), buf, off)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				return err.(syscall.Errno)
			}
			if m == 0 {
				return syscall.EIO
			}
			n += m
			buf = buf[m:]
			off += int64(m)
		}
		return 0
	})
	return n, errno
}

// futimens sets the times of the open file; UTIME_OMIT keeps one.
func futimens(f *os.File, atim, mtim int64) experimentalsys.Errno {
	ts := [2]syscall.Timespec{toTimespec(atim), toTimespec(mtim)}
	return control(f, func(fd uintptr) syscall.Errno {
		// utimensat(fd, NULL, times, 0) is futimens(fd, times).
		_, _, e := syscall.Syscall6(syscall.SYS_UTIMENSAT, fd, 0, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		return e
	})
}

func toTimespec(n int64) syscall.Timespec {
	if n == experimentalsys.UTIME_OMIT {
		return syscall.Timespec{Nsec: utimeOmit}
	}
	return syscall.NsecToTimespec(n)
}
