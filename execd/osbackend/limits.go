package osbackend

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Sentinel errors of the sandbox's resource limits.
var (
	// ErrOOMKilled: a command was killed by the kernel because the sandbox
	// hit its memory limit. Its exit code stays 137.
	ErrOOMKilled = errors.New("OOMKilled: the sandbox hit its memory limit")
	// ErrProcessLimit: a process could not start because the sandbox has
	// as many processes as its pids limit allows.
	ErrProcessLimit = errors.New("the sandbox reached its process limit")
)

// oomKills reads the OOM-kill counter of the sandbox's memory cgroup:
// memory.events (cgroup v2) or memory/memory.oom_control (v1, kernel 4.13
// and later). ok is false when neither can be read.
func (b *Executor) oomKills() (n int64, ok bool) {
	for _, p := range []string{
		filepath.Join(b.opts.CgroupDir, "memory.events"),
		filepath.Join(b.opts.CgroupDir, "memory", "memory.oom_control"),
	} {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if n, ok := counter(data, "oom_kill"); ok {
			return n, true
		}
	}
	return 0, false
}

// counter finds "key N" in a cgroup key-value file.
func counter(data []byte, key string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := bytes.Cut(bytes.TrimSpace(sc.Bytes()), []byte(" "))
		if !ok || string(k) != key {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// oomWatch remembers the OOM-kill counter when a process starts, so that
// its end can be told apart: killed for memory or otherwise.
type oomWatch struct {
	before int64
	ok     bool
}

func (b *Executor) watchOOM() oomWatch {
	n, ok := b.oomKills()
	return oomWatch{before: n, ok: ok}
}

// check returns ErrOOMKilled when the process ended with code 137 (it, or
// the last command of its pipeline, died of SIGKILL) and the sandbox's
// cgroup counted an OOM kill since watchOOM.
func (w oomWatch) check(b *Executor, code int) error {
	if !w.ok || code != 128+int(syscall.SIGKILL) {
		return nil
	}
	if n, ok := b.oomKills(); ok && n > w.before {
		return ErrOOMKilled
	}
	return nil
}

// spawn starts cmd (see the package function spawn) and keeps the books
// of leftover process groups. When the sandbox is out of processes
// (EAGAIN from fork) it kills the leftovers of finished commands, so that
// the next start can succeed, and wraps ErrProcessLimit.
func (b *Executor) spawn(cmd *exec.Cmd, start func() error) (int, <-chan syscall.WaitStatus, error) {
	pid, exitc, err := spawn(b.opts.Reaper, cmd, start)
	if err != nil {
		if errors.Is(err, syscall.EAGAIN) {
			b.reclaim()
			return 0, nil, fmt.Errorf("%w: %w", ErrProcessLimit, err)
		}
		return 0, nil, err
	}
	// A new group with a reused number is not a leftover.
	b.leftMu.Lock()
	delete(b.leftovers, pid)
	b.leftMu.Unlock()
	return pid, exitc, nil
}

// noteLeftovers remembers pgid when processes of a finished command's
// group still run (started in the background with &, or a fork bomb).
func (b *Executor) noteLeftovers(pgid int) {
	if syscall.Kill(-pgid, 0) != nil {
		return
	}
	b.leftMu.Lock()
	b.leftovers[pgid] = struct{}{}
	b.leftMu.Unlock()
}

// reclaim kills the process groups left running by finished commands and
// reports whether there were any. It runs only when the sandbox is out of
// processes: then such leftovers are the likely cause (a fork bomb) and
// nothing else can start.
func (b *Executor) reclaim() bool {
	b.leftMu.Lock()
	groups := make([]int, 0, len(b.leftovers))
	for g := range b.leftovers {
		groups = append(groups, g)
	}
	clear(b.leftovers)
	b.leftMu.Unlock()
	killed := false
	for _, g := range groups {
		if syscall.Kill(-g, syscall.SIGKILL) == nil {
			killed = true
			b.opts.Logger.Warn("out of processes: killed the leftovers of a finished command", "pgid", g)
		}
	}
	return killed
}

// startRetry starts a command built by build. When the sandbox is out of
// processes and leftovers were reclaimed, it tries again for up to a
// second while the killed processes are reaped.
func (b *Executor) startRetry(build func() *exec.Cmd) (int, <-chan syscall.WaitStatus, error) {
	var deadline time.Time
	for {
		cmd := build()
		b.leftMu.Lock()
		pending := len(b.leftovers) > 0
		b.leftMu.Unlock()
		pid, exitc, err := b.spawn(cmd, cmd.Start)
		if err == nil || !errors.Is(err, ErrProcessLimit) {
			return pid, exitc, err
		}
		if deadline.IsZero() {
			if !pending {
				return 0, nil, err // nothing was reclaimed
			}
			deadline = time.Now().Add(time.Second)
		}
		if time.Now().After(deadline) {
			return 0, nil, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
