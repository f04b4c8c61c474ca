package wsh

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEscapesRefused(t *testing.T) {
	dir, root := workspace(t)
	// A symlink planted inside the workspace that points at the host's /etc,
	// and a secret file next to (outside) the workspace.
	if err := os.Symlink("/etc", filepath.Join(dir, "work", "etclink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../outside", filepath.Join(dir, "work", "uplink")); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(filepath.Dir(dir), "outside")
	if err := os.WriteFile(outside, []byte("SECRET\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(outside) })
	opts := Options{Root: root}
	tests := []struct {
		name  string
		src   string
		quiet bool // finding nothing is not an error
	}{
		{name: "absolute dotdot", src: "cat /../../etc/passwd"},
		{name: "relative dotdot", src: "cat ../../../etc/hostname"},
		{name: "symlink to etc", src: "cat etclink/passwd; ls etclink"},
		{name: "symlink up", src: "cat uplink"},
		{name: "cd above root", src: "cd /..; ls; cat etc/passwd; pwd"},
		{name: "redirect out", src: "cat < /../../etc/passwd; echo pwn > ../../../../tmp/wsh-escape-test"},
		{name: "grep host", src: "grep -r root /etc /../etc"},
		{name: "glob host", src: "echo /../../e*/pass*", quiet: true},
		{name: "find host", src: "find /.. -name passwd", quiet: true},
		{name: "sh -c", src: "sh -c 'cat /../../etc/passwd'"},
		{name: "cp out", src: "cp /work/a.txt /../../../tmp/wsh-escape-test; ln -s /etc/passwd p && cat p"},
		{name: "process substitution", src: "cat <(cat /etc/passwd); diff <(echo a) >(cat)"},
		{name: "type host path", src: "type -p passwd; command -v passwd; which passwd", quiet: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if _, err := Run(context.Background(), opts, tc.src, "/work", nil, nil, &out, &errb); err != nil {
				t.Fatal(err)
			}
			all := out.String() + errb.String()
			t.Logf("%s", all)
			if errb.Len() == 0 && !tc.quiet {
				t.Errorf("no error reported: %q", all)
			}
			for _, leak := range []string{"root:x:0", "SECRET", "hostname", "passwd\n", "bin\n"} {
				if strings.Contains(out.String(), leak) {
					t.Errorf("output leaks %q: %q", leak, all)
				}
			}
		})
	}
	if _, err := os.Stat("/tmp/wsh-escape-test"); err == nil {
		os.Remove("/tmp/wsh-escape-test")
		t.Error("a file was written outside the root")
	}
	// cd /.. stays at the guest root, which is the workspace.
	var out bytes.Buffer
	if _, err := Run(context.Background(), opts, "cd /../..; pwd; ls", "/work", nil, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "/\ntmp\nwork\n" {
		t.Errorf("cd /../..: got %q", out.String())
	}
}

func TestSession(t *testing.T) {
	_, root := workspace(t)
	s, err := NewSession(Options{Root: root, Env: map[string]string{"BASE": "b"}}, "/work", map[string]string{"X": "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	steps := []struct {
		name string
		src  string
		code int
		out  string
	}{
		{name: "cd", src: "cd sub", out: ""},
		{name: "cwd kept", src: "pwd; ls", out: "/work/sub\nc.py\ndeep\n"},
		{name: "export", src: "export FOO=bar; plain=p; f() { echo f$1; }", out: ""},
		{name: "env kept", src: "echo $FOO $plain $X $BASE; f 9; env | grep FOO", out: "bar p 1 b\nf9\nFOO=bar\n"},
		{name: "exit", src: "exit 3", code: 3},
		{name: "after exit", src: "echo still $FOO; pwd", out: "still bar\n/work/sub\n"},
		{name: "cd root", src: "cd /", out: ""},
		{name: "cwd root", src: "pwd", out: "/\n"},
	}
	for _, st := range steps {
		var out, errb bytes.Buffer
		code, err := s.Run(context.Background(), st.src, &out, &errb)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if code != st.code || out.String() != st.out {
			t.Errorf("%s: code %d out %q (stderr %q), want %d %q", st.name, code, out.String(), errb.String(), st.code, st.out)
		}
	}
	if s.Cwd() != "/" {
		t.Errorf("Cwd = %q", s.Cwd())
	}
	s.Close()
	if _, err := s.Run(context.Background(), "true", nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("run after close: %v", err)
	}
}

func TestStoppedByContext(t *testing.T) {
	_, root := workspace(t)
	opts := Options{Root: root}
	tests := []struct {
		name   string
		src    string
		cancel bool // cancel instead of a deadline
		code   int
		want   error
	}{
		{name: "busy loop", src: "while true; do :; done", code: ExitTimeout, want: context.DeadlineExceeded},
		{name: "long sleep", src: "sleep 100", code: ExitTimeout, want: context.DeadlineExceeded},
		{name: "yes forever", src: "yes > /dev/null", code: ExitTimeout, want: context.DeadlineExceeded},
		{name: "pipeline reading", src: "sleep 100 | cat", code: ExitTimeout, want: context.DeadlineExceeded},
		{name: "cancelled", src: "while :; do echo x > /dev/null; done", cancel: true, code: ExitInterrupted, want: context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ctx context.Context
			var cancel context.CancelFunc
			if tc.cancel {
				ctx, cancel = context.WithCancel(context.Background())
				time.AfterFunc(100*time.Millisecond, cancel)
			} else {
				ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
			}
			defer cancel()
			done := make(chan struct{})
			var code int
			var err error
			go func() {
				defer close(done)
				code, err = Run(ctx, opts, tc.src, "/", nil, nil, nil, nil)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("script was not stopped")
			}
			if code != tc.code || !errors.Is(err, tc.want) {
				t.Errorf("code %d err %v, want %d %v", code, err, tc.code, tc.want)
			}
		})
	}
}

func TestStdinCancel(t *testing.T) {
	_, root := workspace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	defer pr.Close()
	code, err := Run(ctx, Options{Root: root}, "cat", "/", nil, pr, nil, nil)
	if code != ExitTimeout || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("code %d err %v", code, err)
	}
}

func TestBadOptions(t *testing.T) {
	_, root := workspace(t)
	if _, err := Run(context.Background(), Options{}, "true", "/", nil, nil, nil, nil); !errors.Is(err, ErrNoRoot) {
		t.Errorf("no root: %v", err)
	}
	if _, err := Run(context.Background(), Options{Root: root}, "true", "/nope", nil, nil, nil, nil); !errors.Is(err, ErrBadCwd) {
		t.Errorf("bad cwd: %v", err)
	}
	if _, err := NewSession(Options{Root: root}, "/work/a.txt", nil); !errors.Is(err, ErrBadCwd) {
		t.Errorf("file cwd: %v", err)
	}
}
