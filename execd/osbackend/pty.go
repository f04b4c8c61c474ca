package osbackend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/creack/pty"

	"github.com/hybox-dev/hybox/execd"
)

// StartPTY implements execd.PTYExecutor: spec.Command under the shell with
// -c, or an interactive login shell (`bash -l`), as the session leader of a
// new pseudo-terminal.
//
// # Errors
// When cwd does not exist or the program cannot start.
func (b *Executor) StartPTY(ctx context.Context, spec execd.PTYSpec) (execd.PTY, error) {
	dir, err := b.hostDir(spec.Cwd)
	if err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	switch {
	case spec.Command != "":
		cmd = exec.Command(b.opts.Shell, "-c", spec.Command)
	case strings.HasSuffix(b.opts.Shell, "bash"):
		cmd = exec.Command(b.opts.Shell, "-l")
	default:
		cmd = exec.Command(b.opts.Shell, "-i")
	}
	env := map[string]string{"TERM": "xterm-256color"}
	if t := b.getenv("TERM"); t != "" {
		env["TERM"] = t
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	cmd.Dir = dir
	cmd.Env = b.environ(env)
	cols, rows := spec.Cols, spec.Rows
	if cols <= 0 || rows <= 0 {
		cols, rows = 80, 24
	}
	var ptmx *os.File
	pid, exitc, err := b.spawn(cmd, func() error {
		f, err := pty.StartWithAttrs(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)},
			&syscall.SysProcAttr{Setsid: true, Setctty: true})
		ptmx = f
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("osbackend: start terminal: %w", err)
	}
	t := &terminal{b: b, ptmx: ptmx, pid: pid, exitc: exitc, done: make(chan struct{})}
	go func() {
		t.code = exitCode(<-exitc)
		close(t.done)
	}()
	if err := b.track(t); err != nil {
		_ = t.Close()
		return nil, err
	}
	return t, nil
}

// terminal is a program on a pseudo-terminal.
type terminal struct {
	b     *Executor
	ptmx  *os.File
	pid   int
	exitc <-chan syscall.WaitStatus
	done  chan struct{} // closed when the program exited
	code  int           // read after done

	closeOnce sync.Once
}

var _ execd.PTY = (*terminal)(nil)

// Read implements execd.PTY. Linux reports EIO on the master once every
// slave side is closed; that is the end of output.
func (t *terminal) Read(p []byte) (int, error) {
	n, err := t.ptmx.Read(p)
	if err != nil && (errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrClosed)) {
		err = errEOF
	}
	return n, err
}

// Write implements execd.PTY.
func (t *terminal) Write(p []byte) (int, error) { return t.ptmx.Write(p) }

// Resize implements execd.PTY.
func (t *terminal) Resize(cols, rows int) error {
	return pty.Setsize(t.ptmx, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
}

// Signal implements execd.PTY: the signal goes to the terminal's foreground
// process group (the session leader's group when that is unknown).
func (t *terminal) Signal(name string) error {
	sig, err := parseSignal(name)
	if err != nil {
		return err
	}
	pgrp := t.pid
	var fg int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, t.ptmx.Fd(), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&fg))); e == 0 && fg > 0 {
		pgrp = int(fg)
	}
	if err := syscall.Kill(-pgrp, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("osbackend: signal %s: %w", name, err)
	}
	return nil
}

// Wait implements execd.PTY.
func (t *terminal) Wait() (int, error) {
	<-t.done
	return t.code, nil
}

// Close implements execd.PTY: the terminal's session is killed.
func (t *terminal) Close() error {
	t.closeOnce.Do(func() {
		_ = syscall.Kill(-t.pid, syscall.SIGKILL)
		_ = t.ptmx.Close()
		t.b.untrack(t)
	})
	return nil
}

// signals are the names parseSignal accepts (without "SIG").
var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "STOP": syscall.SIGSTOP,
	"CONT": syscall.SIGCONT, "TSTP": syscall.SIGTSTP, "WINCH": syscall.SIGWINCH, "ALRM": syscall.SIGALRM,
}

// parseSignal accepts "SIGINT", "int", "INT" or "2".
func parseSignal(name string) (syscall.Signal, error) {
	s := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "SIG")
	if sig, ok := signals[s]; ok {
		return sig, nil
	}
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	return 0, fmt.Errorf("osbackend: unknown signal %q: %w", name, errInvalid)
}
