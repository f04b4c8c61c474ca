package execd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// scriptedSession is a Session whose Run writes out and returns what it is told.
type scriptedSession struct {
	out       string
	code      int
	err       error
	lateOut   io.Writer // the stdout of the last run
	closeSeen bool
}

func (s *scriptedSession) Run(ctx context.Context, command string, stdout, stderr io.Writer) (int, error) {
	_, _ = io.WriteString(stdout, s.out)
	s.lateOut = stdout
	return s.code, s.err
}

func (s *scriptedSession) Close() error { s.closeSeen = true; return nil }

type recordOutput struct{ stdout, stderr strings.Builder }

func (o *recordOutput) Stdout(p []byte)          { o.stdout.Write(p) }
func (o *recordOutput) Stderr(p []byte)          { o.stderr.Write(p) }
func (o *recordOutput) Result(map[string]string) {}

func TestShellInterpreter(t *testing.T) {
	interrupted, interrupt := context.WithCancelCause(context.Background())
	interrupt(fmt.Errorf("%w by a test", ErrInterrupted))
	tests := []struct {
		name     string
		ctx      context.Context
		s        *scriptedSession
		ename    string
		evalue   string
		wantErr  error
		notLost  bool
		wantText string
	}{
		{name: "success", ctx: context.Background(), s: &scriptedSession{out: "hi\n"}, wantText: "hi\n"},
		{name: "exit status is data", ctx: context.Background(), s: &scriptedSession{out: "x\n", code: 3},
			ename: "CommandExecError", evalue: "3", wantText: "x\n"},
		{name: "the shell ended", ctx: context.Background(), s: &scriptedSession{code: 255, err: errors.New("shell exited")},
			wantErr: ErrContextLost},
		{name: "interrupted, state kept", ctx: interrupted, s: &scriptedSession{code: 130, err: fmt.Errorf("stopped: %w", ErrInterrupted)},
			wantErr: ErrInterrupted, notLost: true},
		{name: "interrupted, the session says only that ctx ended", ctx: interrupted, s: &scriptedSession{code: 130, err: context.Canceled},
			wantErr: ErrInterrupted, notLost: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh := &shellInterpreter{s: tt.s}
			var out recordOutput
			ee, err := sh.Run(tt.ctx, "cmd", &out)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || (tt.notLost && errors.Is(err, ErrContextLost)) {
					t.Fatalf("err %v, want %v (context lost: %v)", err, tt.wantErr, !tt.notLost)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.ename == "" && ee != nil:
				t.Fatalf("unexpected exec error %+v", ee)
			case tt.ename != "" && (ee == nil || ee.EName != tt.ename || ee.EValue != tt.evalue):
				t.Fatalf("exec error %+v, want %s %s", ee, tt.ename, tt.evalue)
			}
			if out.stdout.String() != tt.wantText {
				t.Fatalf("stdout %q, want %q", out.stdout.String(), tt.wantText)
			}
			// Output written after Run returned does not reach the execution.
			_, _ = io.WriteString(tt.s.lateOut, "late")
			if strings.Contains(out.stdout.String(), "late") {
				t.Fatal("output after Run reached the execution")
			}
		})
	}
	s := &scriptedSession{}
	_ = (&shellInterpreter{s: s}).Close()
	if !s.closeSeen {
		t.Fatal("Close did not close the session")
	}
}

// jsEcho is a JavaScript Interpreter that fails every cell with a
// traceback naming line 2 of <repl>.
type jsEcho struct{ got string }

func (j *jsEcho) Run(_ context.Context, code string, _ Output) (*ExecError, error) {
	j.got = code
	return &ExecError{EName: "TypeError", EValue: "bad at <repl>:2:5", Traceback: []string{"TypeError: bad", "    at f (<repl>:2:5)"}}, nil
}
func (j *jsEcho) Close() error { return nil }

// lineShift is a Transpiler that prefixes "js:" and maps `<repl>:2` to `<repl>:7`.
type lineShift struct{}

func (lineShift) Transpile(cell string) (string, func(string) string, error) {
	if strings.Contains(cell, "!!") {
		return "", nil, &SyntaxError{Line: 3, Column: 4, Message: "Unexpected \"!\"", Source: "a !!"}
	}
	return "js:" + cell, func(l string) string { return strings.ReplaceAll(l, "<repl>:2:5", "<repl>:7:1") }, nil
}

func TestTSInterpreter(t *testing.T) {
	js := &jsEcho{}
	ts := &tsInterpreter{js: js, tr: lineShift{}}
	ee, err := ts.Run(context.Background(), "cell", &recordOutput{})
	if err != nil || js.got != "js:cell" {
		t.Fatalf("ran %q: %v", js.got, err)
	}
	if ee == nil || ee.EValue != "bad at <repl>:7:1" || ee.Traceback[1] != "    at f (<repl>:7:1)" || ee.Traceback[0] != "TypeError: bad" {
		t.Fatalf("exec error %+v: positions not mapped back", ee)
	}
	js.got = ""
	ee, err = ts.Run(context.Background(), "x\ny\na !!", &recordOutput{})
	if err != nil || js.got != "" {
		t.Fatalf("a cell that does not parse ran (%q): %v", js.got, err)
	}
	want := []string{"SyntaxError: Unexpected \"!\" (<typescript>:3:4)", "    a !!", "       ^"}
	if ee == nil || ee.EName != "SyntaxError" || ee.EValue != "Unexpected \"!\" (line 3, column 4)" || strings.Join(ee.Traceback, "|") != strings.Join(want, "|") {
		t.Fatalf("syntax error %+v, want %q", ee, want)
	}
}
