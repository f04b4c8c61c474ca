// Package mounts makes and removes the bind mounts that put volumes into
// wasm sandboxes' workspaces, and removes directories without ever reaching
// into a volume mounted below them.
//
// A wasm sandbox's guests, its shell and the files API all see the
// workspace through one os.Root, so a volume is a bind mount of its host
// directory onto the mount point inside the workspace: every path walk
// crosses into it like into any directory. What must never happen is that
// removing the workspace (a delete, a failed create, a fork undone) walks
// into the volume and removes the user's files; RemoveAll here detaches
// every mount below a directory first and refuses to remove anything while
// one is left.
package mounts

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// mountInfo is the kernel's table of this process's mounts.
const mountInfo = "/proc/self/mountinfo"

// Under lists the mount points at or below dir, deepest first; dir's own
// symbolic links are resolved first, since the kernel's table names real
// paths. A dir that does not exist has none.
//
// # Errors
// When the mount table cannot be read.
func Under(dir string) ([]string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f, err := os.Open(mountInfo)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // no such table: no bind mounts either (not Linux)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescape(fields[4])
		if mp == real || strings.HasPrefix(mp, strings.TrimSuffix(real, "/")+"/") {
			out = append(out, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", mountInfo, err)
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return slices.Compact(out), nil
}

// IsMountPoint reports whether path (symbolic links resolved) is a mount
// point.
//
// # Errors
// When the mount table cannot be read.
func IsMountPoint(path string) (bool, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false, err
	}
	mps, err := Under(real)
	if err != nil {
		return false, err
	}
	return slices.Contains(mps, real), nil
}

// unescape undoes mountinfo's octal escapes (\040 for a space, \011 a
// tab, \012 a newline, \134 a backslash).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// DetachAll detaches every mount at or below dir, deepest first, and
// returns how many there were.
//
// # Errors
// When the table cannot be read or a mount cannot be detached (those
// after it are left).
func DetachAll(dir string) (int, error) {
	mps, err := Under(dir)
	if err != nil {
		return 0, err
	}
	for _, mp := range mps {
		if err := Detach(mp); err != nil {
			return 0, fmt.Errorf("detach the volume mounted at %s: %w", mp, err)
		}
	}
	return len(mps), nil
}

// RemoveAll detaches every mount at or below dir (deepest first), checks
// that none is left, and then removes dir like os.RemoveAll. A missing dir
// is not an error.
//
// # Errors
// When a mount cannot be detached or the table cannot be read; dir is then
// left as it is, so nothing of a mounted volume is removed.
func RemoveAll(dir string) error {
	n, err := DetachAll(dir)
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if n > 0 {
		left, err := Under(dir)
		if err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
		if len(left) > 0 {
			return fmt.Errorf("remove %s: %s is still mounted; nothing was removed", dir, left[0])
		}
	}
	return os.RemoveAll(dir)
}
