package osbackend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
)

// warmAndCold returns a backend with a warm shell and one without, on the
// same root.
func warmAndCold(t *testing.T) (warm, cold *Executor) {
	t.Helper()
	warm = newBackend(t, func(o *Options) { o.WarmShell = true })
	if !warm.warmOK.Load() {
		t.Skip("the shell cannot have a warm shell (not bash)")
	}
	cold = newBackend(t, func(o *Options) { o.RootDir = warm.opts.RootDir })
	return warm, cold
}

// idleWarm waits for the idle warm shell and returns its pid.
func idleWarm(t *testing.T, b *Executor) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.warmMu.Lock()
		w := b.warm
		b.warmMu.Unlock()
		if w != nil {
			return w.pid
		}
		if time.Now().After(deadline) {
			t.Fatal("no warm shell started")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type outcome struct {
	code           int
	stdout, stderr string
	err            error
}

// runOn runs spec on b; on a warm backend it checks that the warm shell
// ran it, or stayed idle when spec needs the cold path. shared sends
// stdout and stderr to one writer (stdout).
func runOn(t *testing.T, b *Executor, spec execd.ProcessSpec, shared bool) outcome {
	t.Helper()
	want := 0
	if b.warmOK.Load() {
		want = idleWarm(t, b)
		if _, ok := warmSetup(spec, "", "", false, ""); !ok {
			idle := want
			defer func() {
				if got := idleWarm(t, b); got != idle {
					t.Errorf("warm shell %d was used for a cold spec (now %d)", idle, got)
				}
			}()
			want = -1
		}
	}
	var out, errb recorder
	spec.Stdout, spec.Stderr = &out, &errb
	if shared {
		spec.Stderr = &out
	}
	p, err := b.StartCommand(context.Background(), spec)
	if err != nil {
		return outcome{err: err}
	}
	if b.warmOK.Load() && want > 0 && p.(*process).pgid != want {
		t.Fatalf("warm backend ran the command in %d, not on warm shell %d", p.(*process).pgid, want)
	}
	code, err := p.Wait()
	return outcome{code: code, stdout: out.String(), stderr: errb.String(), err: err}
}

func TestWarmShellMatchesCold(t *testing.T) {
	warm, cold := warmAndCold(t)
	if err := os.Mkdir(filepath.Join(warm.opts.RootDir, "sub dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("echo 'a long command line'\n", 4000) + "echo done"
	cases := []struct {
		name     string
		spec     execd.ProcessSpec
		shared   bool
		stdout   string // when not empty, the expected stdout
		anyError bool   // stderr differs (bash names eval in syntax errors)
	}{
		{name: "echo", spec: execd.ProcessSpec{Command: "echo hi"}, stdout: "hi\n"},
		{name: "exit 3", spec: execd.ProcessSpec{Command: "echo err >&2; exit 3"}},
		{name: "status of last command", spec: execd.ProcessSpec{Command: "false"}},
		{name: "exit without status", spec: execd.ProcessSpec{Command: "false; exit"}},
		{name: "killed by SIGKILL", spec: execd.ProcessSpec{Command: "kill -9 $$"}},
		{name: "killed by SIGTERM", spec: execd.ProcessSpec{Command: "kill -TERM $$"}},
		{name: "syntax error", spec: execd.ProcessSpec{Command: "if then"}, anyError: true},
		// bash -c execs its last command; the warm shell waits for it and
		// reports its death on stderr ("Segmentation fault"): same code.
		{name: "last command killed by a signal", spec: execd.ProcessSpec{Command: `sh -c 'kill -SEGV $$'`}, anyError: true},
		{name: "command not found", spec: execd.ProcessSpec{Command: "no-such-command-xyz"}},
		{name: "separate streams", spec: execd.ProcessSpec{Command: "echo out; echo err >&2; echo out2"}},
		{name: "shared writer order", shared: true,
			spec:   execd.ProcessSpec{Command: "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done"},
			stdout: "out1\nerr1\nout2\nerr2\nout3\nerr3\nout4\nerr4\nout5\nerr5\n"},
		{name: "env", spec: execd.ProcessSpec{Command: `printf '%s|' "$A" "$B" "$C" "$HOME"; env | grep -c '^A='`,
			Env: map[string]string{"A": "it's \"quoted\" $x `y` \\z", "B": "line1\nline2\n", "C": "é\xff", "HOME": "/elsewhere"}}},
		{name: "special variable takes the cold path", spec: execd.ProcessSpec{Command: `echo $SHLVL`,
			Env: map[string]string{"SHLVL": "5"}}},
		{name: "cwd", spec: execd.ProcessSpec{Command: `pwd; echo "$PWD"; declare -p OLDPWD; cd - >/dev/null 2>&1; echo $?`, Cwd: "/sub dir"}},
		{name: "default cwd", spec: execd.ProcessSpec{Command: `pwd; declare -p OLDPWD`}},
		{name: "read at EOF", spec: execd.ProcessSpec{Command: `read x; echo "$? [$x]"`}, stdout: "1 []\n"},
		{name: "quotes", spec: execd.ProcessSpec{Command: `echo "a 'b' \"c\"" 'd "e"' $'f\tg' \\`}},
		{name: "newlines", spec: execd.ProcessSpec{Command: "echo a\n\necho b\n\n\n"}},
		{name: "positional parameters", spec: execd.ProcessSpec{Command: `echo "$0|$#|$@|$*|$-"`}},
		{name: "shell variables", spec: execd.ProcessSpec{Command: `echo "$LINENO $SECONDS $_"; echo "$BASH_EXECUTION_STRING"; compgen -v | grep -c ^` + warmPrefix + `; echo $?`}},
		{name: "heredoc", spec: execd.ProcessSpec{Command: "cat <<EOF\nx $((1+2)) $HOME\nEOF\ncat <<'E'\n$y\nE"}},
		{name: "trap", spec: execd.ProcessSpec{Command: `trap 'echo bye $?' EXIT; (exit 4); exit 5`}},
		{name: "pipeline", spec: execd.ProcessSpec{Command: `printf 'b\na\n' | sort; echo ${PIPESTATUS[*]}`}},
		{name: "background child", spec: execd.ProcessSpec{Command: `sleep 3 & echo started`}, stdout: "started\n"},
		{name: "stdin is empty", spec: execd.ProcessSpec{Command: "cat; echo done"}, stdout: "done\n"},
		{name: "invalid utf-8", spec: execd.ProcessSpec{Command: "printf '%s' '\xff\xfe\xc3'| od -An -tx1"}},
		{name: "long command", spec: execd.ProcessSpec{Command: long}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			w := runOn(t, warm, c.spec, c.shared)
			if time.Since(start) > 5*time.Second {
				t.Fatalf("warm run took %s", time.Since(start))
			}
			k := runOn(t, cold, c.spec, c.shared)
			if w.err != nil || k.err != nil {
				t.Fatalf("warm err %v, cold err %v", w.err, k.err)
			}
			if w.code != k.code || w.stdout != k.stdout || (!c.anyError && w.stderr != k.stderr) {
				t.Fatalf("warm %d %q %q\ncold %d %q %q", w.code, w.stdout, w.stderr, k.code, k.stdout, k.stderr)
			}
			if c.stdout != "" && w.stdout != c.stdout {
				t.Fatalf("stdout %q, want %q", w.stdout, c.stdout)
			}
		})
	}
}

func TestWarmShellMissingCwd(t *testing.T) {
	warm, cold := warmAndCold(t)
	for _, b := range []*Executor{warm, cold} {
		_, err := b.StartCommand(context.Background(), execd.ProcessSpec{Command: "true", Cwd: "/missing"})
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("warm %v: missing cwd: %v, want ErrNotExist", b.warmOK.Load(), err)
		}
	}
}

func TestWarmShellKillsProcessGroup(t *testing.T) {
	warm, cold := warmAndCold(t)
	for _, b := range []*Executor{warm, cold} {
		var want int
		if b.warmOK.Load() {
			want = idleWarm(t, b)
		}
		var out recorder
		p, err := b.StartCommand(context.Background(), execd.ProcessSpec{Command: "sleep 60 & echo $!; wait", Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		if b.warmOK.Load() && want > 0 && p.(*process).pgid != want {
			t.Fatal("the warm shell was not used")
		}
		var pid int
		deadline := time.Now().Add(5 * time.Second)
		for pid == 0 && time.Now().Before(deadline) {
			pid, _ = strconv.Atoi(strings.TrimSpace(out.String()))
			time.Sleep(10 * time.Millisecond)
		}
		if pid == 0 || !alive(pid) {
			t.Fatalf("grandchild not running (output %q)", out.String())
		}
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		if code, _ := p.Wait(); code != 137 {
			t.Fatalf("warm %v: exit code %d, want 137", b.warmOK.Load(), code)
		}
		waitGone(t, pid)
	}
}

func TestWarmShellBackgroundChildDoesNotHangWait(t *testing.T) {
	warm, _ := warmAndCold(t)
	idleWarm(t, warm)
	var out recorder
	p, err := warm.StartCommand(context.Background(), execd.ProcessSpec{Command: "sleep 100 & echo $!", Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() { c, _ := p.Wait(); done <- c }()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("code %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait hangs while a background child holds stdout")
	}
	_ = p.Kill()
	if pid, _ := strconv.Atoi(strings.TrimSpace(out.String())); pid > 0 {
		waitGone(t, pid)
	}
}

func TestWarmShellContextCancelKills(t *testing.T) {
	warm, _ := warmAndCold(t)
	idleWarm(t, warm)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	p, err := warm.StartCommand(ctx, execd.ProcessSpec{Command: "sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if code, _ := p.Wait(); code != 137 || time.Since(start) > 5*time.Second {
		t.Fatalf("code %d after %s", code, time.Since(start))
	}
}

func TestWarmShellClosedWithBackend(t *testing.T) {
	b := newBackend(t, func(o *Options) { o.WarmShell = true })
	if !b.warmOK.Load() {
		t.Skip("not bash")
	}
	pid := idleWarm(t, b)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
}

func TestShQuote(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{name: "plain", in: "abc", want: `$'abc'`},
		{name: "quotes and backslash", in: `a'b\c"`, want: `$'a\'b\\c"'`},
		{name: "control and non-ASCII bytes", in: "\n\x01a\xc3\xa9", want: `$'\x0a\x01a\xc3\xa9'`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := shQuote(c.in); got != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
		})
	}
}

// BenchmarkCommandWarmCold measures StartCommand+Wait of "echo hi" on the
// cold and the warm path, back to back and spaced 50 ms apart (time for
// the next warm shell to start). Under gVisor run the test binary with
// `runsc --platform=ptrace do`.
func BenchmarkCommandWarmCold(b *testing.B) {
	for _, warm := range []bool{false, true} {
		for _, gap := range []time.Duration{0, 50 * time.Millisecond} {
			b.Run(fmt.Sprintf("warm=%v/gap=%v", warm, gap), func(b *testing.B) {
				be, err := New(Options{RootDir: b.TempDir(), Env: os.Environ(), WarmShell: warm})
				if err != nil {
					b.Fatal(err)
				}
				defer be.Close()
				time.Sleep(200 * time.Millisecond) // the first warm shell
				var lat latencies
				for range b.N {
					time.Sleep(gap)
					var out recorder
					start := time.Now()
					p, err := be.StartCommand(context.Background(), execd.ProcessSpec{Command: "echo hi", Stdout: &out})
					if err != nil {
						b.Fatal(err)
					}
					if code, err := p.Wait(); code != 0 || err != nil || out.String() != "hi\n" {
						b.Fatalf("code %d err %v output %q", code, err, out.String())
					}
					lat = append(lat, time.Since(start))
				}
				lat.report(b)
			})
		}
	}
}

type latencies []time.Duration

// report sets the p50 latency in ms as the benchmark's metric.
func (l latencies) report(b *testing.B) {
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	b.ReportMetric(float64(l[len(l)/2].Microseconds())/1000, "p50-ms")
}

// SetEnv (a pooled sandbox being claimed) reaches the next command on the
// warm path (the warm shell started before it exports what changed) and
// on the cold one; a request's own variable still wins.
func TestSetEnvReachesNextCommand(t *testing.T) {
	warm, cold := warmAndCold(t)
	for _, b := range []*Executor{warm, cold} {
		b.SetEnv(append(b.baseEnv(), "CLAIMED=yes", "MINE=base"))
		o := runOn(t, b, execd.ProcessSpec{Command: "echo ${CLAIMED:-no} $MINE", Env: map[string]string{"MINE": "request"}}, false)
		if o.err != nil || o.stdout != "yes request\n" {
			t.Fatalf("warm=%v: stdout %q, err %v; want yes request", b.warmOK.Load(), o.stdout, o.err)
		}
		// The warm shells started after SetEnv have it in their environment.
		o = runOn(t, b, execd.ProcessSpec{Command: "echo ${CLAIMED:-no} $MINE"}, false)
		if o.err != nil || o.stdout != "yes base\n" {
			t.Fatalf("warm=%v: stdout %q, err %v; want yes base", b.warmOK.Load(), o.stdout, o.err)
		}
	}
	if _, ok := envSince([]string{"A=1", "B=2"}, []string{"A=1"}); ok {
		t.Fatal("a dropped variable must send the command down the cold path")
	}
	if d, ok := envSince([]string{"A=1", "B=2"}, []string{"A=1", "B=3", "C=4"}); !ok || len(d) != 2 || d["B"] != "3" || d["C"] != "4" {
		t.Fatalf("envSince: %v %v", d, ok)
	}
}
