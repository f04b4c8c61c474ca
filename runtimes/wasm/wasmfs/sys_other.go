//go:build !linux

package wasmfs

import (
	"os"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// Flags only Linux needs passed through; elsewhere they are dropped.
const (
	oDirectory = 0
	oDsync     = 0
	oRsync     = 0
)

func setAppend(*os.File, bool) experimentalsys.Errno { return experimentalsys.ENOSYS }

func pwriteFd(f *os.File, buf []byte, off int64) (int, experimentalsys.Errno) {
	return 0, experimentalsys.ENOSYS
}

func futimens(*os.File, int64, int64) experimentalsys.Errno { return experimentalsys.ENOSYS }
