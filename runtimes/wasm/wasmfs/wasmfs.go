// Package wasmfs gives a wasm guest a filesystem backed by an os.Root, so
// that neither ".." nor symlinks can reach outside the sandbox's workspace.
package wasmfs

import (
	"os"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// New returns a wazero filesystem whose "/" is root.
// TODO(wasmfs): implementation in progress.
func New(root *os.Root) experimentalsys.FS {
	return experimentalsys.UnimplementedFS{}
}

// Switch is a filesystem whose backing root is bound after the guest has
// started: pooled interpreters are instantiated with a Switch and bound to a
// sandbox's workspace when claimed. Before Bind every call fails with EACCES.
type Switch struct {
	experimentalsys.UnimplementedFS
}

// NewSwitch returns an unbound Switch.
func NewSwitch() *Switch { return &Switch{} }

// Bind sets the backing root. It may be called once.
func (s *Switch) Bind(root *os.Root) {}
