//go:build tools

// Package tools pins the gVisor commands that scripts/containers/build-gvisor.sh
// builds: runsc and the containerd shim (containerd-shim-runsc-v1).
package tools

import (
	_ "gvisor.dev/gvisor/runsc"
	_ "gvisor.dev/gvisor/shim"
)
