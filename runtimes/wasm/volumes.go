package wasm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hybox-dev/hybox/internal/mounts"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
)

// Volumes in a wasm sandbox are bind mounts of their host directories onto
// their mount points inside the workspace (internal/mounts). The guests,
// the shell and the files API all reach the workspace through one os.Root,
// which walks into a mounted directory like into any other, so each of
// them sees the volume at mountPath with nothing of its own to learn; a
// read-only volume is a read-only mount (EROFS), and symbolic links in a
// volume resolve inside the guest's "/" as everywhere else. A mount stays
// when the server stops (so a restart finds it) and is made again when a
// sandbox is restored after a reboot; removing a workspace detaches its
// mounts before anything is removed (mounts.RemoveAll), and copies of the
// workspace (fork, per-call workspace isolation) leave volumes out: they
// are shared storage, not the sandbox's own files.

// reservedMounts are the guest directories a volume may not cover: the
// system files the backend writes (wasmfs.SystemDirs).
func reservedMounts() []string {
	var out []string
	for _, d := range wasmfs.SystemDirs() {
		out = append(out, "/"+d)
	}
	return out
}

// checkVolumes refuses volumes this server cannot mount into a wasm
// sandbox: bad or reserved mount paths, host paths outside the allowed
// ones or missing, and any volume when the server cannot make bind mounts.
//
// # Errors
// runtimes.ErrInvalid or runtimes.ErrNotSupported with the reason.
func (r *Runtime) checkVolumes(vols []runtimes.Volume) error {
	if len(vols) == 0 {
		return nil
	}
	if _, err := runtimes.Targets(vols, reservedMounts()...); err != nil {
		return err
	}
	for i, v := range vols {
		var err error
		if v.Managed {
			err = runtimes.CheckSubPath(v.SubPath) // its directory is made by the server later
		} else {
			_, err = v.Source(r.opts.AllowedHostPaths)
		}
		if err != nil {
			return fmt.Errorf("%w: volume %s: %v", runtimes.ErrInvalid, v.Label(i), err)
		}
	}
	if ok, why := mounts.Supported(); !ok {
		return fmt.Errorf("%w: volumes cannot be mounted into a wasm sandbox on this server: %s; create the sandbox with extensions {\"hybox.io/runtime\":\"runc\"}", runtimes.ErrNotSupported, why)
	}
	return nil
}

// mountVolumes mounts spec's volumes that are not mounted yet into the
// workspace (all of them at create; none after a restart; all again after
// a reboot). The mount points are made inside the workspace through root,
// so a symbolic link there cannot point a mount outside it.
//
// # Errors
// runtimes.ErrInvalid for a volume that cannot be resolved; mount errors.
// What this call mounted is detached again on error.
func (r *Runtime) mountVolumes(root *os.Root, spec runtimes.Spec) (err error) {
	if len(spec.Volumes) == 0 {
		return nil
	}
	dsts, err := runtimes.Targets(spec.Volumes, reservedMounts()...)
	if err != nil {
		return err
	}
	have, err := mounts.Under(fsDir(spec))
	if err != nil {
		return err
	}
	var made []string
	defer func() {
		if err != nil {
			for _, mp := range slices.Backward(made) {
				_ = mounts.Detach(mp)
			}
		}
	}()
	for i, v := range spec.Volumes {
		src, err := v.Source(r.opts.AllowedHostPaths)
		if err != nil {
			return fmt.Errorf("%w: volume %s: %v", runtimes.ErrInvalid, v.Label(i), err)
		}
		rel := strings.TrimPrefix(dsts[i], "/")
		if err := root.MkdirAll(rel, 0o755); err != nil {
			return fmt.Errorf("volume %s: mount point %s: %w", v.Label(i), dsts[i], err)
		}
		f, err := root.Open(rel)
		if err != nil {
			return fmt.Errorf("volume %s: mount point %s: %w", v.Label(i), dsts[i], err)
		}
		at, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
		if err == nil && !slices.Contains(have, filepath.Clean(at)) {
			err = mounts.Bind(src, f, v.ReadOnly)
			if err == nil {
				made = append(made, at)
			}
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("volume %s: mount %s at %s: %w", v.Label(i), src, dsts[i], err)
		}
	}
	return nil
}

// workspaceMounts lists the mount points in the workspace dir, relative
// to it.
func workspaceMounts(dir string) (map[string]bool, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	mps, err := mounts.Under(real)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, mp := range mps {
		if rel, err := filepath.Rel(real, mp); err == nil {
			out[rel] = true
		}
	}
	return out, nil
}
