package osbackend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
)

func newBackend(t *testing.T, mod ...func(*Options)) *Executor {
	t.Helper()
	opts := Options{RootDir: t.TempDir(), Env: os.Environ(), InterruptGrace: time.Second}
	for _, f := range mod {
		f(&opts)
	}
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// recorder is a concurrency-safe writer that remembers when bytes arrived.
type recorder struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	stamps []time.Time
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stamps = append(r.stamps, time.Now())
	return r.buf.Write(p)
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

func run(t *testing.T, b *Executor, spec execd.ProcessSpec) (int, string, string) {
	t.Helper()
	var out, errb recorder
	spec.Stdout, spec.Stderr = &out, &errb
	p, err := b.StartCommand(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func TestCommandExitCodes(t *testing.T) {
	b := newBackend(t)
	cases := []struct {
		name    string
		command string
		code    int
		stdout  string
		stderr  string
	}{
		{name: "success", command: "echo hi", code: 0, stdout: "hi\n"},
		{name: "exit code", command: "echo err >&2; exit 3", code: 3, stderr: "err\n"},
		{name: "killed by SIGKILL", command: "kill -9 $$", code: 137},
		{name: "killed by SIGTERM", command: "kill -TERM $$", code: 143},
		{name: "syntax error", command: "if then", code: 2},
		{name: "stdin is empty", command: "cat; echo done", code: 0, stdout: "done\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := run(t, b, execd.ProcessSpec{Command: c.command})
			if code != c.code || out != c.stdout || (c.stderr != "" && errOut != c.stderr) {
				t.Fatalf("code %d stdout %q stderr %q; want %d %q %q", code, out, errOut, c.code, c.stdout, c.stderr)
			}
		})
	}
}

func TestCommandStreamsAsProduced(t *testing.T) {
	b := newBackend(t)
	var out recorder
	start := time.Now()
	p, err := b.StartCommand(context.Background(), execd.ProcessSpec{Command: "echo first; sleep 0.5; echo second", Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	if out.String() != "first\nsecond\n" {
		t.Fatalf("output %q", out.String())
	}
	if first := out.stamps[0]; end.Sub(first) < 300*time.Millisecond {
		t.Fatalf("first line arrived %s after start, only %s before the end: not streamed", first.Sub(start), end.Sub(first))
	}
}

func TestCommandSharedWriterKeepsOrder(t *testing.T) {
	b := newBackend(t)
	var out recorder
	p, err := b.StartCommand(context.Background(), execd.ProcessSpec{
		Command: "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done", Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	want := "out1\nerr1\nout2\nerr2\nout3\nerr3\nout4\nerr4\nout5\nerr5\n"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}

func TestCommandEnvAndCwd(t *testing.T) {
	b := newBackend(t, func(o *Options) { o.Env = append(os.Environ(), "BASE_VAR=base", "OVERRIDE=old") })
	if err := os.Mkdir(filepath.Join(b.opts.RootDir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, _ := run(t, b, execd.ProcessSpec{
		Command: `echo "$BASE_VAR $OVERRIDE $EXTRA"; pwd -P`, Cwd: "/sub",
		Env: map[string]string{"OVERRIDE": "new", "EXTRA": "x y"}})
	real, _ := filepath.EvalSymlinks(filepath.Join(b.opts.RootDir, "sub"))
	if want := "base new x y\n" + real + "\n"; code != 0 || out != want {
		t.Fatalf("code %d output %q, want %q", code, out, want)
	}
	_, err := b.StartCommand(context.Background(), execd.ProcessSpec{Command: "true", Cwd: "/missing"})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing cwd: %v, want ErrNotExist", err)
	}
}

func TestCommandUIDGID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to switch users")
	}
	b := newBackend(t)
	// The user must be able to enter the working directory.
	for _, d := range []string{b.opts.RootDir, filepath.Dir(b.opts.RootDir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	uid, gid := 65534, 65533
	code, out, errOut := run(t, b, execd.ProcessSpec{Command: "id -u; id -g; id -G", UID: &uid, GID: &gid})
	if want := "65534\n65533\n65533\n"; code != 0 || out != want {
		t.Fatalf("code %d stdout %q stderr %q, want %q", code, out, errOut, want)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCommandKillsProcessGroup(t *testing.T) {
	b := newBackend(t)
	var out recorder
	p, err := b.StartCommand(context.Background(), execd.ProcessSpec{Command: "sleep 60 & echo $!; wait", Stdout: &out})
	if err != nil {
		t.Fatal(err)
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
	code, _ := p.Wait()
	if code != 137 {
		t.Fatalf("exit code %d, want 137", code)
	}
	waitGone(t, pid)
}

func TestCommandContextCancelKills(t *testing.T) {
	b := newBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	p, err := b.StartCommand(ctx, execd.ProcessSpec{Command: "sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, _ := p.Wait()
	if code != 137 || time.Since(start) > 5*time.Second {
		t.Fatalf("code %d after %s", code, time.Since(start))
	}
}

func TestCommandBackgroundChildDoesNotHangWait(t *testing.T) {
	b := newBackend(t)
	var out recorder
	p, err := b.StartCommand(context.Background(), execd.ProcessSpec{Command: "sleep 30 & echo started", Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() { c, _ := p.Wait(); done <- c }()
	select {
	case code := <-done:
		if code != 0 || out.String() != "started\n" {
			t.Fatalf("code %d output %q", code, out.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait hangs while a background child holds stdout")
	}
	_ = p.Kill() // the background sleep
}

func TestSameWriter(t *testing.T) {
	var a, b bytes.Buffer
	f := writerFunc(func(p []byte) (int, error) { return len(p), nil })
	cases := []struct {
		name string
		x, y interface{ Write([]byte) (int, error) }
		want bool
	}{
		{name: "same pointer", x: &a, y: &a, want: true},
		{name: "different pointers", x: &a, y: &b, want: false},
		{name: "funcs are never the same", x: f, y: f, want: false},
		{name: "different types", x: &a, y: f, want: false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := sameWriter(c.x, c.y); got != c.want {
				t.Fatalf("got %v", got)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	b := newBackend(t)
	m, err := b.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m.CPUCount <= 0 || m.MemTotalMiB <= 0 || m.MemUsedMiB <= 0 || m.MemUsedMiB > m.MemTotalMiB ||
		m.CPUUsedPct < 0 || m.CPUUsedPct > 100 || m.Timestamp <= 0 {
		t.Fatalf("implausible metrics %+v", m)
	}
	// A cgroup v2 directory is read when present.
	cg := t.TempDir()
	for name, v := range map[string]string{"memory.current": "104857600\n", "memory.max": "209715200\n", "cpu.max": "50000 100000\n", "cpu.stat": "usage_usec 1000\n"} {
		if err := os.WriteFile(filepath.Join(cg, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b2 := newBackend(t, func(o *Options) { o.CgroupDir = cg })
	m, err = b2.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m.MemUsedMiB != 100 || m.MemTotalMiB != 200 || m.CPUCount != 0.5 || m.CPUUsedPct != 0 {
		t.Fatalf("cgroup metrics %+v", m)
	}
}

func TestReaperDispatchesToOwners(t *testing.T) {
	// The reaper reaps every child of this process, so it must not run
	// while other tests start processes: run it in a child process.
	if os.Getenv("HYBOX_REAPER_CHILD") == "1" {
		reaperChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReaperDispatchesToOwners$", "-test.v")
	cmd.Env = append(os.Environ(), "HYBOX_REAPER_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func reaperChild(t *testing.T) {
	r := NewReaper(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	b := newBackend(t, func(o *Options) { o.Reaper = r })
	// Many quick commands: each must get its own status, none lost as an orphan.
	for i := range 30 {
		code, _, _ := run(t, b, execd.ProcessSpec{Command: "exit " + strconv.Itoa(i%7)})
		if code != i%7 {
			t.Fatalf("command %d: exit code %d", i, code)
		}
	}
	// Orphans are reaped; not mistaken for children.
	if _, _, err := prctlSubreaper(); err != nil {
		t.Skip("cannot become a subreaper:", err)
	}
	code, out, _ := run(t, b, execd.ProcessSpec{Command: "(sleep 0.2 &) ; echo ok"})
	if code != 0 || out != "ok\n" {
		t.Fatalf("code %d out %q", code, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.Orphans() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("orphan not reaped")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func prctlSubreaper() (uintptr, uintptr, error) {
	const prSetChildSubreaper = 36
	a, b, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	if e != 0 {
		return a, b, e
	}
	return a, b, nil
}
