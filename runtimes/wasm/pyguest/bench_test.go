package pyguest

import (
	"bufio"
	"context"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// reportPercentiles adds p50 and p90 of ds (in ms) to the benchmark output.
func reportPercentiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(ds[len(ds)/2]), "p50-ms")
	b.ReportMetric(ms(ds[len(ds)*9/10]), "p90-ms")
}

// BenchmarkClaimAndFirstResult measures a new context from a warm pool plus
// its first `1+1`. Refill time is excluded. Run with -benchtime=Nx: each
// iteration waits for a guest to start (100-300 ms) untimed.
func BenchmarkClaimAndFirstResult(b *testing.B) {
	m := newManager(b, Options{PoolSize: 2})
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
	reportPercentiles(b, ds)
}

// BenchmarkWarmRun measures `1+1` in a live context.
func BenchmarkWarmRun(b *testing.B) {
	m := newManager(b, Options{PoolSize: 1})
	root, _ := newRoot(b)
	it := newInterp(b, m, root, "/", 0)
	ctx := context.Background()
	run(b, it, "0")
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := it.Run(ctx, "1+1", newRecorder()); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, ds)
}

// rssBytes returns this process's resident set size, or 0 when unknown.
func rssBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestFootprint reports the memory of live contexts (it logs; it only fails
// when the guest's memory cannot be read at all).
func TestFootprint(t *testing.T) {
	m := newManager(t, Options{PoolSize: -1})
	root, _ := newRoot(t)
	const n = 4
	before := rssBytes()
	var its []*interpreter
	for range n {
		it := newInterp(t, m, root, "/", 0).(*interpreter)
		run(t, it, "import json, re, collections\nx = 1")
		its = append(its, it)
	}
	after := rssBytes()
	lin := its[0].inst.linearMemoryBytes()
	if lin == 0 {
		t.Fatal("linear memory size unknown")
	}
	t.Logf("one live context: linear memory %.1f MiB; process RSS grew %.1f MiB for %d contexts (%.1f MiB each)",
		float64(lin)/(1<<20), float64(after-before)/(1<<20), n, float64(after-before)/(1<<20)/n)
}

// BenchmarkGuestStart measures starting one pooled guest (the interpreter,
// its start-up hook and driver.py) until its ready frame: the refill cost,
// which the start-up hook must not grow.
func BenchmarkGuestStart(b *testing.B) {
	m := newManager(b, Options{PoolSize: -1})
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
	reportPercentiles(b, ds)
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
	reportPercentiles(b, ds)
}
