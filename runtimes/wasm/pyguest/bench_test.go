package pyguest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmtest"
)

// BenchmarkNewContextFirstResult measures a new context of the source
// build taken from the ready clones (refilled, untimed, between
// iterations) plus its first `1+1`.
func BenchmarkNewContextFirstResult(b *testing.B) { benchNewContext(b, Options{}) }

// BenchmarkNewContextFirstResultCold is the same without ready clones: an
// instance cloned from the memory image for each context.
func BenchmarkNewContextFirstResultCold(b *testing.B) { benchNewContext(b, Options{ReadyClones: -1}) }

func benchNewContext(b *testing.B, opts Options) {
	m := newManager(b, opts)
	root, _ := newRoot(b)
	ctx := context.Background()
	ds := make([]time.Duration, 0, b.N)
	for b.Loop() {
		b.StopTimer()
		if err := m.waitFull(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		it, err := m.NewInterpreter(ctx, root, "/", 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		rec := newRecorder()
		if _, err := it.Run(ctx, "1+1", rec); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if plain(b, rec) != "2" {
			b.Fatalf("result %q", plain(b, rec))
		}
		_ = it.Close()
		b.StartTimer()
	}
	wasmtest.ReportPercentiles(b, ds, 50, 90)
}

// BenchmarkClaimAndFirstResultNPM measures a new context of the npm build
// from a warm pool plus its first `1+1`. Refill time is excluded. Run with
// -benchtime=Nx: each iteration waits for a guest to start (100-300 ms)
// untimed.
func BenchmarkClaimAndFirstResultNPM(b *testing.B) {
	m := newNPMManager(b, Options{PoolSize: 2})
	root, _ := newRoot(b)
	ctx := context.Background()
	var ds []time.Duration
	b.StopTimer()
	for range b.N {
		if err := m.waitFull(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		it, err := m.NewInterpreter(ctx, root, "/", 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		rec := newRecorder()
		if _, err := it.Run(ctx, "1+1", rec); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if plain(b, rec) != "2" {
			b.Fatalf("result %q", plain(b, rec))
		}
		_ = it.Close()
	}
	wasmtest.ReportPercentiles(b, ds, 50, 90)
}

// BenchmarkWarmRun measures `1+1` in a live context of the source build.
func BenchmarkWarmRun(b *testing.B) { benchWarm(b, newManager(b, Options{}), "1+1") }

// BenchmarkWarmRunNPM measures `1+1` in a live context of the npm build.
func BenchmarkWarmRunNPM(b *testing.B) { benchWarm(b, newNPMManager(b, Options{PoolSize: 1}), "1+1") }

// fib27 defines and calls a recursive Fibonacci: interpreter speed.
const fib27 = "def fib(n):\n    return n if n < 2 else fib(n-1) + fib(n-2)\nfib(27)"

// BenchmarkFib27 measures fib(27) in the source build; BenchmarkFib27NPM in
// the npm build; BenchmarkFib27Native in the host's python3, for the ratio.
func BenchmarkFib27(b *testing.B)    { benchWarm(b, newManager(b, Options{}), fib27) }
func BenchmarkFib27NPM(b *testing.B) { benchWarm(b, newNPMManager(b, Options{PoolSize: 1}), fib27) }

func BenchmarkFib27Native(b *testing.B) {
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("no python3 on the host")
	}
	script := "import time\n" + strings.Replace(fib27, "fib(27)", "t=time.perf_counter()\nfib(27)\nprint(time.perf_counter()-t)", 1)
	ds := make([]time.Duration, 0, b.N)
	for b.Loop() {
		out, err := exec.Command(py, "-c", script).Output()
		if err != nil {
			b.Fatal(err)
		}
		sec, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Duration(sec*float64(time.Second)))
	}
	wasmtest.ReportPercentiles(b, ds, 50, 90)
}

func benchWarm(b *testing.B, m *Manager, code string) {
	root, _ := newRoot(b)
	it := newInterp(b, m, root, "/", 0)
	ctx := context.Background()
	run(b, it, "0")
	ds := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		if _, err := it.Run(ctx, code, newRecorder()); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	wasmtest.ReportPercentiles(b, ds, 50, 90)
}

// BenchmarkInterrupt measures how long `while True: pass` takes to stop
// after its context is cancelled, in the source build (the context lives on).
func BenchmarkInterrupt(b *testing.B) {
	m := newManager(b, Options{})
	root, _ := newRoot(b)
	it := newInterp(b, m, root, "/", 0)
	run(b, it, "x = 41")
	ds := make([]time.Duration, 0, b.N)
	for b.Loop() {
		ctx, cancel := context.WithCancelCause(context.Background())
		rec := newRecorder()
		errc := make(chan error, 1)
		go func() {
			_, err := it.Run(ctx, "print('go', flush=True)\nwhile True: pass", rec)
			errc <- err
		}()
		<-rec.firstOut
		start := time.Now()
		cancel(execd.ErrInterrupted)
		err := <-errc
		ds = append(ds, time.Since(start))
		if !errors.Is(err, execd.ErrInterrupted) || errors.Is(err, execd.ErrContextLost) {
			b.Fatalf("err = %v, want an interrupt that keeps the context", err)
		}
	}
	b.StopTimer()
	if got := plain(b, mustRun(b, it, "x + 1")); got != "42" {
		b.Fatalf("x + 1 = %q after interrupts", got)
	}
	wasmtest.ReportPercentiles(b, ds, 50, 90)
}

func mustRun(t testing.TB, it execd.Interpreter, code string) *recorder {
	t.Helper()
	rec, xerr := run(t, it, code)
	if xerr != nil {
		t.Fatalf("%s: %v", code, xerr)
	}
	return rec
}

// TestFootprint reports the memory of fresh and of idle contexts of the
// source build (it logs; it fails only when a context does not answer).
func TestFootprint(t *testing.T) {
	m := newManager(t, Options{})
	root, _ := newRoot(t)
	its := make([]execd.Interpreter, 0, 101)
	one := func() {
		it := newInterp(t, m, root, "/", 0)
		if got := plain(t, mustRun(t, it, "1+1")); got != "2" {
			t.Fatalf("1+1 = %q", got)
		}
		its = append(its, it)
	}
	wasmtest.Footprint(t, one)
	lin := its[0].(*reactorInterp).LinearMemoryBytes()
	t.Logf("linear memory of a context %.1f MiB (shared with the image until written)", float64(lin)/(1<<20))
}

// BenchmarkGuestStart measures starting one pooled guest (the interpreter,
// its start-up hook and driver.py) until its ready frame: the refill cost,
// which the start-up hook must not grow.
func BenchmarkGuestStart(b *testing.B) {
	m := newNPMManager(b, Options{PoolSize: -1})
	ctx := context.Background()
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		inst, err := m.start(ctx)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		inst.kill(ErrClosed)
		b.StartTimer()
	}
	wasmtest.ReportPercentiles(b, ds, 50, 90)
}

// BenchmarkCommandStart measures `python3 -c pass` as a shell command.
func BenchmarkCommandStart(b *testing.B) {
	m := newManager(b, Options{PoolSize: -1})
	root, _ := newRoot(b)
	ctx := context.Background()
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		code, err := m.RunCommand(ctx, engine.Command{Args: []string{"python3", "-c", "pass"}, Root: root, Cwd: "/", Stdout: io.Discard, Stderr: io.Discard})
		if err != nil || code != 0 {
			b.Fatal(code, err)
		}
		ds = append(ds, time.Since(start))
	}
	wasmtest.ReportPercentiles(b, ds, 50, 90)
}

// BenchmarkBurst50 creates 50 contexts at once, each running `1+1`, and
// reports the p50 and p99 of create → first result over all of them.
func BenchmarkBurst50(b *testing.B) { benchBurst(b, Options{ReadyClones: 50}) }

// BenchmarkBurst50Default is the burst with the server's default number of
// ready clones (DefaultReadyClones, fewer than 50).
func BenchmarkBurst50Default(b *testing.B) { benchBurst(b, Options{ReadyClones: DefaultReadyClones}) }

// BenchmarkBurst50Cold is the burst without ready clones.
func BenchmarkBurst50Cold(b *testing.B) { benchBurst(b, Options{ReadyClones: -1}) }

func benchBurst(b *testing.B, opts Options) {
	m := newManager(b, opts)
	root, _ := newRoot(b)
	var ds []time.Duration
	for b.Loop() {
		b.StopTimer()
		if err := m.waitFull(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		ds = append(ds, burst(b, m, root, 50)...)
	}
	wasmtest.ReportPercentiles(b, ds, 50, 99)
}

// burst creates n contexts concurrently; each must answer `1+1` with 2.
// Each duration runs from the burst's start, as a client that sent its
// request with the others sees it (waiting for a core included).
func burst(t testing.TB, m *Manager, root *os.Root, n int) []time.Duration {
	t.Helper()
	ctx := context.Background()
	ds := make([]time.Duration, n)
	errs := make(chan error, n)
	its := make([]execd.Interpreter, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			it, err := m.NewInterpreter(ctx, root, "/", 0, nil)
			if err != nil {
				errs <- err
				return
			}
			its[i] = it
			rec := newRecorder()
			if _, err := it.Run(ctx, "1+1", rec); err != nil {
				errs <- err
				return
			}
			ds[i] = time.Since(start)
			if _, _, res := rec.out(); len(res) != 1 || res[0]["text/plain"] != "2" {
				errs <- fmt.Errorf("context %d answered %v", i, res)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, it := range its {
		_ = it.Close()
	}
	return ds
}

// TestBurst: 50 contexts created at once all answer.
func TestBurst(t *testing.T) {
	m := newManager(t, Options{})
	root, _ := newRoot(t)
	burst(t, m, root, 50)
}
