package wasm

import (
	"context"
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
