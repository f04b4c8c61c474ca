package wsh

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"mvdan.cc/sh/v3/interp"
)

// maxSymlinkHops bounds symlink resolution, like the kernel's ELOOP limit.
const maxSymlinkHops = 40

// resolve maps the guest path p (absolute, or relative to the guest
// directory dir) to a path relative to the root, resolving symlinks with
// chroot semantics: an absolute target starts again at the guest "/", and
// ".." never climbs above it. The final component is resolved only when
// followLast is set. Missing components are kept as they are, so the result
// can name a file to create. Every later operation still goes through
// os.Root, so a symlink swapped in after resolution cannot escape either.
func (sh *shell) resolve(dir, p string, followLast bool) (string, error) {
	todo := splitGuest(guestAbs(dir, p))
	var done []string
	hops := 0
	missing := false
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		if missing || (len(todo) == 0 && !followLast) {
			done = append(done, c)
			continue
		}
		cand := path.Join(path.Join(done...), c)
		fi, err := sh.root.Lstat(cand)
		if err != nil {
			missing = true
			done = append(done, c)
			continue
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		if hops++; hops > maxSymlinkHops {
			return "", &os.PathError{Op: "resolve", Path: p, Err: syscall.ELOOP}
		}
		target, err := sh.root.Readlink(cand)
		if err != nil {
			return "", &os.PathError{Op: "readlink", Path: p, Err: underlying(err)}
		}
		if path.IsAbs(target) {
			done = done[:0]
		}
		todo = append(splitGuest(target), todo...)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return path.Join(done...), nil
}

// splitGuest splits a path into its components.
func splitGuest(p string) []string {
	return strings.FieldsFunc(p, func(r rune) bool { return r == '/' })
}

// underlying strips the *PathError / *LinkError wrapper of an os.Root error,
// whose path is root-relative and would confuse the guest.
func underlying(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// errText is the message of err as coreutils would print it.
func errText(err error) string {
	err = underlying(err)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "No such file or directory"
	case errors.Is(err, fs.ErrExist):
		return "File exists"
	case errors.Is(err, fs.ErrPermission):
		return "Permission denied"
	case errors.Is(err, syscall.ENOTDIR):
		return "Not a directory"
	case errors.Is(err, syscall.EISDIR):
		return "Is a directory"
	case errors.Is(err, syscall.ENOTEMPTY):
		return "Directory not empty"
	case errors.Is(err, syscall.ELOOP):
		return "Too many levels of symbolic links"
	case errors.Is(err, syscall.EROFS):
		return "Read-only file system"
	}
	if s := err.Error(); strings.Contains(s, "escapes from parent") {
		return "Permission denied (outside the workspace)"
	}
	return err.Error()
}

// pathErr builds the error the interpreter prints for a guest path.
func pathErr(op, guest string, err error) error {
	return &os.PathError{Op: op, Path: guest, Err: errors.New(errText(err))}
}

// openHandler opens redirection targets inside the root.
func (sh *shell) openHandler(ctx context.Context, p string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
	hc := interp.HandlerCtx(ctx)
	abs := guestAbs(hc.Dir, p)
	switch abs {
	case "/dev/null":
		return devNull{}, nil
	case "/dev/stdout":
		return nopRWC{w: hc.Stdout}, nil
	case "/dev/stderr":
		return nopRWC{w: hc.Stderr}, nil
	case "/dev/stdin":
		return nopRWC{r: hc.Stdin}, nil
	case "/dev/tcp/127.0.0.1/44771", "/dev/tcp/localhost/44771":
		// The OpenSandbox code-interpreter SDK probes its Jupyter port
		// this way before first use. In a wasm sandbox the interpreters
		// live in the server, so the probe succeeds.
		return devNull{}, nil
	}
	if strings.HasPrefix(abs, "/dev/tcp/") || strings.HasPrefix(abs, "/dev/udp/") {
		return nil, pathErr("open", p, errors.New("network is not available in a wasm sandbox"))
	}
	f, err := sh.openFile(hc.Dir, p, flag, perm)
	if err != nil {
		return nil, pathErr("open", p, err)
	}
	return f, nil
}

// openFile opens the guest path p (relative to dir) in the root.
func (sh *shell) openFile(dir, p string, flag int, perm os.FileMode) (*os.File, error) {
	rel, err := sh.resolve(dir, p, true)
	if err != nil {
		return nil, err
	}
	return sh.root.OpenFile(rel, flag, perm)
}

// readDirHandler lists directories for globbing.
func (sh *shell) readDirHandler(ctx context.Context, p string) ([]fs.DirEntry, error) {
	hc := interp.HandlerCtx(ctx)
	ents, err := sh.readDir(hc.Dir, p)
	if err != nil {
		return nil, pathErr("readdir", p, err)
	}
	return ents, nil
}

// readDir lists the guest directory p sorted by name.
func (sh *shell) readDir(dir, p string) ([]fs.DirEntry, error) {
	f, err := sh.openFile(dir, p, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, err
}

// statHandler stats files for test, cd and globbing.
func (sh *shell) statHandler(ctx context.Context, name string, followSymlinks bool) (fs.FileInfo, error) {
	hc := interp.HandlerCtx(ctx)
	fi, err := sh.stat(hc.Dir, name, followSymlinks)
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return fi, nil
}

// stat stats the guest path p (relative to dir).
func (sh *shell) stat(dir, p string, follow bool) (fs.FileInfo, error) {
	if guestAbs(dir, p) == "/dev/null" {
		return devNullInfo{}, nil
	}
	rel, err := sh.resolve(dir, p, follow)
	if err != nil {
		return nil, err
	}
	if follow {
		return sh.root.Stat(rel)
	}
	return sh.root.Lstat(rel)
}

// accessHandler answers test -r/-w/-x and cd's permission check from the
// file's mode bits (the guest is the owner of everything in its workspace).
func (sh *shell) accessHandler(ctx context.Context, p string, mode interp.AccessMode) error {
	hc := interp.HandlerCtx(ctx)
	fi, err := sh.stat(hc.Dir, p, true)
	if err != nil {
		return pathErr("access", p, err)
	}
	perm := fi.Mode().Perm()
	if (mode&interp.AccessRead != 0 && perm&0o444 == 0) ||
		(mode&interp.AccessWrite != 0 && perm&0o222 == 0) ||
		(mode&interp.AccessExec != 0 && perm&0o111 == 0) {
		return &os.PathError{Op: "access", Path: p, Err: fs.ErrPermission}
	}
	return nil
}

// devNull is /dev/null.
type devNull struct{}

func (devNull) Read([]byte) (int, error)    { return 0, io.EOF }
func (devNull) Write(p []byte) (int, error) { return len(p), nil }
func (devNull) Close() error                { return nil }

// devNullInfo is the FileInfo of /dev/null.
type devNullInfo struct{}

func (devNullInfo) Name() string       { return "null" }
func (devNullInfo) Size() int64        { return 0 }
func (devNullInfo) Mode() fs.FileMode  { return fs.ModeDevice | fs.ModeCharDevice | 0o666 }
func (devNullInfo) ModTime() time.Time { return time.Time{} }
func (devNullInfo) IsDir() bool        { return false }
func (devNullInfo) Sys() any           { return nil }

// nopRWC adapts the shell's own streams to /dev/stdout and friends; closing
// it leaves the stream open.
type nopRWC struct {
	r io.Reader
	w io.Writer
}

func (n nopRWC) Read(p []byte) (int, error) {
	if n.r == nil {
		return 0, io.EOF
	}
	return n.r.Read(p)
}

func (n nopRWC) Write(p []byte) (int, error) {
	if n.w == nil {
		return 0, fs.ErrPermission
	}
	return n.w.Write(p)
}

func (nopRWC) Close() error { return nil }

// ctxStdin makes reads of the shell's stdin stop when ctx ends: the
// interpreter's stdin is an *os.File (usually a pipe), whose blocking read
// is interrupted by a read deadline. The returned func releases the watch.
func ctxStdin(ctx context.Context, r io.Reader) (io.Reader, func()) {
	if r == nil {
		return strings.NewReader(""), func() {}
	}
	f, ok := r.(*os.File)
	if !ok {
		return r, func() {}
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	return f, func() { stop() }
}
