package jsguest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
	"github.com/tetratelabs/wazero/api"
)

// Names of the host functions the prelude receives. Each is installed as a
// global before the prelude runs; the prelude captures and deletes them.
var hostFuncNames = []string{"__hy_stdout", "__hy_stderr", "__hy_exit", "__hy_stdin", "__hy_fs", "__hy_pstate", "__hy_presult", "__hy_fetch"}

// runIO is where one run's output goes and what it may read.
type runIO struct {
	stdout, stderr func([]byte) error
	limit          int64 // output cap in bytes, 0 = none
	written        int64
	stdin          io.Reader
	ctx            context.Context // the run's context, for blocking reads
	stdinData      []byte
	stdinRead      bool
	exitCode       int
}

// installPrelude defines the host functions and evaluates the prelude,
// keeping its internal object in v.hy.
func (v *vm) installPrelude(src string) error {
	global := v.call32(v.x.getGlobal)
	defer v.freeValue(global)
	for _, name := range hostFuncNames {
		p := v.cstring([]byte(name))
		fn := v.call32(v.x.newHostFunction, uint64(p), uint64(len(name)), 0)
		v.call(v.x.free, uint64(p))
		if v.isException(fn) {
			v.freeValue(fn)
			return v.initError("host function " + name)
		}
		v.setProp(global, name, fn)
		v.freeValue(fn)
	}
	hy := v.eval(src, "hybox:prelude", evalGlobal)
	if v.isException(hy) {
		v.freeValue(hy)
		return v.initError("prelude")
	}
	v.hy = hy
	return nil
}

// initError describes the pending exception of a failed initialisation.
func (v *vm) initError(what string) error {
	exc := v.takeException()
	defer v.freeValue(exc)
	s, _ := v.str(exc)
	return errors.Join(errTrap, errors.New("quickjs "+what+": "+s))
}

// hostCall is the trampoline for every host function: it dispatches on the
// function name. Argument boxes are borrowed; the returned box is owned by
// the guest. Returning 0 raises the pending exception.
func hostCall(ctx context.Context, mod api.Module, stack []uint64) {
	v := vmOf(ctx)
	namePtr, nameLen := uint32(stack[0]), uint32(stack[1])
	argc, argv := uint32(stack[3]), uint32(stack[4])
	if v == nil {
		stack[0] = 0
		return
	}
	nb, _ := mod.Memory().Read(namePtr, nameLen)
	args := make([]uint32, argc)
	for i := range args {
		args[i], _ = mod.Memory().ReadUint32Le(argv + uint32(4*i))
	}
	stack[0] = uint64(v.dispatch(string(nb), args))
}

// arg returns argument i as a string ("" when absent).
func (v *vm) arg(args []uint32, i int) string {
	if i >= len(args) {
		return ""
	}
	s, _ := v.str(args[i])
	return s
}

func (v *vm) undefined() uint32 { return v.call32(v.x.getUndefined) }

func (v *vm) dispatch(name string, args []uint32) uint32 {
	switch name {
	case "__hy_stdout", "__hy_stderr":
		if !v.emit(name == "__hy_stderr", v.arg(args, 0)) {
			return v.throw("Error", "", "output stopped")
		}
		return v.undefined()
	case "__hy_exit":
		code, _ := strconv.Atoi(v.arg(args, 0))
		if v.io != nil {
			v.io.exitCode = code
		}
		v.stop.CompareAndSwap(uint32(stopNone), uint32(stopExit))
		return v.throw("Error", "", "process.exit("+strconv.Itoa(code)+")")
	case "__hy_stdin":
		return v.readStdin()
	case "__hy_fs":
		return v.fsOp(args)
	case "__hy_fetch":
		return v.fetch(args)
	case "__hy_pstate":
		if len(args) == 0 || v.call32(v.x.isPromise, uint64(args[0])) == 0 {
			return v.call32(v.x.newNumber, api.EncodeF64(-1))
		}
		return v.call32(v.x.newNumber, api.EncodeF64(float64(v.call32(v.x.promiseState, uint64(args[0])))))
	case "__hy_presult":
		if len(args) == 0 || v.call32(v.x.isPromise, uint64(args[0])) == 0 {
			return v.undefined()
		}
		return v.call32(v.x.promiseResult, uint64(args[0]))
	}
	return v.throw("Error", "", "unknown host function "+name)
}

// throw raises an Error with the given name (when not "Error"), code (when
// not "") and message in the guest, and returns 0 for the trampoline.
func (v *vm) throw(name, code, msg string, extra ...string) uint32 {
	errBox := v.call32(v.x.newError)
	set := func(k, val string) {
		s := v.newString([]byte(val))
		v.setProp(errBox, k, s)
		v.freeValue(s)
	}
	set("message", msg)
	if name != "Error" {
		set("name", name)
	}
	if code != "" {
		set("code", code)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		set(extra[i], extra[i+1])
	}
	v.freeValue(v.call32(v.x.throw, uint64(errBox)))
	v.freeValue(errBox)
	return 0
}

// emit writes guest output, enforcing the output cap. It reports false when
// the guest must stop writing.
func (v *vm) emit(toStderr bool, s string) bool {
	rio := v.io
	if rio == nil {
		return true
	}
	if v.stop.Load() != uint32(stopNone) {
		return false
	}
	b := []byte(s)
	ok := true
	if rio.limit > 0 && rio.written+int64(len(b)) > rio.limit {
		b = b[:rio.limit-rio.written]
		v.stop.CompareAndSwap(uint32(stopNone), uint32(stopOutput))
		ok = false
	}
	rio.written += int64(len(b))
	if len(b) == 0 {
		return ok
	}
	w := rio.stdout
	if toStderr {
		w = rio.stderr
	}
	if err := w(b); err != nil {
		// The reader went away (a closed pipe): end like node on EPIPE.
		rio.exitCode = 1
		v.stop.CompareAndSwap(uint32(stopNone), uint32(stopExit))
		return false
	}
	return ok
}

// readStdin returns all of stdin as a string (read once per run).
func (v *vm) readStdin() uint32 {
	rio := v.io
	if rio == nil || rio.stdin == nil {
		return v.newString(nil)
	}
	if !rio.stdinRead {
		rio.stdinRead = true
		// Read in the background so that a stdin that never ends cannot
		// outlive the run's context.
		type result struct {
			b   []byte
			err error
		}
		done := make(chan result, 1)
		go func() {
			b, err := io.ReadAll(io.LimitReader(rio.stdin, max(v.memLimit, 64<<20)))
			done <- result{b, err}
		}()
		select {
		case r := <-done:
			if r.err != nil {
				return v.throw("Error", "EIO", "EIO: i/o error, read: "+r.err.Error())
			}
			rio.stdinData = r.b
		case <-rio.ctx.Done():
			v.stop.CompareAndSwap(uint32(stopNone), uint32(stopContext))
			return v.throw("Error", "EINTR", "EINTR: interrupted system call, read")
		}
	}
	return v.newBytes(rio.stdinData)
}

// resolve maps a guest path to a name inside the root: guest "/" is the
// root and relative paths start at the working directory.
func (v *vm) resolve(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(v.cwd, p)
	}
	rel := strings.TrimPrefix(path.Clean(p), "/")
	if rel == "" {
		return "."
	}
	return rel
}

// guestAbs returns the absolute guest form of p.
func (v *vm) guestAbs(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(v.cwd, p)
	}
	return path.Clean(p)
}

// fsError raises err in the guest as a node-style errno error.
func (v *vm) fsError(err error, syscallName, p string) uint32 {
	code, text := "EIO", "i/o error"
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist):
		code, text = "ENOENT", "no such file or directory"
	case errors.Is(err, fs.ErrExist):
		code, text = "EEXIST", "file already exists"
	case errors.As(err, &errno) && errno == syscall.EISDIR:
		code, text = "EISDIR", "illegal operation on a directory"
	case errors.As(err, &errno) && errno == syscall.ENOTDIR:
		code, text = "ENOTDIR", "not a directory"
	case errors.As(err, &errno) && errno == syscall.ENOTEMPTY:
		code, text = "ENOTEMPTY", "directory not empty"
	case errors.Is(err, fs.ErrPermission), strings.Contains(err.Error(), "escapes"):
		code, text = "EACCES", "permission denied"
	case errors.Is(err, fs.ErrInvalid):
		code, text = "EINVAL", "invalid argument"
	}
	return v.throw("Error", code, code+": "+text+", "+syscallName+" '"+p+"'", "syscall", syscallName, "path", p)
}

// fsOp runs one fs operation: args are (op, path, a, b), all strings.
func (v *vm) fsOp(args []uint32) uint32 {
	op, p, a, b := v.arg(args, 0), v.arg(args, 1), v.arg(args, 2), v.arg(args, 3)
	if v.root == nil {
		return v.throw("Error", "ENOSYS", "ENOSYS: no filesystem, "+op+" '"+p+"'")
	}
	r := wasmfs.GuestRoot{Root: v.root} // what it creates is the sandbox user's
	name := v.resolve(p)
	if sc := systemSyscall(op, name, func() string { return v.resolve(a) }); sc != "" {
		return v.throw("Error", "EROFS", "EROFS: read-only file system, "+sc+" '"+p+"'", "syscall", sc, "path", p)
	}
	switch op {
	case "read", "readText":
		st, err := r.Stat(name)
		if err != nil {
			return v.fsError(err, "open", p)
		}
		if st.IsDir() {
			return v.fsError(syscall.EISDIR, "read", p)
		}
		if v.memLimit > 0 && st.Size() > v.memLimit {
			return v.throw("RangeError", "ERR_FS_FILE_TOO_LARGE", "File size ("+strconv.FormatInt(st.Size(), 10)+") is greater than the memory limit")
		}
		data, err := r.ReadFile(name)
		if err != nil {
			return v.fsError(err, "open", p)
		}
		if op == "readText" {
			return v.newString(data)
		}
		return v.newBytes(data)
	case "write", "writeLatin1":
		data := []byte(a)
		if op == "writeLatin1" {
			data = latin1(a)
		}
		flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		switch b {
		case "a", "a+":
			flag = os.O_WRONLY | os.O_CREATE | os.O_APPEND
		case "wx", "w+x":
			flag |= os.O_EXCL
		case "ax":
			flag = os.O_WRONLY | os.O_CREATE | os.O_APPEND | os.O_EXCL
		}
		f, err := r.OpenFile(name, flag, 0o644)
		if err != nil {
			return v.fsError(err, "open", p)
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return v.fsError(err, "write", p)
		}
		return v.undefined()
	case "exists":
		if _, err := r.Stat(name); err != nil {
			return v.newString([]byte("0"))
		}
		return v.newString([]byte("1"))
	case "readdir":
		d, err := r.Open(name)
		if err != nil {
			return v.fsError(err, "scandir", p)
		}
		ents, err := d.ReadDir(-1)
		_ = d.Close()
		if err != nil {
			return v.fsError(err, "scandir", p)
		}
		type dirent struct {
			Name string `json:"name"`
			Type string `json:"type"`
		}
		out := make([]dirent, 0, len(ents))
		for _, e := range ents {
			out = append(out, dirent{Name: e.Name(), Type: fileType(e.Type())})
		}
		return v.jsonString(out)
	case "mkdir":
		var err error
		if a == "1" {
			err = r.MkdirAll(name, 0o755)
		} else {
			err = r.Mkdir(name, 0o755)
		}
		if err != nil {
			return v.fsError(err, "mkdir", p)
		}
		return v.undefined()
	case "stat", "lstat":
		st, err := r.Stat(name)
		if op == "lstat" {
			st, err = r.Lstat(name)
		}
		if err != nil {
			return v.fsError(err, op, p)
		}
		ms := float64(st.ModTime().UnixNano()) / 1e6
		return v.jsonString(map[string]any{
			"size": st.Size(), "mode": uint32(st.Mode().Perm()) | modeBits(st.Mode()),
			"mtimeMs": ms, "type": fileType(st.Mode().Type()),
		})
	case "unlink":
		st, err := r.Lstat(name)
		if err == nil && st.IsDir() {
			err = syscall.EISDIR
		}
		if err == nil {
			err = r.Remove(name)
		}
		if err != nil {
			return v.fsError(err, "unlink", p)
		}
		return v.undefined()
	case "rmdir":
		st, err := r.Lstat(name)
		if err == nil && !st.IsDir() {
			err = syscall.ENOTDIR
		}
		if err == nil {
			err = r.Remove(name)
		}
		if err != nil {
			return v.fsError(err, "rmdir", p)
		}
		return v.undefined()
	case "rm":
		if name == "." {
			return v.fsError(fs.ErrPermission, "rm", p)
		}
		var err error
		if _, err = r.Lstat(name); err == nil {
			if a == "1" {
				err = r.RemoveAll(name)
			} else {
				err = r.Remove(name)
			}
		}
		if err != nil && !(b == "1" && errors.Is(err, fs.ErrNotExist)) {
			return v.fsError(err, "rm", p)
		}
		return v.undefined()
	case "rename":
		if err := r.Rename(name, v.resolve(a)); err != nil {
			return v.fsError(err, "rename", p)
		}
		return v.undefined()
	case "copyFile":
		data, err := r.ReadFile(name)
		if err == nil {
			err = r.WriteFile(v.resolve(a), data, 0o644)
		}
		if err != nil {
			return v.fsError(err, "copyfile", p)
		}
		return v.undefined()
	case "realpath":
		if _, err := r.Stat(name); err != nil {
			return v.fsError(err, "realpath", p)
		}
		return v.newString([]byte(v.guestAbs(p)))
	case "chdir":
		st, err := r.Stat(name)
		if err == nil && !st.IsDir() {
			err = syscall.ENOTDIR
		}
		if err != nil {
			return v.fsError(err, "chdir", p)
		}
		v.cwd = v.guestAbs(p)
		return v.newString([]byte(v.cwd))
	}
	return v.throw("Error", "ENOSYS", "ENOSYS: function not implemented, "+op)
}

// jsonString returns a box with the JSON encoding of x.
func (v *vm) jsonString(x any) uint32 {
	b, err := json.Marshal(x)
	if err != nil {
		return v.throw("Error", "", err.Error())
	}
	return v.newString(b)
}

// latin1 converts a string whose code points are all below 256 (bytes
// passed as a binary string) back to bytes.
func latin1(s string) []byte {
	out := make([]byte, 0, len(s))
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		out = append(out, byte(r))
		s = s[n:]
	}
	return out
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsRegular():
		return "file"
	}
	return "other"
}

// modeBits returns the S_IFMT bits node reports in stat.mode.
func modeBits(m fs.FileMode) uint32 {
	switch {
	case m.IsDir():
		return 0o040000
	case m&fs.ModeSymlink != 0:
		return 0o120000
	case m.IsRegular():
		return 0o100000
	}
	return 0
}
