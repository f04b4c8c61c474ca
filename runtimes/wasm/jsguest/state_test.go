package jsguest

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

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

// TestStateBase: a state is a diff against the image, which every Manager
// boots the same, and is much smaller than the memory; a state without a
// base (saved before contexts were clones: the whole memory against zeros)
// is restored too; one against another image is refused.
func TestStateBase(t *testing.T) {
	ctx := context.Background()
	m1, m2 := newManager(t, Options{}), newManager(t, Options{})
	if m1.img.id != m2.img.id {
		t.Fatalf("two Managers booted different images: %s, %s", m1.img.id, m2.img.id)
	}
	it := newInterp(t, m1, nil, 0)
	run(t, it, "var n = 41")
	st, err := m1.SaveState(ctx, it)
	if err != nil {
		t.Fatal(err)
	}
	if st.Base != m1.img.id || st.DirtyBytes() > st.Size/4 {
		t.Fatalf("state: base %q (image %q), %d of %d bytes", st.Base, m1.img.id, st.DirtyBytes(), st.Size)
	}
	mem, _ := it.(*interpreter).vm.mem.Read(0, uint32(st.Size))
	old := *st
	old.Base, old.Pages = "", engine.Diff(mem, nil)
	t.Logf("state of a context after one run: %d KiB against the image %.8s, %d KiB against zeros, of a %d KiB memory",
		st.DirtyBytes()>>10, st.Base, old.DirtyBytes()>>10, st.Size>>10)
	it2, err := m2.RestoreInterpreter(ctx, nil, 0, nil, &old, true)
	if err != nil {
		t.Fatal(err)
	}
	defer it2.Close()
	if rec, ee := run(t, it2, "n + 1"); ee != nil || rec.result() != "42" {
		t.Fatalf("restored from zeros: %q %+v", rec.result(), ee)
	}
	// Saved again, it is still a state without a base.
	if st2, err := m2.SaveState(ctx, it2); err != nil || st2.Base != "" {
		t.Fatalf("saved again: %v, base %q", err, st2.Base)
	}

	other := *st
	other.Base = "0123456789abcdef"
	if _, err := m2.RestoreInterpreter(ctx, nil, 0, nil, &other, false); !errors.Is(err, engine.ErrState) {
		t.Fatalf("another image: %v", err)
	}
}

// TestSaveAfterManagerClose: a context of a closed Manager is not saved
// (its image is gone) and a new one is refused.
func TestSaveAfterManagerClose(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 0)
	run(t, it, "var n = 1")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SaveState(context.Background(), it); !errors.Is(err, ErrClosed) {
		t.Fatalf("SaveState after Close: %v", err)
	}
	if _, err := m.newVM(context.Background(), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("newVM after Close: %v", err)
	}
}

// TestClonesClocks: the image is booted on fake clocks, its clones run on
// real ones: Date.now() is now, performance.now() counts from the
// Manager's start.
func TestClonesClocks(t *testing.T) {
	m := newManager(t, Options{})
	it := newInterp(t, m, nil, 0)
	rec, ee := run(t, it, "[Math.abs(Date.now() - "+strconv.FormatInt(time.Now().UnixMilli(), 10)+") < 60000, performance.now() >= 0, performance.now() <= "+
		strconv.FormatInt(time.Since(m.started).Milliseconds()+60000, 10)+"].join()")
	if ee != nil || rec.result() != "'true,true,true'" {
		t.Fatalf("clocks: %q %+v", rec.result(), ee)
	}
}

// TestCloseWhileCreating: contexts created and saved while the Manager
// closes either work or fail with ErrClosed; none maps or reads a closed
// image.
func TestCloseWhileCreating(t *testing.T) {
	m := newManager(t, Options{})
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				it, err := m.NewInterpreter(ctx, nil, "/", 0, nil)
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := m.SaveState(ctx, it); err != nil && !errors.Is(err, ErrClosed) {
					t.Error(err)
				}
				_ = it.Close()
			}
		})
	}
	time.Sleep(2 * time.Millisecond)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}
