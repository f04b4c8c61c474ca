package osbackend

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hybox-dev/hybox/execd"
)

// errSessionEnded is returned by Run on a session whose shell has exited.
var errSessionEnded = errors.New("session shell has exited")

// markerWait bounds how long Run waits for the end markers of stdout and
// stderr after the exit code arrived (they are written before it, so they
// are normally already there; a command may have redirected the shell's
// output for good, though).
const markerWait = time.Second

// session is a persistent shell fed commands on stdin. After each command
// the shell prints a random marker line on stdout and on stderr (the end
// of that command's output) and the exit code on fd 3.
type session struct {
	b      *Executor
	pgid   int
	stdin  io.WriteCloser
	marker string
	bash   bool // the shell is bash
	source bool // commands are sourced from /dev/stdin (bash with /dev/stdin)
	exitc  <-chan syscall.WaitStatus

	run sync.Mutex // one Run at a time

	mu             sync.Mutex // guards the writers, held while writing to them
	stdout, stderr io.Writer  // nil between runs: output is discarded
	outMark        chan struct{}
	errMark        chan struct{}
	rc             chan int
	ended          chan struct{} // closed when the shell's fd 3 closed
	closeOnce      sync.Once
}

var _ execd.Session = (*session)(nil)

// NewSession implements execd.Executor: a persistent bash (or sh) whose
// working directory, variables and functions survive between runs.
//
// # Errors
// When cwd does not exist or the shell cannot start.
func (b *Executor) NewSession(ctx context.Context, cwd string, env map[string]string) (execd.Session, error) {
	dir, err := b.hostDir(cwd)
	if err != nil {
		return nil, err
	}
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	s := &session{
		b:       b,
		marker:  "__HYBOX_END_" + hex.EncodeToString(rnd[:]) + "__",
		bash:    strings.HasSuffix(b.opts.Shell, "bash"),
		outMark: make(chan struct{}, 64),
		errMark: make(chan struct{}, 64),
		rc:      make(chan int, 16),
		ended:   make(chan struct{}),
	}
	if _, err := os.Stat("/dev/stdin"); err == nil && s.bash {
		s.source = true
	}
	args := []string{}
	if s.bash {
		args = append(args, "--noprofile", "--norc")
	}
	cmd := exec.Command(b.opts.Shell, args...)
	cmd.Dir = dir
	cmd.Env = b.environ(env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	var parent, child []*os.File
	pipe := func() (r, w *os.File) {
		if err != nil {
			return nil, nil
		}
		r, w, err = os.Pipe()
		return r, w
	}
	inR, inW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	rcR, rcW := pipe()
	if err != nil {
		for _, f := range []*os.File{inR, inW, outR, outW, errR, errW, rcR, rcW} {
			if f != nil {
				f.Close()
			}
		}
		return nil, fmt.Errorf("osbackend: pipe: %w", err)
	}
	parent = []*os.File{inW, outR, errR, rcR}
	child = []*os.File{inR, outW, errW, rcW}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.ExtraFiles = []*os.File{rcW} // fd 3
	pid, exitc, err := b.spawn(cmd, cmd.Start)
	for _, f := range child {
		f.Close()
	}
	if err != nil {
		for _, f := range parent {
			f.Close()
		}
		return nil, fmt.Errorf("osbackend: start session shell: %w", err)
	}
	s.pgid, s.stdin, s.exitc = pid, inW, exitc
	go s.readOutput(outR, false)
	go s.readOutput(errR, true)
	go s.readCodes(rcR)
	if s.bash {
		// A trapped SIGINT ends the interrupted command (the sourced
		// script) but not the shell.
		if _, err := io.WriteString(inW, "trap 'return 130' INT\n"); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("osbackend: session shell: %w", err)
		}
	}
	if err := b.track(s); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// readOutput forwards one output stream to the current run's writer,
// splitting it at end markers.
func (s *session) readOutput(r *os.File, stderr bool) {
	defer r.Close()
	mark := s.outMark
	if stderr {
		mark = s.errMark
	}
	sp := &markerSplitter{
		marker: []byte(s.marker + "\n"),
		out: func(p []byte) {
			s.mu.Lock()
			w := s.stdout
			if stderr {
				w = s.stderr
			}
			if w != nil {
				_, _ = w.Write(p)
			}
			s.mu.Unlock()
		},
		hit: func() {
			select {
			case mark <- struct{}{}:
			default:
			}
		},
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			sp.write(buf[:n])
		}
		if err != nil {
			sp.flush()
			return
		}
	}
}

// readCodes reads one exit code per line from fd 3.
func (s *session) readCodes(r *os.File) {
	defer close(s.ended)
	defer r.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			s.rc <- n
		}
	}
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// script is what the shell is sent for one command.
func (s *session) script(command string) string {
	var b strings.Builder
	if s.source {
		// Sourcing (not eval) lets the INT trap's `return` end the command
		// while `declare` still makes globals; its stdin is the consumed
		// here-string, so the command cannot read the session's input.
		b.WriteString(". /dev/stdin 3>&- <<< " + shellQuote(command) + "\n")
	} else {
		b.WriteString("eval " + shellQuote(command) + " 3>&- </dev/null\n")
	}
	b.WriteString("__hybox_rc=$?; printf '%s\\n' " + s.marker + "; printf '%s\\n' " + s.marker +
		" >&2; printf '%d\\n' \"$__hybox_rc\" >&3\n")
	return b.String()
}

// Run implements execd.Session. When ctx ends, the command gets SIGINT
// (repeated) and, when it has not returned within InterruptGrace, the
// session is killed.
//
// # Errors
// When the shell has exited, or ctx ended (wrapping execd.ErrInterrupted
// or execd.ErrTimeout).
func (s *session) Run(ctx context.Context, command string, stdout, stderr io.Writer) (int, error) {
	s.run.Lock()
	defer s.run.Unlock()
	select {
	case <-s.ended:
		return 255, fmt.Errorf("osbackend: %w", errSessionEnded)
	default:
	}
	drain(s.outMark)
	drain(s.errMark)
	drainInts(s.rc)
	s.mu.Lock()
	s.stdout, s.stderr = orDiscard(stdout), orDiscard(stderr)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.stdout, s.stderr = nil, nil
		s.mu.Unlock()
	}()
	if _, err := io.WriteString(s.stdin, s.script(command)); err != nil {
		return 255, fmt.Errorf("osbackend: %w: %v", errSessionEnded, err)
	}
	code, err := s.await(ctx)
	// An interrupted command's output ends with its markers too: wait for
	// them, or they would arrive during the next command and end its
	// output early. A shell that ended writes none.
	select {
	case <-s.ended:
		return code, err
	default:
	}
	t := time.NewTimer(markerWait)
	defer t.Stop()
	for _, ch := range []chan struct{}{s.outMark, s.errMark} {
		select {
		case <-ch:
		case <-t.C:
		case <-s.ended:
		}
	}
	return code, err
}

// await waits for the command's exit code.
func (s *session) await(ctx context.Context) (int, error) {
	select {
	case code := <-s.rc:
		return code, nil
	case <-s.ended:
		return s.endedCode(), fmt.Errorf("osbackend: %w", errSessionEnded)
	case <-ctx.Done():
	}
	reason := stopErr(ctx)
	deadline := time.NewTimer(s.b.opts.InterruptGrace)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		_ = syscall.Kill(-s.pgid, syscall.SIGINT)
		select {
		case code := <-s.rc:
			return code, fmt.Errorf("osbackend: command stopped: %w", reason)
		case <-s.ended:
			return s.endedCode(), fmt.Errorf("osbackend: command stopped, session ended: %w", reason)
		case <-tick.C:
		case <-deadline.C:
			_ = s.Close()
			return 137, fmt.Errorf("osbackend: command did not stop on SIGINT; session killed: %w", reason)
		}
	}
}

// endedCode returns the shell's exit code once it is known (briefly waited for).
func (s *session) endedCode() int {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case ws := <-s.exitc:
		return exitCode(ws)
	case <-t.C:
		return 255
	}
}

// Close implements execd.Session: the shell and everything it started are killed.
func (s *session) Close() error {
	s.closeOnce.Do(func() {
		_ = syscall.Kill(-s.pgid, syscall.SIGKILL)
		_ = s.stdin.Close()
		s.b.untrack(s)
	})
	return nil
}

func drain(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func drainInts(ch chan int) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// markerSplitter passes a byte stream on, cutting out each occurrence of
// marker (calling hit for it). A trailing prefix of marker is held back
// until the next write tells whether it is one.
type markerSplitter struct {
	marker []byte
	out    func([]byte)
	hit    func()
	held   []byte
}

func (m *markerSplitter) write(p []byte) {
	data := p
	if len(m.held) > 0 {
		data = append(m.held, p...)
		m.held = nil
	}
	for {
		i := bytes.Index(data, m.marker)
		if i < 0 {
			break
		}
		if i > 0 {
			m.out(data[:i])
		}
		m.hit()
		data = data[i+len(m.marker):]
	}
	k := min(len(m.marker)-1, len(data))
	for ; k > 0; k-- {
		if bytes.HasSuffix(data, m.marker[:k]) {
			break
		}
	}
	if len(data)-k > 0 {
		m.out(data[:len(data)-k])
	}
	if k > 0 {
		m.held = append([]byte(nil), data[len(data)-k:]...)
	}
}

// flush passes on a held-back partial marker.
func (m *markerSplitter) flush() {
	if len(m.held) > 0 {
		m.out(m.held)
		m.held = nil
	}
}
