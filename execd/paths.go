package execd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// maxGuestPath bounds the length of a guest path a client may send (Linux
// PATH_MAX).
const maxGuestPath = 4096

// guestName converts a guest path, as clients send it, into a name for the
// sandbox's os.Root. Guest "/" is the root itself (name "."); absolute paths
// lose their leading slash; relative paths are relative to "/". "." and empty
// components are dropped and ".." is resolved lexically.
//
// guestName only checks the text. Symlinks are resolved by os.Root, which
// refuses any that leave the root.
//
// # Errors
// errInvalidPath for an empty path, a NUL byte, a path longer than
// maxGuestPath, or a ".." that climbs above "/".
func guestName(p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("%w: empty path", errInvalidPath)
	case len(p) > maxGuestPath:
		return "", fmt.Errorf("%w: path longer than %d bytes", errInvalidPath, maxGuestPath)
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("%w: path contains a NUL byte", errInvalidPath)
	}
	parts := make([]string, 0, strings.Count(p, "/")+1)
	for seg := range strings.SplitSeq(p, "/") {
		switch seg {
		case "", ".":
		case "..":
			if len(parts) == 0 {
				return "", fmt.Errorf("%w: %q climbs above /", errInvalidPath, p)
			}
			parts = parts[:len(parts)-1]
		default:
			parts = append(parts, seg)
		}
	}
	if len(parts) == 0 {
		return ".", nil
	}
	return strings.Join(parts, "/"), nil
}

// guestPath is the absolute guest path of an os.Root name produced by
// guestName: "." is "/", "a/b" is "/a/b".
func guestPath(name string) string {
	if name == "." || name == "" {
		return "/"
	}
	return "/" + name
}

// joinName joins a root name and a child base name.
func joinName(dir, base string) string {
	if dir == "." {
		return base
	}
	return dir + "/" + base
}

// parentName is the root name of the directory holding name ("." for a
// top-level entry).
func parentName(name string) string {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return "."
	}
	return name[:i]
}

// baseName is the last component of a root name.
func baseName(name string) string {
	return name[strings.LastIndexByte(name, '/')+1:]
}

// escapeMessage is the text of the (unexported) error os.Root returns when
// a name or a symlink leads outside the root. os offers no exported
// sentinel for it, so it is recognised by its text, in this one place.
const escapeMessage = "path escapes from parent"

// isEscape reports whether err, anywhere in its chain, is os.Root refusing
// to leave the root.
func isEscape(err error) bool {
	for err != nil {
		if err.Error() == escapeMessage {
			return true
		}
		err = errors.Unwrap(err)
	}
	return false
}

// fsErr rewrites an error from an os.Root operation on guest path guest so
// that it names the guest path (never a host path) and wraps the sentinel
// writeFilesErr maps to a status:
//   - escapes, symlink loops and overlong names: errInvalidPath (400);
//   - a missing file or a non-directory used as a directory: fs.ErrNotExist (404);
//   - an operation that does not fit the file (a directory where a file is
//     needed, a non-empty directory, moving a directory into itself):
//     errFileKind (400);
//   - everything else keeps its errno (fs.ErrExist, fs.ErrPermission, or an
//     internal error).
func fsErr(guest string, err error) error {
	if err == nil {
		return nil
	}
	if isEscape(err) {
		return fmt.Errorf("%w: %s leads outside the sandbox", errInvalidPath, guest)
	}
	inner := err
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		inner = pe.Err
	case errors.As(err, &le):
		inner = le.Err
	}
	switch {
	case errors.Is(inner, syscall.ENOTDIR):
		return fmt.Errorf("%s: %w (a parent is not a directory)", guest, fs.ErrNotExist)
	case errors.Is(inner, syscall.ELOOP), errors.Is(inner, syscall.ENAMETOOLONG):
		return fmt.Errorf("%w: %s: %v", errInvalidPath, guest, inner)
	case errors.Is(inner, syscall.EISDIR), errors.Is(inner, syscall.ENOTEMPTY),
		errors.Is(inner, syscall.EINVAL), errors.Is(inner, syscall.EBUSY):
		return fmt.Errorf("%w: %s: %v", errFileKind, guest, inner)
	}
	return fmt.Errorf("%s: %w", guest, inner)
}
