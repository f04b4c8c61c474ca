//go:build unix

package execd

import (
	"io/fs"
	"syscall"
	"time"
)

// fileOwner returns the uid and gid recorded in fi, when the platform has them.
func fileOwner(fi fs.FileInfo) (uid, gid uint32, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return st.Uid, st.Gid, true
}

// fileCreated is the best creation time available portably: the
// modification time (Linux stat has no birth time).
func fileCreated(fi fs.FileInfo) time.Time {
	return fi.ModTime()
}
