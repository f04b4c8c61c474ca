package jsguest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// nodeVersion is the node release the prelude's API imitates.
const nodeVersion = "v20.0.0"

// Exit codes of RunCommand besides the script's own.
const (
	exitBadOption = 9   // node's code for an invalid command line
	exitKilled    = 137 // 128+SIGKILL: stopped by the context
	exitAbort     = 134 // 128+SIGABRT: the VM itself failed (for example out of wasm memory)
)

// nodeInvocation is a parsed `node` command line.
type nodeInvocation struct {
	version, help bool
	code          string // -e / -p source
	hasCode       bool
	print         bool   // -p: print the value
	file          string // script path ("" = none, "-" = stdin)
	args          []string
}

// parseNode parses node's command line (argv without argv[0]).
func parseNode(argv []string) (nodeInvocation, error) {
	var inv nodeInvocation
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		takeCode := func(print bool) error {
			if i+1 >= len(argv) {
				return fmt.Errorf("%s requires an argument", a)
			}
			i++
			inv.code, inv.hasCode, inv.print = argv[i], true, inv.print || print
			return nil
		}
		switch {
		case a == "-v" || a == "--version":
			inv.version = true
		case a == "-h" || a == "--help":
			inv.help = true
		case a == "-e" || a == "--eval":
			if err := takeCode(false); err != nil {
				return inv, err
			}
		case a == "-p" || a == "--print" || a == "-pe" || a == "-ep":
			if err := takeCode(true); err != nil {
				return inv, err
			}
		case strings.HasPrefix(a, "--eval="):
			inv.code, inv.hasCode = strings.TrimPrefix(a, "--eval="), true
		case strings.HasPrefix(a, "--print="):
			inv.code, inv.hasCode, inv.print = strings.TrimPrefix(a, "--print="), true, true
		case a == "--":
			if !inv.hasCode && i+1 < len(argv) {
				inv.file = argv[i+1]
				i++
			}
			inv.args = append(inv.args, argv[i+1:]...)
			return inv, nil
		case a == "-":
			inv.file = "-"
			inv.args = append(inv.args, argv[i+1:]...)
			return inv, nil
		case strings.HasPrefix(a, "--"):
			// Tuning flags (--max-old-space-size=, --no-warnings, ...) have
			// no meaning here.
		case strings.HasPrefix(a, "-") && len(a) > 1:
			return inv, fmt.Errorf("bad option: %s", a)
		default:
			if inv.hasCode {
				inv.args = append(inv.args, argv[i:]...)
			} else {
				inv.file = a
				inv.args = append(inv.args, argv[i+1:]...)
			}
			return inv, nil
		}
	}
	return inv, nil
}

// versionCache holds the `node --version` text.
type versionCache struct {
	once sync.Once
	text string
}

// RunCommand runs a `node` command line: `node -e CODE`, `node -p EXPR`,
// `node FILE.js [args]`, `node -` or `node` with a script on stdin, and
// `node --version` (which prints a node-compatible version noting
// QuickJS). fetch sends HTTP requests through cmd.Egress. Output is written to cmd.Stdout and cmd.Stderr as it is
// produced, without a cap. The result is the script's exit code: 0, the
// code given to process.exit or process.exitCode, 1 after an uncaught
// error (printed to stderr like node does), 9 for a bad option.
//
// # Errors
// When ctx is done the script is stopped and RunCommand returns 137 with
// an error wrapping execd.ErrTimeout or execd.ErrInterrupted. ErrClosed
// after Close; a failure to start the guest.
func (m *Manager) RunCommand(ctx context.Context, cmd engine.Command) (int, error) {
	if m.isClosed() {
		return -1, ErrClosed
	}
	argv := cmd.Args
	if len(argv) == 0 {
		argv = []string{"node"}
	}
	inv, err := parseNode(argv[1:])
	if err != nil {
		fmt.Fprintf(cmd.Stderr, "%s: %v\n", argv[0], err)
		return exitBadOption, nil
	}
	if inv.help {
		fmt.Fprintf(cmd.Stdout, "Usage: node [options] [ -e script | script.js | - ] [arguments]\n\n"+
			"  -e, --eval script   evaluate script\n  -p, --print script  evaluate script and print the result\n"+
			"  -v, --version       print the version\n\nJavaScript runs on QuickJS-NG in a WebAssembly sandbox.\n")
		return 0, nil
	}
	if inv.version {
		v, err := m.version(ctx)
		if err != nil {
			return -1, err
		}
		fmt.Fprintln(cmd.Stdout, v)
		return 0, nil
	}

	cwd := cleanCwd(cmd.Cwd)
	memLimit := cmd.MemoryLimitBytes
	if memLimit <= 0 {
		memLimit = m.opts.MemoryLimitBytes
	}
	const execPath = "/usr/local/bin/node"
	var src, filename string
	pargv := []string{execPath}
	switch {
	case inv.hasCode:
		src, filename = inv.code, "[eval]"
	case inv.file != "" && inv.file != "-":
		filename = path.Clean(path.Join(cwd, inv.file))
		if path.IsAbs(inv.file) {
			filename = path.Clean(inv.file)
		}
		pargv = append(pargv, filename)
	default:
		filename = "[stdin]"
		if cmd.Stdin != nil {
			b, err := io.ReadAll(io.LimitReader(cmd.Stdin, memLimit))
			if err != nil {
				return -1, fmt.Errorf("node: read script from stdin: %w", err)
			}
			src = string(b)
		}
		if inv.file == "-" {
			pargv = append(pargv, "-")
		}
	}
	pargv = append(pargv, inv.args...)

	v, err := m.newConfiguredVM(ctx, cmd.Root, cwd, memLimit, cmd.Egress, pargv, cmd.Env)
	if err != nil {
		return -1, err
	}
	defer v.close()

	stdout := func(p []byte) error { _, err := cmd.Stdout.Write(p); return err }
	stderr := func(p []byte) error { _, err := cmd.Stderr.Write(p); return err }
	rio := &runIO{stdout: stdout, stderr: stderr, stdin: cmd.Stdin}
	isFile := filename != "[eval]" && filename != "[stdin]"
	async := !isFile && mayAwait(src)
	var render func(uint32) (string, bool) // node -p prints the value
	if inv.print {
		render = func(val uint32) (string, bool) { return v.render(val, false), true }
	}
	res, err := v.exec(ctx, rio, async || inv.print, func() uint32 {
		if isFile {
			return v.runFile(filename)
		}
		flags := uint32(evalGlobal)
		if async {
			flags |= evalAsync
		}
		val := v.eval(src, filename, flags)
		if async && !v.isException(val) {
			return v.hyCallValue("unwrapAsync", val)
		}
		return val
	}, render)
	if res.lost {
		if res.stopped == stopContext || ctx.Err() != nil {
			return exitKilled, fmt.Errorf("node: %w", stopCause(ctx))
		}
		fmt.Fprintf(cmd.Stderr, "FATAL ERROR: the JavaScript VM failed: %v\n", err)
		return exitAbort, nil
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(trap); !ok {
				panic(r)
			}
		}
	}()
	switch res.stopped {
	case stopContext:
		return exitKilled, fmt.Errorf("node: %w", stopCause(ctx))
	case stopExit:
		return rio.exitCode, nil
	}
	if res.exc != nil {
		fmt.Fprintf(cmd.Stderr, "%s\n\nNode.js %s\n", strings.TrimRight(res.exc.Text, "\n"), nodeVersion)
		return 1, nil
	}
	if res.rendered {
		if _, err := io.WriteString(cmd.Stdout, res.text+"\n"); err != nil {
			return 1, nil
		}
	} else {
		v.freeValue(res.value)
	}
	r := v.hyCall("exitCode")
	defer v.freeValue(r)
	s, _ := v.str(r)
	code, _ := strconv.Atoi(s)
	return code, nil
}

// runFile reads the script file through the root and runs it as a CommonJS
// module. It returns the value box of the module function, the exception
// marker, or 0 with an exception pending.
func (v *vm) runFile(filename string) uint32 {
	if v.root == nil {
		return v.throw("Error", "MODULE_NOT_FOUND", "Cannot find module '"+filename+"'")
	}
	b, err := v.root.ReadFile(v.resolve(filename))
	if err != nil {
		return v.throw("Error", "MODULE_NOT_FOUND", "Cannot find module '"+filename+"'")
	}
	src := string(b)
	if strings.HasPrefix(src, "#!") {
		src = "//" + src
	}
	// The wrapper keeps line numbers: it adds nothing before the first line.
	fn := v.eval("(function (exports, require, module, __filename, __dirname) {"+src+"\n})", filename, evalGlobal)
	if v.isException(fn) {
		return fn
	}
	name := v.newString([]byte(filename))
	main := v.getProp(v.hy, "runMain")
	res := v.callFn(main, fn, name)
	v.freeValue(main)
	v.freeValue(name)
	v.freeValue(fn)
	return res
}

// version returns the `node --version` text, computed once.
func (m *Manager) version(ctx context.Context) (string, error) {
	m.ver.once.Do(func() {
		v, err := m.newVM(ctx, 0)
		if err != nil {
			m.ver.text = nodeVersion
			return
		}
		defer v.close()
		defer func() { _ = recover() }()
		p := v.call32(v.x.getVersion)
		m.ver.text = nodeVersion
		if p != 0 {
			if b, ok := v.mem.Read(p, 64); ok {
				if i := strings.IndexByte(string(b), 0); i > 0 {
					m.ver.text = nodeVersion + "-quickjs-ng." + string(b[:i])
				}
			}
		}
	})
	if m.ver.text == "" {
		return "", errors.New("node: version unavailable")
	}
	return m.ver.text, nil
}
