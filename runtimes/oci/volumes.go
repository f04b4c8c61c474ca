package oci

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hybox-dev/hybox/runtimes"
)

// volumeMounts checks volumes against Options.AllowedHostPaths and returns
// their bind mounts. A host path must be absolute, exist, be a directory
// (or, with SubPath, hold one) and lie, once every symlink is resolved,
// under an allowed prefix; SubPath is relative and may not climb out of it.
// A named volume (Managed) is not subject to the allowed prefixes; with
// check set (Validate, before the server has made its directory) its
// directory is not looked at yet.
//
// # Errors
// runtimes.ErrInvalid naming the volume and the reason.
func (b *Containerd) volumeMounts(vols []runtimes.Volume, check bool) ([]specs.Mount, error) {
	dsts, err := runtimes.Targets(vols, execdMountDir, runMountDir, "/proc", "/sys", "/dev")
	if err != nil {
		return nil, err
	}
	out := make([]specs.Mount, 0, len(vols))
	for i, v := range vols {
		var src string
		var err error
		if check && v.Managed {
			err = runtimes.CheckSubPath(v.SubPath)
		} else {
			src, err = v.Source(b.opts.AllowedHostPaths)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: volume %s: %v", runtimes.ErrInvalid, v.Label(i), err)
		}
		opts := []string{"rbind", "nosuid", "nodev"}
		if v.ReadOnly {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		out = append(out, specs.Mount{Destination: dsts[i], Type: "bind", Source: src, Options: opts})
	}
	return out, nil
}
