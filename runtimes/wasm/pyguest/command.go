package pyguest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
)

// Exit codes RunCommand reports for a guest that did not exit by itself.
const (
	exitKilled  = 137 // stopped by ctx (like SIGKILL)
	exitTrapped = 134 // the guest trapped, e.g. abort() (like SIGABRT)
)

// RunCommand runs python as a shell command in a fresh guest (not pooled,
// not cloned: the source build starts CPython's main in a new instance):
// `python3 -c CODE`, `python3 file.py args`, `python3 -` (script on stdin),
// `python3 -m module`, `python3 --version`... cmd.Args[0] is the name as
// typed. The guest sees cmd.Root as "/" and starts in cmd.Cwd. It returns the
// exit status like CPython: 0, sys.exit's code, 1 for an uncaught exception,
// 2 for a usage error; 134 when the guest trapped (a message goes to
// cmd.Stderr).
//
// The program's HTTP requests (the hybox_http module, urllib.request) go
// through cmd.Egress; without one they fail with engine.ErrNoNetwork's text.
//
// Options -I, -E and -S skip the start-up hook that changes to cmd.Cwd, so
// with them the program starts in "/".
//
// # Errors
// When ctx ends the guest is killed and RunCommand returns 137 and an error
// wrapping execd.ErrTimeout or execd.ErrInterrupted (per context.Cause).
// ErrClosed after Close; errors from compiling or instantiating the guest.
func (m *Manager) RunCommand(ctx context.Context, cmd engine.Command) (int, error) {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	if cmd.Root == nil {
		return 0, errors.New("pyguest: command without root")
	}
	cwd := cmd.Cwd
	if cwd == "" {
		cwd = "/"
	}
	cwd = path.Clean("/" + cwd)
	args := commandArgs(cmd.Args, cwd)

	fsc := wazero.NewFSConfig().(sysfs.FSConfig).
		WithSysFSMount(wasmfs.New(cmd.Root), "/").(sysfs.FSConfig).
		WithSysFSMount(&netFS{ctx: ctx, egress: func() engine.Egress { return cmd.Egress }}, netDir).
		WithFSMount(m.site, siteDir)
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithArgs(args...).
		WithStdout(cmd.Stdout).
		WithStderr(cmd.Stderr).
		WithFSConfig(fsc).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(ctxSleep(ctx)).
		WithRandSource(rand.Reader)
	if cmd.Stdin != nil {
		cfg = cfg.WithStdin(cmd.Stdin)
	}
	for k, v := range commandEnv(cmd.Env, cwd) {
		cfg = cfg.WithEnv(k, v)
	}
	limit := cmd.MemoryLimitBytes
	if limit <= 0 {
		limit = m.opts.MemoryLimitBytes
	}
	var err error
	if m.rx != nil {
		err = m.rx.command(engine.WithMemoryLimit(ctx, limit), cmd, args, cwd)
	} else {
		var mod api.Module
		mod, err = m.opts.Engine.Runtime().InstantiateModule(engine.WithMemoryLimit(ctx, limit), m.cm, cfg)
		if mod != nil {
			_ = mod.Close(context.WithoutCancel(ctx))
		}
	}
	if err == nil {
		return 0, nil
	}
	if ctx.Err() != nil {
		return exitKilled, fmt.Errorf("pyguest: python3 stopped: %w", stopReason(ctx))
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		return int(exit.ExitCode()), nil
	}
	if msg, _, _ := strings.Cut(err.Error(), "\n"); strings.Contains(msg, "wasm error") {
		fmt.Fprintf(cmd.Stderr, "python3: the interpreter crashed: %s\n", msg)
		return exitTrapped, nil
	}
	return 0, fmt.Errorf("pyguest: python3: %w", err)
}

// commandEnv builds the guest environment: env, plus HOME (default cwd),
// unbuffered output, no .pyc files, and the start-up hook that changes to cwd.
func commandEnv(env map[string]string, cwd string) map[string]string {
	out := map[string]string{
		"HOME":                    cwd,
		"PYTHONDONTWRITEBYTECODE": "1",
		"PYTHONUNBUFFERED":        "1",
	}
	for k, v := range env {
		out[k] = v
	}
	if p := out["PYTHONPATH"]; p != "" {
		out["HYBOX_USER_PYTHONPATH"] = p
		out["PYTHONPATH"] = siteDir + ":" + p
	} else {
		out["PYTHONPATH"] = siteDir
	}
	out["HYBOX_CWD"] = cwd
	return out
}

// commandArgs returns the guest argv for a python3 command line. CPython turns
// a relative script path into an absolute one before the start-up hook has
// changed directory, so a relative script is made absolute here against cwd.
func commandArgs(argv []string, cwd string) []string {
	args := append([]string{"python3"}, argv[min(1, len(argv)):]...)
	if i := scriptIndex(args); i > 0 && !strings.HasPrefix(args[i], "/") && args[i] != "-" {
		args[i] = path.Join(cwd, args[i])
	}
	return args
}

// scriptIndex returns the index in args (args[0] is the program) of the
// script operand of a python3 command line, or -1 when there is none (-c,
// -m, only options).
func scriptIndex(args []string) int {
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return i + 1
			}
			return -1
		case a == "-" || !strings.HasPrefix(a, "-"):
			return i
		case strings.HasPrefix(a, "--"):
			if a == "--check-hash-based-pycs" {
				i++ // takes a value
			}
			continue
		}
		// A cluster of short options, like -uB or -Wignore.
		for j := 1; j < len(a); j++ {
			switch a[j] {
			case 'c', 'm':
				return -1 // the rest belongs to the program
			case 'W', 'X':
				if j == len(a)-1 {
					i++ // value is the next argument
				}
				j = len(a)
			}
		}
	}
	return -1
}
