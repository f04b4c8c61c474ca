//go:build !unix

package execd

import (
	"io/fs"
	"time"
)

// fileOwner reports no owner on platforms without Unix ids.
func fileOwner(fs.FileInfo) (uid, gid uint32, ok bool) { return 0, 0, false }

// fileCreated is the modification time.
func fileCreated(fi fs.FileInfo) time.Time { return fi.ModTime() }
