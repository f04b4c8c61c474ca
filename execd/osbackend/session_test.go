package osbackend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
)

func TestSessionPersistsState(t *testing.T) {
	b := newBackend(t)
	s, err := b.NewSession(context.Background(), "/", map[string]string{"START": "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	steps := []struct {
		name    string
		command string
		code    int
		stdout  string
		stderr  string
	}{
		{name: "mkdir and cd", command: "mkdir -p d && cd d"},
		{name: "cwd kept", command: "basename \"$PWD\"", stdout: "d\n"},
		{name: "set variables", command: "X=1; export Y=2; declare Z=3; f() { echo \"f$1\"; }"},
		{name: "variables and functions kept", command: "echo $X $Y $Z $START; f 9", stdout: "1 2 3 s\nf9\n"},
		{name: "exit code", command: "echo oops >&2; false", code: 1, stderr: "oops\n"},
		{name: "explicit code", command: "(exit 42)", code: 42},
		{name: "syntax error does not break the session", command: "if then", code: 2},
		{name: "still alive", command: "echo alive", stdout: "alive\n"},
		{name: "no trailing newline", command: "printf abc", stdout: "abc"},
		{name: "stdin is not the session's input", command: "cat; echo after", stdout: "after\n"},
		{name: "quotes", command: `echo "it's" 'a "test"'`, stdout: "it's a \"test\"\n"},
		{name: "multi-line", command: "for i in 1 2\ndo echo $i\ndone", stdout: "1\n2\n"},
	}
	for _, st := range steps {
		var out, errb bytes.Buffer
		code, err := s.Run(context.Background(), st.command, &out, &errb)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if code != st.code || out.String() != st.stdout || (st.stderr != "" && errb.String() != st.stderr) {
			t.Fatalf("%s: code %d stdout %q stderr %q; want %d %q %q", st.name, code, out.String(), errb.String(), st.code, st.stdout, st.stderr)
		}
	}
}

func TestSessionInterrupt(t *testing.T) {
	b := newBackend(t)
	s, err := b.NewSession(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Run(context.Background(), "KEEP=yes", nil, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(300*time.Millisecond, func() { cancel(fmt.Errorf("%w by a test", execd.ErrInterrupted)) })
	start := time.Now()
	var out bytes.Buffer
	code, err := s.Run(ctx, "for i in 1 2 3; do sleep 5; done; echo finished", &out, nil)
	if !errors.Is(err, execd.ErrInterrupted) || code != 130 || strings.Contains(out.String(), "finished") {
		t.Fatalf("code %d err %v out %q", code, err, out.String())
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("interrupt took %s", d)
	}
	out.Reset()
	code, err = s.Run(context.Background(), "echo $KEEP", &out, nil)
	if err != nil || code != 0 || out.String() != "yes\n" {
		t.Fatalf("after interrupt: code %d err %v out %q", code, err, out.String())
	}
}

func TestSessionKilledWhenSIGINTIgnored(t *testing.T) {
	b := newBackend(t, func(o *Options) { o.InterruptGrace = 500 * time.Millisecond })
	s, err := b.NewSession(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = s.Run(ctx, "trap '' INT; sleep 20", nil, nil)
	if !errors.Is(err, execd.ErrTimeout) {
		t.Fatalf("err %v, want ErrTimeout", err)
	}
	if _, err := s.Run(context.Background(), "true", nil, nil); !errors.Is(err, errSessionEnded) {
		t.Fatalf("after kill: %v, want errSessionEnded", err)
	}
}

func TestSessionExit(t *testing.T) {
	b := newBackend(t)
	s, err := b.NewSession(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	code, err := s.Run(context.Background(), "exit 7", nil, nil)
	if !errors.Is(err, errSessionEnded) || code != 7 {
		t.Fatalf("code %d err %v", code, err)
	}
}

func TestMarkerSplitter(t *testing.T) {
	const mark = "<END>\n"
	cases := []struct {
		name   string
		stream string
		out    string
		hits   int
	}{
		{name: "plain", stream: "hello", out: "hello"},
		{name: "marker", stream: "a" + mark + "b", out: "ab", hits: 1},
		{name: "two markers", stream: mark + mark, hits: 2},
		{name: "false start", stream: "<EN<END>\n>", out: "<EN>", hits: 1},
		{name: "partial at end", stream: "x<EN", out: "x<EN"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for n := 1; n <= len(c.stream); n++ {
				var out bytes.Buffer
				hits := 0
				sp := &markerSplitter{marker: []byte(mark), out: func(p []byte) { out.Write(p) }, hit: func() { hits++ }}
				for chunk := range slices.Chunk([]byte(c.stream), n) {
					sp.write(chunk)
				}
				sp.flush()
				if out.String() != c.out || hits != c.hits {
					t.Fatalf("chunks of %d: out %q hits %d; want %q %d", n, out.String(), hits, c.out, c.hits)
				}
			}
		})
	}
}

// output collects an interpreter's output.
type output struct {
	stdout, stderr bytes.Buffer
	results        []map[string]string
}

func (o *output) Stdout(p []byte)                 { o.stdout.Write(p) }
func (o *output) Stderr(p []byte)                 { o.stderr.Write(p) }
func (o *output) Result(bundle map[string]string) { o.results = append(o.results, bundle) }

func newInterp(t *testing.T, b *Executor, lang string) execd.Interpreter {
	t.Helper()
	exe := map[string]string{"python": "python3", "javascript": "node"}[lang]
	if _, err := exec.LookPath(exe); err != nil {
		t.Skip(exe, "not installed")
	}
	it, err := b.NewInterpreter(context.Background(), lang, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = it.Close() })
	return it
}

func TestPythonContext(t *testing.T) {
	b := newBackend(t)
	it := newInterp(t, b, "python")
	runSteps(t, it, []cellStep{
		{name: "define", code: "x = 41\ndef f(): return x + 1"},
		{name: "state and result", code: "print('hi')\nf()", stdout: "hi\n", result: "42"},
		{name: "exception", code: "1/0", ename: "ZeroDivisionError"},
		{name: "subprocess output", code: "import subprocess\nsubprocess.run(['echo', 'from child'])\nNone", stdout: "from child\n"},
		{name: "stdin of children is empty", code: "import subprocess\nprint(subprocess.run(['cat'], capture_output=True).stdout)", stdout: "b''\n"},
		{name: "state after error", code: "x", result: "41"},
	})
}

func TestPythonInterruptKeepsState(t *testing.T) {
	b := newBackend(t)
	it := newInterp(t, b, "python")
	if _, err := it.Run(context.Background(), "state = 'kept'", &output{}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		code string
		stop func() (context.Context, context.CancelFunc)
		want error
	}{
		{name: "interrupt busy loop", code: "while True: pass", want: execd.ErrInterrupted, stop: func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(300*time.Millisecond, func() { cancel(execd.ErrInterrupted) })
			return ctx, func() { cancel(nil) }
		}},
		{name: "timeout in sleep", code: "import time\ntime.sleep(30)", want: execd.ErrTimeout, stop: func() (context.Context, context.CancelFunc) {
			return context.WithTimeoutCause(context.Background(), 300*time.Millisecond, execd.ErrTimeout)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := c.stop()
			defer cancel()
			_, err := it.Run(ctx, c.code, &output{})
			if !errors.Is(err, c.want) || errors.Is(err, execd.ErrContextLost) {
				t.Fatalf("err %v, want %v without ErrContextLost", err, c.want)
			}
			var out output
			if _, err := it.Run(context.Background(), "state", &out); err != nil || len(out.results) != 1 || out.results[0]["text/plain"] != "'kept'" {
				t.Fatalf("state after stop: %v %+v", err, out.results)
			}
		})
	}
}

func TestPythonKilledWhenSIGINTIgnored(t *testing.T) {
	b := newBackend(t, func(o *Options) { o.InterruptGrace = 500 * time.Millisecond })
	it := newInterp(t, b, "python")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, execd.ErrTimeout)
	defer cancel()
	_, err := it.Run(ctx, "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)", &output{})
	if !errors.Is(err, execd.ErrTimeout) || !errors.Is(err, execd.ErrContextLost) {
		t.Fatalf("err %v, want ErrTimeout and ErrContextLost", err)
	}
	if _, err := it.Run(context.Background(), "1", &output{}); !errors.Is(err, execd.ErrContextLost) {
		t.Fatalf("run after kill: %v", err)
	}
}

func TestJavaScriptContext(t *testing.T) {
	b := newBackend(t)
	it := newInterp(t, b, "javascript")
	var out output
	if _, err := it.Run(context.Background(), "var x = 41; console.log('hi')", &out); err != nil {
		t.Fatal(err)
	}
	if out.stdout.String() != "hi\n" {
		t.Fatalf("stdout %q", out.stdout.String())
	}
	out = output{}
	if _, err := it.Run(context.Background(), "x + 1", &out); err != nil || len(out.results) != 1 || out.results[0]["text/plain"] != "42" {
		t.Fatalf("result %v %+v", err, out.results)
	}
	execErr, err := it.Run(context.Background(), "throw new TypeError('bad')", &output{})
	if err != nil || execErr == nil || execErr.EName != "TypeError" || execErr.EValue != "bad" {
		t.Fatalf("error %v %+v", err, execErr)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(300*time.Millisecond, func() { cancel(execd.ErrInterrupted) })
	if _, err := it.Run(ctx, "while (true) {}", &output{}); !errors.Is(err, execd.ErrInterrupted) || errors.Is(err, execd.ErrContextLost) {
		t.Fatalf("interrupt: %v", err)
	}
	out = output{}
	if _, err := it.Run(context.Background(), "x", &out); err != nil || len(out.results) != 1 || out.results[0]["text/plain"] != "41" {
		t.Fatalf("state after interrupt: %v %+v", err, out.results)
	}
}

func TestUnknownLanguage(t *testing.T) {
	b := newBackend(t, func(o *Options) { o.Node = "no-such-node-binary" })
	if _, err := b.NewInterpreter(context.Background(), "javascript", ""); !errors.Is(err, execd.ErrUnknownLanguage) {
		t.Fatalf("missing node: %v", err)
	}
	if _, err := b.NewInterpreter(context.Background(), "cobol", ""); !errors.Is(err, execd.ErrUnknownLanguage) {
		t.Fatalf("cobol: %v", err)
	}
	if slices.Contains(b.Languages(), "javascript") {
		t.Fatalf("languages %v list a missing node", b.Languages())
	}
}

func TestTerminal(t *testing.T) {
	b := newBackend(t)
	term, err := b.StartPTY(context.Background(), execd.PTYSpec{Command: "stty size; read line; echo got:$line; exit 3", Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	if _, err := term.Write([]byte("hello\r")); err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	buf := make([]byte, 1024)
	for {
		n, err := term.Read(buf)
		all.Write(buf[:n])
		if err != nil {
			break
		}
	}
	code, _ := term.Wait()
	s := all.String()
	if !strings.Contains(s, "30 100") || !strings.Contains(s, "got:hello") || code != 3 {
		t.Fatalf("code %d output %q", code, s)
	}
}
