package wsh

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// lookupCmd is the internal command that `type` and `command -v` are
// rewritten to, so that they answer from the sandbox instead of the host PATH.
const lookupCmd = "\x00wsh-lookup"

// proc is one command being run: its arguments, directory, exported
// environment and streams.
type proc struct {
	sh     *shell
	args   []string // args[0] is the command name
	dir    string   // guest working directory
	env    map[string]string
	stdin  io.Reader // never nil
	stdout io.Writer
	stderr io.Writer
}

// utility is a command implemented in Go; it returns the exit status.
type utility func(ctx context.Context, p *proc) int

// name is the command name for messages.
func (p *proc) name() string { return path.Base(p.args[0]) }

// errorf prints "name: message" on stderr.
func (p *proc) errorf(format string, a ...any) {
	fmt.Fprintf(p.stderr, "%s: %s\n", p.name(), fmt.Sprintf(format, a...))
}

// fail prints "name: file: reason" for a file error and returns 1.
func (p *proc) fail(file string, err error) int {
	p.errorf("%s: %s", file, errText(err))
	return 1
}

// rel resolves a guest path of the command to a root-relative path.
func (p *proc) rel(file string, follow bool) (string, error) {
	return p.sh.resolve(p.dir, file, follow)
}

// open opens a file operand for reading; "-" is stdin.
func (p *proc) open(file string) (io.ReadCloser, error) {
	if file == "-" {
		return io.NopCloser(p.stdin), nil
	}
	if guestAbs(p.dir, file) == "/dev/null" {
		return devNull{}, nil
	}
	f, err := p.sh.openFile(p.dir, file, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, errors.New("Is a directory")
	}
	return f, nil
}

// inputs calls fn for each file operand (stdin when there is none) and
// returns 1 if any could not be opened.
func (p *proc) inputs(files []string, fn func(name string, r io.Reader) error) int {
	if len(files) == 0 {
		files = []string{"-"}
	}
	code := 0
	for _, f := range files {
		rc, err := p.open(f)
		if err != nil {
			code = p.fail(f, err)
			continue
		}
		err = fn(f, rc)
		rc.Close()
		if err != nil {
			// Write errors (a closed pipe) and the read deadline set
			// when the context ends stop the command quietly.
			if !isWriteErr(err) && !errors.Is(err, os.ErrDeadlineExceeded) {
				p.errorf("%s: %v", f, errText(err))
			}
			return 1
		}
	}
	return code
}

// writeErr marks an error writing to stdout (usually a closed pipe), after
// which a command stops quietly.
type writeErr struct{ error }

func (e writeErr) Unwrap() error { return e.error }

func isWriteErr(err error) bool {
	var we writeErr
	return errors.As(err, &we)
}

// out wraps stdout so that write failures are recognizable.
type outWriter struct{ w io.Writer }

func (o outWriter) Write(b []byte) (int, error) {
	n, err := o.w.Write(b)
	if err != nil {
		return n, writeErr{err}
	}
	return n, nil
}

// callHandler rewrites the builtins that would consult the host filesystem:
// `type` and `command -v/-V` search the host PATH, and `source name`
// searches it too.
func (sh *shell) callHandler(ctx context.Context, args []string) ([]string, error) {
	switch args[0] {
	case "type":
		return append([]string{lookupCmd, "type"}, args[1:]...), nil
	case "command":
		if len(args) > 1 && (args[1] == "-v" || args[1] == "-V") {
			return append([]string{lookupCmd, args[1]}, args[2:]...), nil
		}
	case "source", ".":
		if len(args) > 1 && !strings.Contains(args[1], "/") {
			hc := interp.HandlerCtx(ctx)
			out := slices.Clone(args)
			out[1] = sh.findScript(hc.Dir, hc.Env.Get("PATH").String(), args[1])
			return out, nil
		}
	}
	return args, nil
}

// findScript finds a sourced file in PATH, then in dir, inside the root.
func (sh *shell) findScript(dir, pathVar, name string) string {
	for _, d := range strings.Split(pathVar, ":") {
		if d == "" {
			d = dir
		}
		cand := guestAbs(dir, path.Join(d, name))
		if fi, err := sh.stat(dir, cand, true); err == nil && fi.Mode().IsRegular() {
			return cand
		}
	}
	return guestAbs(dir, name)
}

// execHandler runs every command that is not a shell builtin or function.
func (sh *shell) execHandler(ctx context.Context, args []string) error {
	hc := interp.HandlerCtx(ctx)
	stdin, release := ctxStdin(ctx, hc.Stdin)
	defer release()
	p := &proc{
		sh:     sh,
		args:   args,
		dir:    hc.Dir,
		env:    exported(hc.Env),
		stdin:  stdin,
		stdout: hc.Stdout,
		stderr: hc.Stderr,
	}
	code := sh.dispatch(ctx, p)
	if err := ctx.Err(); err != nil {
		return err
	}
	if code == 0 {
		return nil
	}
	return interp.ExitStatus(uint8(code))
}

// exported collects the exported variables of env.
func exported(env expand.Environ) map[string]string {
	m := map[string]string{}
	for name, vr := range env.Each {
		if vr.Exported && vr.IsSet() {
			m[name] = vr.String()
		} else {
			delete(m, name)
		}
	}
	return m
}

// dispatch runs one command: a script file, a guest program or a utility.
func (sh *shell) dispatch(ctx context.Context, p *proc) int {
	name := p.args[0]
	if name == lookupCmd {
		return sh.lookup(p)
	}
	if strings.Contains(name, "/") {
		if code, ok := sh.runFile(ctx, p); ok {
			return code
		}
		name = path.Base(name)
	}
	if prog, ok := sh.opts.Programs[name]; ok {
		return sh.runProgram(ctx, p, prog)
	}
	if u := sh.utility(name); u != nil {
		return u(ctx, p)
	}
	msg := fmt.Sprintf("%s: command not found", p.args[0])
	if sh.opts.UnknownHint != "" {
		msg += "; " + sh.opts.UnknownHint
	}
	fmt.Fprintln(p.stderr, msg)
	return ExitNotFound
}

// runProgram runs a guest program.
func (sh *shell) runProgram(ctx context.Context, p *proc, prog Program) int {
	code, err := prog(ctx, engine.Command{
		Args:             slices.Clone(p.args),
		Stdin:            p.stdin,
		Stdout:           p.stdout,
		Stderr:           p.stderr,
		Root:             sh.opts.Root,
		Cwd:              p.dir,
		Env:              maps.Clone(p.env),
		MemoryLimitBytes: sh.opts.MemoryLimitBytes,
	})
	if err != nil && ctx.Err() == nil {
		p.errorf("%v", err)
		if code == 0 {
			code = 126
		}
	}
	return code
}

// shells are the interpreters that this shell stands in for.
func isShellName(name string) bool {
	switch name {
	case "sh", "bash", "dash", "ash", "ksh", "zsh":
		return true
	}
	return false
}

// runFile runs a command given by path (./run.sh, /usr/bin/python3). It
// reports ok=false when the file does not exist in the root, so that the
// caller falls back to the base name.
func (sh *shell) runFile(ctx context.Context, p *proc) (int, bool) {
	rel, err := p.rel(p.args[0], true)
	if err != nil {
		return 0, false
	}
	fi, err := sh.root.Stat(rel)
	if err != nil {
		return 0, false
	}
	if fi.IsDir() {
		p.errorf("Is a directory")
		return 126, true
	}
	b, err := sh.root.ReadFile(rel)
	if err != nil {
		p.errorf("%s", errText(err))
		return 126, true
	}
	script := guestAbs(p.dir, p.args[0])
	if line, ok := strings.CutPrefix(string(b), "#!"); ok {
		line, _, _ = strings.Cut(line, "\n")
		f := strings.Fields(line)
		if len(f) > 0 && path.Base(f[0]) == "env" {
			f = f[1:]
			if len(f) > 0 && f[0] == "-S" {
				f = f[1:]
			}
		}
		if len(f) > 0 && !isShellName(path.Base(f[0])) {
			q := *p
			q.args = append(append(append([]string{path.Base(f[0])}, f[1:]...), script), p.args[1:]...)
			return sh.dispatch(ctx, &q), true
		}
	}
	if len(b) > 0 && slices.Contains(b[:min(len(b), 512)], 0) {
		p.errorf("cannot execute binary file")
		return 126, true
	}
	return sh.runScript(ctx, p, string(b), p.args[0], append([]string{"--"}, p.args[1:]...)), true
}

// runScript runs shell source in a new shell (no functions or unexported
// variables are inherited, like a child process).
func (sh *shell) runScript(ctx context.Context, p *proc, src, name string, params []string) int {
	r, err := sh.newRunner(p.dir, p.env, p.stdin, p.stdout, p.stderr, params...)
	if err != nil {
		p.errorf("%v", err)
		return 126
	}
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), name)
	if err != nil {
		fmt.Fprintf(p.stderr, "%v\n", err)
		return ExitUsage
	}
	rewriteExecFDs(file)
	code, _ := sh.status(ctx, r.Run(ctx, file), p.stderr)
	return code
}

// shUtil is sh/bash: `sh -c CMD [name args...]`, `sh FILE args`, or a
// script on stdin.
func shUtil(ctx context.Context, p *proc) int {
	var opts []string
	args := p.args[1:]
	cmd, hasCmd := "", false
	for len(args) > 0 && len(args[0]) > 1 && (args[0][0] == '-' || args[0][0] == '+') {
		a := args[0]
		args = args[1:]
		if a == "--" {
			break
		}
		if a == "-o" || a == "+o" {
			if len(args) > 0 {
				opts = append(opts, a, args[0])
				args = args[1:]
			}
			continue
		}
		for _, c := range a[1:] {
			switch c {
			case 'c':
				hasCmd = true
			case 'l', 'i', 's':
			default:
				opts = append(opts, string(a[0])+string(c))
			}
		}
	}
	name := p.name()
	var src string
	switch {
	case hasCmd:
		if len(args) == 0 {
			p.errorf("-c: option requires an argument")
			return ExitUsage
		}
		cmd, args = args[0], args[1:]
		src = cmd
		if len(args) > 0 {
			name, args = args[0], args[1:]
		}
	case len(args) > 0:
		name = args[0]
		rc, err := p.open(args[0])
		if err != nil {
			p.errorf("%s: %s", args[0], errText(err))
			return ExitNotFound
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return p.fail(args[0], err)
		}
		src, args = string(b), args[1:]
	default:
		b, err := io.ReadAll(p.stdin)
		if err != nil {
			return 1
		}
		src = string(b)
	}
	params := append(append(opts, "--"), args...)
	return p.sh.runScript(ctx, p, src, name, params)
}

// lookup implements `type`, `command -v` and `command -V`.
func (sh *shell) lookup(p *proc) int {
	mode, names := p.args[1], p.args[2:]
	if mode == "type" {
		mode = "-V"
		for len(names) > 0 && strings.HasPrefix(names[0], "-") {
			if names[0] == "-t" {
				mode = "-t"
			} else if names[0] == "-p" || names[0] == "-P" {
				mode = "-v"
			}
			names = names[1:]
		}
	}
	code := 0
	for _, n := range names {
		kind := sh.kindOf(n)
		switch {
		case kind == "":
			code = 1
			if mode != "-v" && mode != "-t" {
				fmt.Fprintf(p.stderr, "type: %s: not found\n", n)
			}
		case mode == "-t":
			fmt.Fprintln(p.stdout, kind)
		case mode == "-v" && kind == "file":
			fmt.Fprintln(p.stdout, sh.binPath(n))
		case mode == "-v":
			fmt.Fprintln(p.stdout, n)
		case kind == "keyword":
			fmt.Fprintf(p.stdout, "%s is a shell keyword\n", n)
		case kind == "builtin":
			fmt.Fprintf(p.stdout, "%s is a shell builtin\n", n)
		default:
			fmt.Fprintf(p.stdout, "%s is %s\n", n, sh.binPath(n))
		}
	}
	return code
}

// kindOf classifies a command name like `type -t` (functions excepted).
func (sh *shell) kindOf(n string) string {
	switch {
	case syntax.IsKeyword(n):
		return "keyword"
	case interp.IsBuiltin(n):
		return "builtin"
	case sh.known(n):
		return "file"
	}
	return ""
}

// known reports whether n (or its base name, for paths) is a program or
// utility.
func (sh *shell) known(n string) bool {
	n = path.Base(n)
	_, ok := sh.opts.Programs[n]
	return ok || sh.utility(n) != nil
}

// binPath is where a known command claims to live.
func (sh *shell) binPath(n string) string {
	if strings.Contains(n, "/") {
		return n
	}
	return "/usr/bin/" + n
}

// whichUtil reports the path of programs and utilities.
func whichUtil(_ context.Context, p *proc) int {
	code := 0
	for _, n := range p.args[1:] {
		if strings.HasPrefix(n, "-") {
			continue
		}
		if p.sh.known(n) || interp.IsBuiltin(n) {
			fmt.Fprintln(p.stdout, p.sh.binPath(n))
		} else {
			code = 1
		}
	}
	return code
}

// envUtil is env: print the environment, or run a command in a modified one.
func envUtil(ctx context.Context, p *proc) int {
	env := maps.Clone(p.env)
	args := p.args[1:]
	for len(args) > 0 {
		switch a := args[0]; {
		case a == "-i" || a == "-":
			env = map[string]string{}
		case a == "-u" && len(args) > 1:
			delete(env, args[1])
			args = args[1:]
		case a == "--":
		case strings.Contains(a, "=") && !strings.HasPrefix(a, "="):
			k, v, _ := strings.Cut(a, "=")
			env[k] = v
		default:
			goto run
		}
		args = args[1:]
	}
run:
	if len(args) == 0 {
		w := bufio.NewWriter(p.stdout)
		for _, k := range slices.Sorted(maps.Keys(env)) {
			fmt.Fprintf(w, "%s=%s\n", k, env[k])
		}
		if w.Flush() != nil {
			return 1
		}
		return 0
	}
	q := *p
	q.args, q.env = args, env
	return p.sh.dispatch(ctx, &q)
}

// printenvUtil prints all or some environment variables.
func printenvUtil(ctx context.Context, p *proc) int {
	if len(p.args) == 1 {
		return envUtil(ctx, &proc{sh: p.sh, args: []string{"env"}, env: p.env, stdout: p.stdout, stderr: p.stderr})
	}
	code := 0
	for _, k := range p.args[1:] {
		if v, ok := p.env[k]; ok {
			fmt.Fprintln(p.stdout, v)
		} else {
			code = 1
		}
	}
	return code
}

// timeoutUtil is timeout DURATION CMD...: status 124 when the time runs out.
func timeoutUtil(ctx context.Context, p *proc) int {
	args := p.args[1:]
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		if args[0] == "-s" || args[0] == "-k" {
			args = args[1:]
		}
		args = args[1:]
	}
	if len(args) < 2 {
		p.errorf("missing operand")
		return 125
	}
	d, err := parseDuration(args[0])
	if err != nil {
		p.errorf("invalid time interval '%s'", args[0])
		return 125
	}
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	q := *p
	q.args = args[1:]
	code := p.sh.dispatch(tctx, &q)
	if ctx.Err() == nil && tctx.Err() != nil {
		return 124
	}
	return code
}

// parseDuration parses sleep/timeout intervals: "1", "0.5", "2s", "1m", "1h", "1d".
func parseDuration(s string) (time.Duration, error) {
	mult := time.Second
	switch {
	case strings.HasSuffix(s, "s"):
		s = s[:len(s)-1]
	case strings.HasSuffix(s, "m"):
		s, mult = s[:len(s)-1], time.Minute
	case strings.HasSuffix(s, "h"):
		s, mult = s[:len(s)-1], time.Hour
	case strings.HasSuffix(s, "d"):
		s, mult = s[:len(s)-1], 24*time.Hour
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("invalid interval %q", s)
	}
	return time.Duration(f * float64(mult)), nil
}

// sleepUtil sleeps for the sum of its intervals, or until ctx ends.
func sleepUtil(ctx context.Context, p *proc) int {
	if len(p.args) < 2 {
		p.errorf("missing operand")
		return 1
	}
	var total time.Duration
	for _, a := range p.args[1:] {
		d, err := parseDuration(a)
		if err != nil {
			p.errorf("invalid time interval '%s'", a)
			return 1
		}
		total += d
	}
	t := time.NewTimer(total)
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-ctx.Done():
		return ExitInterrupted
	}
}

// xargsUtil is xargs [-n N] [-I R] [-0] [CMD ARGS...] (default echo).
func xargsUtil(ctx context.Context, p *proc) int {
	args := p.args[1:]
	maxArgs, repl, nul, noRunEmpty := 0, "", false, false
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && len(args[0]) > 1 {
		a := args[0]
		args = args[1:]
		switch {
		case a == "--":
			goto parsed
		case a == "-0" || a == "--null":
			nul = true
		case a == "-r" || a == "--no-run-if-empty":
			noRunEmpty = true
		case a == "-n" || a == "-I" || a == "-L":
			if len(args) == 0 {
				p.errorf("option requires an argument -- '%s'", a[1:])
				return 1
			}
			if a == "-I" {
				repl = args[0]
			} else {
				maxArgs, _ = strconv.Atoi(args[0])
			}
			args = args[1:]
		case strings.HasPrefix(a, "-n"):
			maxArgs, _ = strconv.Atoi(a[2:])
		case strings.HasPrefix(a, "-I"):
			repl = a[2:]
		default:
			p.errorf("invalid option -- '%s'", a[1:])
			return 1
		}
	}
parsed:
	if len(args) == 0 {
		args = []string{"echo"}
	}
	b, err := io.ReadAll(p.stdin)
	if err != nil {
		return 1
	}
	var items []string
	switch {
	case nul:
		items = strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	case repl != "":
		items = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	default:
		items = splitXargs(string(b))
	}
	if len(items) == 1 && items[0] == "" {
		items = nil
	}
	run := func(cmd []string) int {
		q := *p
		q.args = cmd
		q.stdin = strings.NewReader("")
		return p.sh.dispatch(ctx, &q)
	}
	code := 0
	switch {
	case repl != "":
		for _, it := range items {
			cmd := make([]string, len(args))
			for i, a := range args {
				cmd[i] = strings.ReplaceAll(a, repl, it)
			}
			if run(cmd) != 0 {
				code = 123
			}
			if ctx.Err() != nil {
				return 1
			}
		}
	case len(items) == 0:
		if !noRunEmpty {
			code = run(slices.Clone(args))
		}
	default:
		n := maxArgs
		if n <= 0 {
			n = len(items)
		}
		for chunk := range slices.Chunk(items, n) {
			if run(append(slices.Clone(args), chunk...)) != 0 {
				code = 123
			}
			if ctx.Err() != nil {
				return 1
			}
		}
	}
	return code
}

// splitXargs splits xargs input on blanks, honouring simple quotes.
func splitXargs(s string) []string {
	var out []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}
