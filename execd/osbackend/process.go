package osbackend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hybox-dev/hybox/execd"
)

// StartCommand implements execd.Executor: spec.Command runs under the shell
// with -c in a new process group. Output is copied to spec.Stdout and
// spec.Stderr as it is read from the pipes (one pipe when both are the same
// writer, which keeps their interleaving). With Options.WarmShell, a
// command that switches no uid/gid runs on the pre-started shell.
//
// # Errors
// When the working directory does not exist (wraps fs.ErrNotExist), the
// uid/gid may not be assumed (fs.ErrPermission) or the shell cannot start.
func (b *Executor) StartCommand(ctx context.Context, spec execd.ProcessSpec) (execd.Process, error) {
	dir, err := b.hostDir(spec.Cwd)
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if spec.UID != nil || spec.GID != nil {
		if cred, err = credential(spec.UID, spec.GID); err != nil {
			return nil, err
		}
	}
	p := &process{b: b, stdout: orDiscard(spec.Stdout), stderr: orDiscard(spec.Stderr)}
	shared := sameWriter(p.stdout, p.stderr)
	defer b.scheduleWarm()
	if cred == nil && b.warmOK.Load() {
		if b.startWarmCommand(p, spec, dir, shared) {
			p.stopKill = context.AfterFunc(ctx, func() { _ = p.Kill() })
			return p, nil
		}
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("osbackend: pipe: %w", err)
	}
	readers := []*os.File{outR}
	writers := []*os.File{outW}
	stderrW := outW
	if !shared {
		errR, errW, err := os.Pipe()
		if err != nil {
			outR.Close()
			outW.Close()
			return nil, fmt.Errorf("osbackend: pipe: %w", err)
		}
		readers = append(readers, errR)
		writers = append(writers, errW)
		stderrW = errW
	}
	build := func() *exec.Cmd {
		cmd := exec.Command(b.opts.Shell, "-c", spec.Command)
		cmd.Dir = dir
		cmd.Env = b.environ(spec.Env)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
		cmd.Stdout, cmd.Stderr = outW, stderrW
		return cmd
	}
	p.oom = b.watchOOM()
	pid, exitc, err := b.startRetry(build)
	for _, w := range writers {
		w.Close()
	}
	if err != nil {
		for _, r := range readers {
			r.Close()
		}
		return nil, fmt.Errorf("osbackend: start command: %w", err)
	}
	p.pgid = pid
	p.exitc = exitc
	p.startCopies(readers)
	p.stopKill = context.AfterFunc(ctx, func() { _ = p.Kill() })
	return p, nil
}

// startWarmCommand runs spec on the warm shell and reports whether it
// did; false means the command must take the cold path (no warm shell,
// or a spec the warm shell cannot run like bash -c).
func (b *Executor) startWarmCommand(p *process, spec execd.ProcessSpec, dir string, shared bool) bool {
	w := b.claimWarm()
	if w == nil {
		return false
	}
	// A warm shell started before SetEnv gets the new base variables in
	// its setup, under the request's own.
	if cur := b.env.Load(); cur != w.env {
		diff, ok := envSince(*w.env, *cur)
		if !ok {
			_ = w.Close()
			return false
		}
		for k, v := range spec.Env {
			diff[k] = v
		}
		spec.Env = diff
	}
	setup, ok := warmSetup(spec, dir, b.opts.Workdir, shared, b.getenv("PWD"))
	if !ok {
		b.putBackWarm(w)
		return false
	}
	p.oom = b.watchOOM()
	if err := w.run(setup, spec.Command); err != nil {
		b.opts.Logger.Debug("osbackend: warm shell lost; cold start", "err", err)
		_ = w.Close()
		return false
	}
	p.pgid = w.pid
	p.exitc = w.exitc
	p.startCopies([]*os.File{w.outR, w.errR})
	return true
}

// startCopies forwards the pipes: readers[0] to stdout, readers[1] (when
// present) to stderr.
func (p *process) startCopies(readers []*os.File) {
	p.copies.Add(len(readers))
	go p.copy(readers[0], p.stdout)
	if len(readers) > 1 {
		go p.copy(readers[1], p.stderr)
	}
}

// credential builds the uid/gid switch of a process; a missing one keeps
// the current id. Supplementary groups are dropped.
func credential(uid, gid *int) (*syscall.Credential, error) {
	c := &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()), Groups: []uint32{}}
	if uid != nil {
		if *uid < 0 {
			return nil, fmt.Errorf("uid %d: %w", *uid, errInvalid)
		}
		c.Uid = uint32(*uid)
	}
	if gid != nil {
		if *gid < 0 {
			return nil, fmt.Errorf("gid %d: %w", *gid, errInvalid)
		}
		c.Gid = uint32(*gid)
	}
	return c, nil
}

var errInvalid = errors.New("invalid argument")

// process is one running command.
type process struct {
	b              *Executor
	pgid           int
	exitc          <-chan syscall.WaitStatus
	stdout, stderr io.Writer
	stopKill       func() bool
	oom            oomWatch

	copies  sync.WaitGroup
	outMu   sync.Mutex // held while writing output; detached under it
	detach  bool
	killed  atomic.Bool
	waitOne sync.Once
	code    int
	err     error
}

var _ execd.Process = (*process)(nil)

// copy forwards one pipe to w as it is read, until EOF. After the process
// was waited for, what is still read is discarded (a background child may
// keep the pipe open; it must neither block nor get SIGPIPE).
func (p *process) copy(r *os.File, w io.Writer) {
	defer p.copies.Done()
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p.outMu.Lock()
			if !p.detach {
				_, _ = w.Write(buf[:n])
			}
			p.outMu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// Wait implements execd.Process. It returns once the main process exited
// and its output was read to the end, or DrainTimeout after the exit when
// something it left running still holds the output open.
//
// # Errors
// ErrOOMKilled (with exit code 137) when the command was killed because
// the sandbox hit its memory limit.
func (p *process) Wait() (int, error) {
	p.waitOne.Do(func() {
		ws := <-p.exitc
		p.code = exitCode(ws)
		p.err = p.oom.check(p.b, p.code)
		p.b.noteLeftovers(p.pgid)
		drained := make(chan struct{})
		go func() {
			p.copies.Wait()
			close(drained)
		}()
		t := time.NewTimer(p.b.opts.DrainTimeout)
		select {
		case <-drained:
		case <-t.C:
		}
		t.Stop()
		p.outMu.Lock()
		p.detach = true
		p.outMu.Unlock()
		p.stopKill()
	})
	return p.code, p.err
}

// Kill implements execd.Process: the whole process group is killed
// (SIGTERM first when KillGrace is set).
func (p *process) Kill() error {
	p.killed.Store(true)
	if g := p.b.opts.KillGrace; g > 0 {
		if err := syscall.Kill(-p.pgid, syscall.SIGTERM); err == nil {
			time.AfterFunc(g, func() { _ = syscall.Kill(-p.pgid, syscall.SIGKILL) })
			return nil
		}
	}
	if err := syscall.Kill(-p.pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("osbackend: kill process group %d: %w", p.pgid, err)
	}
	return nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// sameWriter reports whether a and b are the same writer (without
// panicking on uncomparable dynamic types such as funcs).
func sameWriter(a, b io.Writer) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if !va.IsValid() || !vb.IsValid() || va.Type() != vb.Type() || !va.Comparable() {
		return false
	}
	return va.Equal(vb)
}
