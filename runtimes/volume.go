package runtimes

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Source resolves the volume's host directory, the same for every tier: a
// host path must be absolute, exist, be a directory (or, with SubPath,
// hold one) and lie, once every symlink is resolved, under one of allowed;
// SubPath is relative and may not climb out of it. A named volume
// (Managed) is not subject to allowed; a missing SubPath below it is
// created inside its directory.
//
// # Errors
// The reason, without the volume's name (the caller adds it).
func (v Volume) Source(allowed []string) (string, error) {
	if v.HostPath == "" || !filepath.IsAbs(v.HostPath) {
		return "", fmt.Errorf("hostPath %q must be an absolute path", v.HostPath)
	}
	if len(allowed) == 0 && !v.Managed {
		return "", fmt.Errorf("host volumes are not allowed on this server (no allowed host paths are configured)")
	}
	p := filepath.Clean(v.HostPath)
	if err := CheckSubPath(v.SubPath); err != nil {
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
	for _, allowed := range allowed {
		a, err := filepath.EvalSymlinks(allowed)
		if err != nil {
			continue
		}
		if real == a || strings.HasPrefix(real, strings.TrimSuffix(a, string(filepath.Separator))+string(filepath.Separator)) {
			return real, nil
		}
	}
	return "", fmt.Errorf("host path %s is not under an allowed host path (%s)", p, strings.Join(allowed, ", "))
}

// CheckSubPath refuses a subPath that is absolute or climbs out.
func CheckSubPath(subPath string) error {
	if subPath == "" {
		return nil
	}
	sub := filepath.Clean(filepath.FromSlash(subPath))
	if filepath.IsAbs(sub) || sub == ".." || strings.HasPrefix(sub, ".."+string(filepath.Separator)) {
		return fmt.Errorf("subPath %q must be relative and stay below hostPath", subPath)
	}
	return nil
}

// Label names volume i of a create in errors: its name, else its position.
func (v Volume) Label(i int) string {
	if v.Name != "" {
		return v.Name
	}
	return fmt.Sprintf("#%d", i+1)
}

// Targets checks every volume's mountPath: absolute, neither "/" nor at or
// below one of reserved (the backend's own directories), and not used
// twice. It returns the cleaned mount paths, in order.
//
// # Errors
// ErrInvalid naming the volume and the reason.
func Targets(vols []Volume, reserved ...string) ([]string, error) {
	out := make([]string, 0, len(vols))
	for i, v := range vols {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: volume %s: %s", ErrInvalid, v.Label(i), fmt.Sprintf(format, args...))
		}
		if !path.IsAbs(v.MountPath) {
			return nil, bad("mountPath %q must be an absolute path", v.MountPath)
		}
		dst := path.Clean(v.MountPath)
		if dst == "/" || slices.ContainsFunc(reserved, func(r string) bool { return dst == r || strings.HasPrefix(dst, r+"/") }) {
			return nil, bad("mountPath %s is reserved (reserved here: /, %s)", dst, strings.Join(reserved, ", "))
		}
		if slices.Contains(out, dst) {
			return nil, bad("mountPath %s is used twice", dst)
		}
		out = append(out, dst)
	}
	return out, nil
}
