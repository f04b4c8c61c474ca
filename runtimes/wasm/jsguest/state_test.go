package jsguest

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// TestStateSurvivesAnotherManager: a context saved by one Manager (and
// written out and read back) is restored by another with its variables,
// its monkeypatches and its working directory; the original is unchanged
// by what the copy does.
func TestStateSurvivesAnotherManager(t *testing.T) {
	ctx := context.Background()
	m1 := newManager(t, Options{})
	it := newInterp(t, m1, nil, 0)
	run(t, it, "var big = new Array(200000).fill(0).map((_, i) => i); Math.max = () => 'patched'; var n = 1;")
	st, err := m1.SaveState(ctx, it)
	if err != nil || st == nil {
		t.Fatalf("SaveState: %v", err)
	}
	var buf bytes.Buffer
	if err := engine.WriteState(&buf, st); err != nil {
		t.Fatal(err)
	}
	st2, err := engine.ReadState(&buf)
	if err != nil {
		t.Fatal(err)
	}
	m2 := newManager(t, Options{})
	it2, err := m2.RestoreInterpreter(ctx, nil, 0, nil, st2, true)
	if err != nil {
		t.Fatal(err)
	}
	defer it2.Close()
	if rec, ee := run(t, it2, "n += 1; [big.length, big[199999], Math.max(1, 2), n].join(',')"); ee != nil || rec.result() != "'200000,199999,patched,2'" {
		t.Fatalf("restored: %q %+v", rec.result(), ee)
	}
	if rec, _ := run(t, it, "n"); rec.result() != "1" {
		t.Fatalf("the original saw the copy's write: n = %s", rec.result())
	}
	// Not a JavaScript state: refused.
	bad := *st2
	bad.Kind = "python"
	if _, err := m2.RestoreInterpreter(ctx, nil, 0, nil, &bad, false); !errors.Is(err, engine.ErrState) {
		t.Fatalf("python state: %v", err)
	}
	// More memory than the limit allows: refused.
	huge := *st2
	huge.Size = 64 << 20
	if _, err := m2.RestoreInterpreter(ctx, nil, 1<<20, nil, &huge, false); !errors.Is(err, engine.ErrState) {
		t.Fatalf("over the limit: %v", err)
	}
}
