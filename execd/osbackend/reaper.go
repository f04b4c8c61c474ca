package osbackend

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Reaper collects the exit status of every child of the process, for a
// process that is PID 1 of a container or a child subreaper: orphaned
// grandchildren are re-parented to it and must be reaped, or they stay
// zombies forever.
//
// Reaping with wait4(-1) steals the exit status of children that someone
// else waits for by pid (os/exec's Wait). So when a Reaper runs, every
// child must be started through Start: Start holds the Reaper's lock from
// fork until the pid is registered, and the reaper dispatches a status only
// under the same lock, so a child that exits at once is never mistaken for
// an orphan. Statuses of unregistered pids (orphans) are discarded.
type Reaper struct {
	log     *slog.Logger
	mu      sync.Mutex
	waiting map[int]chan syscall.WaitStatus
	wake    chan os.Signal
	reaped  uint64 // orphans reaped, for tests and logs
}

// NewReaper returns a Reaper; call Run to start reaping. logger may be nil.
func NewReaper(logger *slog.Logger) *Reaper {
	if logger == nil {
		logger = slog.Default()
	}
	return &Reaper{log: logger, waiting: map[int]chan syscall.WaitStatus{}, wake: make(chan os.Signal, 1)}
}

// Run reaps children until ctx is done.
func (r *Reaper) Run(ctx context.Context) {
	signal.Notify(r.wake, syscall.SIGCHLD)
	defer signal.Stop(r.wake)
	// A periodic sweep is a safety net; SIGCHLD does the real work.
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		r.reapAll()
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-t.C:
		}
	}
}

// reapAll collects every exited child without blocking.
func (r *Reaper) reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD (no children) or none exited
		}
		r.dispatch(pid, ws)
	}
}

func (r *Reaper) dispatch(pid int, ws syscall.WaitStatus) {
	r.mu.Lock()
	ch, ok := r.waiting[pid]
	delete(r.waiting, pid)
	if !ok {
		r.reaped++
	}
	r.mu.Unlock()
	if ok {
		ch <- ws // buffered
		return
	}
	r.log.Debug("reaped orphan", "pid", pid, "status", exitCode(ws))
}

// Orphans reports how many unregistered children were reaped.
func (r *Reaper) Orphans() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reaped
}

// Start runs start (which must start cmd, for example cmd.Start or
// pty.Start) and registers the child. The returned channel receives its
// wait status once. Never call cmd.Wait on a command started this way.
//
// # Errors
// The error of start.
func (r *Reaper) Start(cmd *exec.Cmd, start func() error) (<-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := start(); err != nil {
		return nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiting[cmd.Process.Pid] = ch
	select { // it may have exited already; have it collected soon
	case r.wake <- syscall.SIGCHLD:
	default:
	}
	return ch, nil
}

// spawn starts cmd with start and returns its pid and a channel with its
// wait status: through the Reaper when one runs, else by waiting for this
// pid only. Callers must use the returned pid, not cmd.Process.Pid (the
// process is released once it has been waited for).
func spawn(r *Reaper, cmd *exec.Cmd, start func() error) (int, <-chan syscall.WaitStatus, error) {
	if r != nil {
		ch, err := r.Start(cmd, start)
		if err != nil {
			return 0, nil, err
		}
		pid := cmd.Process.Pid
		out := make(chan syscall.WaitStatus, 1)
		go func() {
			// The pidfd os.Process may hold is released once the status is in.
			ws := <-ch
			_ = cmd.Process.Release()
			out <- ws
		}()
		return pid, out, nil
	}
	if err := start(); err != nil {
		return 0, nil, err
	}
	pid := cmd.Process.Pid
	ch := make(chan syscall.WaitStatus, 1)
	go func() {
		st, err := cmd.Process.Wait()
		if err != nil || st == nil {
			ch <- syscall.WaitStatus(0xff << 8) // exit 255: unknown
			return
		}
		ch <- st.Sys().(syscall.WaitStatus)
	}()
	return pid, ch, nil
}

// exitCode maps a wait status to a shell-style exit code: 128+signal for a
// killed process.
func exitCode(ws syscall.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	default:
		return 255
	}
}
