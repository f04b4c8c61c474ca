package hybox_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func TestExecForeground(t *testing.T) {
	c := newClient(t, server(t))
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	ctx := ctxFor(t, time.Minute)
	tests := []struct {
		name       string
		cmd        hybox.Command
		stdout     string
		stderr     string
		exit       int
		wantExitEr bool
	}{
		{name: "success", cmd: hybox.Command{Command: "echo one; echo two"}, stdout: "one\ntwo"},
		{name: "stderr and exit code", cmd: hybox.Command{Command: "echo out; echo err >&2; exit 7"}, stdout: "out", stderr: "err", exit: 7, wantExitEr: true},
		{name: "env and cwd", cmd: hybox.Command{Command: "mkdir -p /tmp/w && cd /tmp/w && pwd; echo $GREETING",
			Envs: map[string]string{"GREETING": "hello"}}, stdout: "/tmp/w\nhello"},
		{name: "cwd", cmd: hybox.Command{Command: "pwd", Cwd: "/tmp"}, stdout: "/tmp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var seenOut, seenErr []string
			var initID string
			x, err := sb.Exec(ctx, tt.cmd, &hybox.Handlers{
				OnInit:   func(id string) { initID = id },
				OnStdout: func(s string) { mu.Lock(); seenOut = append(seenOut, s); mu.Unlock() },
				OnStderr: func(s string) { mu.Lock(); seenErr = append(seenErr, s); mu.Unlock() },
			})
			if err != nil {
				t.Fatalf("exec: %v", err)
			}
			if x.Text() != tt.stdout || x.StderrText() != tt.stderr || x.ExitCode != tt.exit {
				t.Fatalf("got stdout %q stderr %q exit %d, want %q %q %d", x.Text(), x.StderrText(), x.ExitCode, tt.stdout, tt.stderr, tt.exit)
			}
			if strings.Join(seenOut, "\n") != tt.stdout || strings.Join(seenErr, "\n") != tt.stderr || initID != x.ID || x.ID == "" {
				t.Errorf("handlers saw %q %q id %q", seenOut, seenErr, initID)
			}
			err = x.Err()
			if tt.wantExitEr != (err != nil) || (tt.wantExitEr && !errors.Is(err, hybox.ErrExitStatus)) {
				t.Errorf("Err() = %v", err)
			}
			var ee *hybox.ExecutionError
			if tt.wantExitEr && (!errors.As(err, &ee) || ee.ExitCode != tt.exit) {
				t.Errorf("Err() = %#v, want an *ExecutionError with code %d", err, tt.exit)
			}
		})
	}
}

// A command that prints slowly is seen line by line before it ends.
func TestExecStreamsLineByLine(t *testing.T) {
	c := newClient(t, server(t))
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	ctx := ctxFor(t, time.Minute)
	start := time.Now()
	var arrivals []time.Duration
	x, err := sb.Exec(ctx, hybox.Command{Command: "for i in 1 2 3 4; do echo line$i; sleep 0.3; done"}, &hybox.Handlers{
		OnStdout: func(string) { arrivals = append(arrivals, time.Since(start)) },
	})
	if err != nil || x.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, x)
	}
	total := time.Since(start)
	if len(arrivals) != 4 {
		t.Fatalf("saw %d lines, want 4", len(arrivals))
	}
	// The command runs 1.2 s; its lines arrive over that time, not at its
	// end.
	if arrivals[0] > total-600*time.Millisecond || arrivals[3]-arrivals[0] < 500*time.Millisecond {
		t.Errorf("lines arrived at %v of %v: not streamed", arrivals, total)
	}

	// The same as an iterator.
	var types []api.EventType
	var first time.Duration
	start = time.Now()
	for ev, err := range sb.ExecEvents(ctx, hybox.Command{Command: "echo a; sleep 0.5; echo b"}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == api.EventTypeStdout && first == 0 {
			first = time.Since(start)
		}
		types = append(types, ev.Type)
	}
	if time.Since(start)-first < 400*time.Millisecond {
		t.Errorf("the iterator yielded the first line %v before the end", time.Since(start)-first)
	}
	if types[0] != api.EventTypeInit || types[len(types)-1] != api.EventTypeExecutionComplete {
		t.Errorf("event types %v", types)
	}
}

// countLines returns the number of lines of a sandbox file (0 when absent).
func countLines(t *testing.T, sb *hybox.Sandbox, name string) int {
	t.Helper()
	b, err := sb.ReadFile(ctxFor(t, 10*time.Second), name)
	if errors.Is(err, hybox.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// Cancelling the context of a running command interrupts it on the server.
func TestExecCancelInterrupts(t *testing.T) {
	c := newClient(t, server(t))
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	tests := []struct {
		name string
		run  func(ctx context.Context, cmd hybox.Command) error
	}{
		{"Exec", func(ctx context.Context, cmd hybox.Command) error {
			_, err := sb.Exec(ctx, cmd, nil)
			return err
		}},
		{"ExecEvents stopped early", func(ctx context.Context, cmd hybox.Command) error {
			for ev, err := range sb.ExecEvents(ctx, cmd) {
				if err != nil {
					return err
				}
				if ev.Type == api.EventTypeStdout {
					return context.Canceled // the consumer goes away
				}
			}
			return nil
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := "/tmp/ticks" + strconv.Itoa(i)
			cmd := hybox.Command{Command: "for i in $(seq 1 100); do echo $i >> " + file + "; echo tick; sleep 0.1; done"}
			ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
			defer cancel()
			err := tt.run(ctx, cmd)
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.Fatalf("run: %v, want the context's error", err)
			}
			time.Sleep(time.Second) // the interrupt lands
			n := countLines(t, sb, file)
			time.Sleep(700 * time.Millisecond)
			if m := countLines(t, sb, file); m != n || n == 0 || n >= 100 {
				t.Fatalf("the command went on after cancel: %d lines, then %d", n, m)
			}
		})
	}
}

func TestBackgroundCommand(t *testing.T) {
	c := newClient(t, server(t))
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	ctx := ctxFor(t, time.Minute)
	bg, err := sb.Start(ctx, hybox.Command{Command: "echo first; sleep 0.5; echo second; exit 3"})
	if err != nil || bg.ID == "" {
		t.Fatalf("start: %v", err)
	}
	st, err := bg.Status(ctx)
	if err != nil || !st.Running {
		t.Fatalf("status while running: %v %+v", err, st)
	}
	var logs string
	var cursor int64
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs, "first") && time.Now().Before(deadline); {
		var chunk string
		chunk, cursor, err = bg.Logs(ctx, cursor)
		if err != nil {
			t.Fatal(err)
		}
		logs += chunk
		time.Sleep(50 * time.Millisecond)
	}
	st, err = bg.Wait(ctx, 0)
	if err != nil || st.Running || st.ExitCode == nil || *st.ExitCode != 3 {
		t.Fatalf("wait: %v %+v", err, st)
	}
	rest, next, err := bg.Logs(ctx, cursor)
	if err != nil {
		t.Fatal(err)
	}
	if logs+rest != "first\nsecond\n" || next != int64(len(logs+rest)) {
		t.Errorf("logs %q + %q, cursor %d", logs, rest, next)
	}

	// Kill, through a handle made from the id.
	long, err := sb.Start(ctx, hybox.Command{Command: "sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sb.Command(ctx, long.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Kill(ctx); err != nil {
		t.Fatalf("kill: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if st, err := h.Wait(wctx, 0); err != nil || st.Running {
		t.Fatalf("after kill: %v %+v", err, st)
	}
	missing, _ := sb.Command(ctx, "no-such-command")
	if _, err := missing.Status(ctx); !errors.Is(err, hybox.ErrNotFound) {
		t.Errorf("status of an unknown command: %v, want ErrNotFound", err)
	}
}

func TestSession(t *testing.T) {
	c := newClient(t, server(t))
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	ctx := ctxFor(t, time.Minute)
	se, err := sb.CreateSession(ctx, api.SessionRequest{Envs: map[string]string{"A": "1"}})
	if err != nil || se.ID == "" {
		t.Fatalf("create session: %v", err)
	}
	steps := []struct{ cmd, want string }{
		{"mkdir -p /tmp/s && cd /tmp/s && export B=2", ""},
		{"pwd; echo $A$B", "/tmp/s\n12"},
	}
	for _, st := range steps {
		x, err := se.Run(ctx, api.SessionRunRequest{Command: st.cmd}, nil)
		if err != nil || x.Err() != nil || x.Text() != st.want {
			t.Fatalf("run %q: %v %v %q, want %q", st.cmd, err, x.Err(), x.Text(), st.want)
		}
	}
	x, err := se.Run(ctx, api.SessionRunRequest{Command: "exit 4"}, nil)
	if err != nil || x.ExitCode != 4 {
		t.Fatalf("exit 4: %v %+v", err, x)
	}
	if err := se.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := se.Run(ctx, api.SessionRunRequest{Command: "true"}, nil); !errors.Is(err, hybox.ErrNotFound) {
		t.Errorf("run in a closed session: %v, want ErrNotFound", err)
	}
}
