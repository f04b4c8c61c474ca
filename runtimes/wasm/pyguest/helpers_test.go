package pyguest

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmtest"
)

// recorder is an execd.Output that keeps everything, safe to read from the
// test goroutine while the guest writes.
type recorder struct {
	mu        sync.Mutex
	stdout    bytes.Buffer
	stderr    bytes.Buffer
	results   []map[string]string
	firstOut  chan struct{}
	firstOnce sync.Once
}

func newRecorder() *recorder { return &recorder{firstOut: make(chan struct{})} }

func (r *recorder) Stdout(p []byte) {
	r.mu.Lock()
	r.stdout.Write(p)
	r.mu.Unlock()
	r.firstOnce.Do(func() { close(r.firstOut) })
}

func (r *recorder) Stderr(p []byte) {
	r.mu.Lock()
	r.stderr.Write(p)
	r.mu.Unlock()
}

func (r *recorder) Result(b map[string]string) {
	r.mu.Lock()
	r.results = append(r.results, b)
	r.mu.Unlock()
}

func (r *recorder) out() (stdout, stderr string, results []map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stdout.String(), r.stderr.String(), append([]map[string]string(nil), r.results...)
}

// newManager returns a Manager of the source build on the shared test
// engine, closed at cleanup.
func newManager(t testing.TB, opts Options) *Manager {
	t.Helper()
	b := wasmtest.PythonBuild(t)
	opts.Build = &b
	return startManager(t, opts)
}

// newNPMManager returns a Manager of the npm build (the fallback).
func newNPMManager(t testing.TB, opts Options) *Manager {
	t.Helper()
	opts.Build = nil
	return startManager(t, opts)
}

func startManager(t testing.TB, opts Options) *Manager {
	t.Helper()
	opts.Engine = wasmtest.Engine(t)
	if opts.ReadyClones == 0 {
		opts.ReadyClones = 2 // a few, so that tests use them; not the server's 32
	}
	m, err := NewManager(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// newRoot returns an os.Root over a fresh temporary directory.
func newRoot(t testing.TB) (*os.Root, string) {
	t.Helper()
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	return root, dir
}

// newInterp returns an interpreter working in "/", closed at cleanup.
func newInterp(t testing.TB, m *Manager, root *os.Root, cwd string, memLimit int64) execd.Interpreter {
	t.Helper()
	it, err := m.NewInterpreter(context.Background(), root, cwd, memLimit, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = it.Close() })
	return it
}

// run runs code with a generous deadline and fails the test on a Go error.
func run(t testing.TB, it execd.Interpreter, code string) (*recorder, *execd.ExecError) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rec := newRecorder()
	xerr, err := it.Run(ctx, code, rec)
	if err != nil {
		t.Fatalf("Run(%q): %v", code, err)
	}
	return rec, xerr
}

// plain returns the text/plain of the only result, or "" when there is none.
func plain(t testing.TB, rec *recorder) string {
	t.Helper()
	_, _, res := rec.out()
	switch len(res) {
	case 0:
		return ""
	case 1:
		return res[0]["text/plain"]
	}
	t.Fatalf("%d results, want at most 1: %v", len(res), res)
	return ""
}
