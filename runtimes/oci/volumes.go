package oci

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

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
	out := make([]specs.Mount, 0, len(vols))
	seen := map[string]bool{}
	for i, v := range vols {
		name := v.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i+1)
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: volume %s: %s", runtimes.ErrInvalid, name, fmt.Sprintf(format, args...))
		}
		var src string
		var err error
		if check && v.Managed {
			err = checkSubPath(v.SubPath)
		} else {
			src, err = b.volumeSource(v)
		}
		if err != nil {
			return nil, bad("%v", err)
		}
		if !path.IsAbs(v.MountPath) {
			return nil, bad("mountPath %q must be an absolute path", v.MountPath)
		}
		dst := path.Clean(v.MountPath)
		if dst == "/" || dst == execdMountDir || strings.HasPrefix(dst, execdMountDir+"/") ||
			dst == runMountDir || strings.HasPrefix(dst, runMountDir+"/") || dst == "/proc" || strings.HasPrefix(dst, "/proc/") ||
			dst == "/sys" || strings.HasPrefix(dst, "/sys/") || dst == "/dev" || strings.HasPrefix(dst, "/dev/") {
			return nil, bad("mountPath %s is reserved", dst)
		}
		if seen[dst] {
			return nil, bad("mountPath %s is used twice", dst)
		}
		seen[dst] = true
		opts := []string{"rbind", "nosuid", "nodev"}
		if v.ReadOnly {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		out = append(out, specs.Mount{Destination: dst, Type: "bind", Source: src, Options: opts})
	}
	return out, nil
}

// volumeSource resolves a volume's host directory.
func (b *Containerd) volumeSource(v runtimes.Volume) (string, error) {
	if v.HostPath == "" || !filepath.IsAbs(v.HostPath) {
		return "", fmt.Errorf("hostPath %q must be an absolute path", v.HostPath)
	}
	if len(b.opts.AllowedHostPaths) == 0 && !v.Managed {
		return "", fmt.Errorf("host volumes are not allowed on this server (no allowed host paths are configured)")
	}
	p := filepath.Clean(v.HostPath)
	if err := checkSubPath(v.SubPath); err != nil {
		return "", err
	}
	if v.SubPath != "" {
		sub := filepath.Clean(filepath.FromSlash(v.SubPath))
		if v.Managed {
			// Made inside the volume's directory only: a symlink a
			// sandbox left there cannot point the mkdir elsewhere.
			root, err := os.OpenRoot(p)
			if err != nil {
				return "", fmt.Errorf("volume %s: %v", v.Claim, err)
			}
			err = root.MkdirAll(sub, 0o755)
			root.Close()
			if err != nil {
				return "", fmt.Errorf("volume %s: subPath %s: %v", v.Claim, v.SubPath, err)
			}
		}
		p = filepath.Join(p, sub)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("host path %s: %v", p, err)
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("host path %s: %v", p, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("host path %s is not a directory", p)
	}
	if v.Managed {
		base, err := filepath.EvalSymlinks(filepath.Clean(v.HostPath))
		if err == nil && (real == base || strings.HasPrefix(real, base+string(filepath.Separator))) {
			return real, nil
		}
		return "", fmt.Errorf("volume %s: subPath %s leaves the volume", v.Claim, v.SubPath)
	}
	for _, allowed := range b.opts.AllowedHostPaths {
		a, err := filepath.EvalSymlinks(allowed)
		if err != nil {
			continue
		}
		if real == a || strings.HasPrefix(real, strings.TrimSuffix(a, string(filepath.Separator))+string(filepath.Separator)) {
			return real, nil
		}
	}
	return "", fmt.Errorf("host path %s is not under an allowed host path (%s)", p, strings.Join(b.opts.AllowedHostPaths, ", "))
}

// checkSubPath refuses a subPath that is absolute or climbs out.
func checkSubPath(subPath string) error {
	if subPath == "" {
		return nil
	}
	sub := filepath.Clean(filepath.FromSlash(subPath))
	if filepath.IsAbs(sub) || sub == ".." || strings.HasPrefix(sub, ".."+string(filepath.Separator)) {
		return fmt.Errorf("subPath %q must be relative and stay below hostPath", subPath)
	}
	return nil
}
