package jsguest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmtest"
)

// discard is an execd.Output that drops everything.
type discard struct{}

func (discard) Stdout([]byte)            {}
func (discard) Stderr([]byte)            {}
func (discard) Result(map[string]string) {}

func BenchmarkNewInterpreter(b *testing.B) {
	m := newManager(b, Options{})
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		it, err := m.NewInterpreter(ctx, nil, "/", 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		_ = it.Close()
	}
}

// firstResult creates a context and runs `1+1` in it; it returns the
// context and how long both took.
func firstResult(ctx context.Context, m *Manager) (execd.Interpreter, time.Duration, error) {
	start := time.Now()
	it, err := m.NewInterpreter(ctx, nil, "/", 0, nil)
	if err != nil {
		return nil, 0, err
	}
	rec := &recorder{}
	ee, err := it.Run(ctx, "1+1", rec)
	d := time.Since(start)
	if err == nil && ee != nil {
		err = fmt.Errorf("1+1: %+v", *ee)
	}
	if err == nil && rec.result() != "2" {
		err = fmt.Errorf("1+1 = %q", rec.result())
	}
	if err != nil {
		_ = it.Close()
		return nil, 0, err
	}
	return it, d, nil
}

// BenchmarkNewContextFirstResult measures a new context plus its first
// `1+1`, one at a time.
func BenchmarkNewContextFirstResult(b *testing.B) {
	m := newManager(b, Options{})
	ctx := context.Background()
	ds := make([]time.Duration, 0, b.N)
	for b.Loop() {
		it, d, err := firstResult(ctx, m)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, d)
		b.StopTimer()
		_ = it.Close()
		b.StartTimer()
	}
	wasmtest.ReportPercentiles(b, ds, 50, 99)
}

// BenchmarkBurst50 creates 50 contexts at once, each running `1+1`, and
// reports the p50 and p99 of create → first result over all of them.
func BenchmarkBurst50(b *testing.B) {
	m := newManager(b, Options{})
	var ds []time.Duration
	for b.Loop() {
		ds = append(ds, burst(b, m, 50)...)
	}
	wasmtest.ReportPercentiles(b, ds, 50, 99)
}

// burst creates n contexts concurrently; each must answer `1+1` with 2.
func burst(t testing.TB, m *Manager, n int) []time.Duration {
	t.Helper()
	ctx := context.Background()
	ds := make([]time.Duration, n)
	its := make([]execd.Interpreter, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var err error
			if its[i], ds[i], err = firstResult(ctx, m); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for _, it := range its {
		if it != nil {
			_ = it.Close()
		}
	}
	for err := range errs {
		t.Fatal(err)
	}
	return ds
}

// TestBurst: 50 contexts created at once all answer.
func TestBurst(t *testing.T) { burst(t, newManager(t, Options{}), 50) }

// BenchmarkRunOnePlusOne measures `1+1` in a live context.
func BenchmarkRunOnePlusOne(b *testing.B) { benchRun(b, "", "1 + 1", 50, 99) }

// TestFootprint reports the memory of a fresh context and of 100 idle
// ones (it logs; it fails only when a context does not answer).
func TestFootprint(t *testing.T) {
	m := newManager(t, Options{})
	ctx := context.Background()
	var its []execd.Interpreter
	t.Cleanup(func() {
		for _, it := range its {
			_ = it.Close()
		}
	})
	one := func() {
		it, _, err := firstResult(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		its = append(its, it)
	}
	wasmtest.Footprint(t, one)
	t.Logf("linear memory of a context %.1f MiB", float64(its[0].(*interpreter).vm.mem.Size())/(1<<20))
}

// BenchmarkFib measures CPU-bound JavaScript: fib(25), recursive, in a live
// context (the interpreter loop and calls, what the loop guard costs).
func BenchmarkFib(b *testing.B) {
	benchRun(b, "function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2) }", "fib(25)", 50)
}

// benchRun runs setup once in a new context, then times code in it and
// reports the percentiles ps of its runs.
func benchRun(b *testing.B, setup, code string, ps ...int) {
	m := newManager(b, Options{})
	ctx := context.Background()
	it, err := m.NewInterpreter(ctx, nil, "/", 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer it.Close()
	if setup != "" {
		if ee, err := it.Run(ctx, setup, discard{}); err != nil || ee != nil {
			b.Fatal(err, ee)
		}
	}
	ds := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		if ee, err := it.Run(ctx, code, discard{}); err != nil || ee != nil {
			b.Fatal(err, ee)
		}
		ds = append(ds, time.Since(start))
	}
	wasmtest.ReportPercentiles(b, ds, ps...)
}
