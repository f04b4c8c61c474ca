package wasm

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmtest"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

type discard struct{}

func (discard) Send(ev api.Event) bool { return true }

// TestPauseDropsInstances: after Pause no context of the sandbox holds an
// interpreter instance (its memory is unmapped); the first execution
// after Resume brings one back.
func TestPauseDropsInstances(t *testing.T) {
	rt, stop, err := Setup(context.Background(), SetupOptions{Engine: wasmtest.Engine(t), ImageDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	sbi, err := rt.Create(context.Background(), runtimes.Spec{ID: "p", Image: "wasm://default", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sb := sbi.(*Sandbox)
	defer sb.Close(context.Background())
	for _, lang := range []api.Language{"python", "javascript"} {
		code := "x = 1"
		if lang == "javascript" {
			code = "var x = 1;"
		}
		if err := sb.RunCode(context.Background(), api.CodeRunRequest{Code: &code, Language: lang}, discard{}); err != nil {
			t.Fatal(err)
		}
	}
	live := func() int {
		n := 0
		for _, w := range sb.wrappers() {
			w.mu.Lock()
			if w.inner != nil {
				n++
			}
			w.mu.Unlock()
		}
		return n
	}
	if n := live(); n != 2 {
		t.Fatalf("%d live instances before pause, want 2", n)
	}
	if err := sb.Pause(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := live(); n != 0 {
		t.Fatalf("%d live instances after pause, want 0", n)
	}
	if err := sb.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	code := "x"
	if err := sb.RunCode(context.Background(), api.CodeRunRequest{Code: &code, Language: "python"}, discard{}); err != nil {
		t.Fatal(err)
	}
	if n := live(); n != 1 {
		t.Fatalf("%d live instances after one execution, want 1", n)
	}
}

// TestPauseDuringExecution: Pause does not wait for a running execution;
// the context writes itself out when the execution ends, and has its
// result after Resume.
func TestPauseDuringExecution(t *testing.T) {
	rt, stop, err := Setup(context.Background(), SetupOptions{Engine: wasmtest.Engine(t), ImageDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	dir := t.TempDir()
	sbi, err := rt.Create(context.Background(), runtimes.Spec{ID: "p", Image: "wasm://default", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sb := sbi.(*Sandbox)
	defer sb.Close(context.Background())
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		code := "import os, time\nprint('started', flush=True)\nwhile not os.path.exists('/workspace/go'):\n    time.sleep(0.01)\ny = 2"
		done <- sb.RunCode(context.Background(), api.CodeRunRequest{Code: &code}, sinkFunc(func(ev api.Event) {
			if ev.Type == api.EventTypeStdout {
				once.Do(func() { close(started) })
			}
		}))
	}()
	<-started
	if err := sb.Pause(context.Background()); err != nil { // returns while the cell runs
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fs", "workspace", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, w := range sb.wrappers() {
		w.mu.Lock()
		live := w.inner != nil
		w.mu.Unlock()
		if live {
			t.Fatal("the context kept its instance after its execution ended in a paused sandbox")
		}
	}
	if err := sb.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got string
	code := "y"
	if err := sb.RunCode(context.Background(), api.CodeRunRequest{Code: &code}, sinkFunc(func(ev api.Event) {
		if ev.Type == api.EventTypeResult {
			got = ev.Results["text"]
		}
	})); err != nil {
		t.Fatal(err)
	}
	if got != "2" {
		t.Fatalf("y = %q after resume, want 2", got)
	}
}

type sinkFunc func(api.Event)

func (f sinkFunc) Send(ev api.Event) bool { f(ev); return true }
