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
//
// # Errors
// runtimes.ErrInvalid naming the volume and the reason.
func (b *Containerd) volumeMounts(vols []runtimes.Volume) ([]specs.Mount, error) {
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
		src, err := b.volumeSource(v)
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
	if len(b.opts.AllowedHostPaths) == 0 {
		return "", fmt.Errorf("host volumes are not allowed on this server (no allowed host paths are configured)")
	}
	p := filepath.Clean(v.HostPath)
	if v.SubPath != "" {
		sub := filepath.Clean(filepath.FromSlash(v.SubPath))
		if filepath.IsAbs(sub) || sub == ".." || strings.HasPrefix(sub, ".."+string(filepath.Separator)) {
			return "", fmt.Errorf("subPath %q must be relative and stay below hostPath", v.SubPath)
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
