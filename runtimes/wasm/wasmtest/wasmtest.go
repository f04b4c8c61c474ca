// Package wasmtest locates test fixtures shared across packages: the pinned
// guest interpreters fetched by `make guests`, and a per-test wasm engine.
package wasmtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// RepoRoot returns the directory holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// GuestDir returns the directory with python.wasm and quickjs.wasm
// ($HYBOX_GUEST_DIR or build/guests). The test fails, never skips, when the
// guests are missing: `make test` always fetches them first.
func GuestDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("HYBOX_GUEST_DIR")
	if dir == "" {
		dir = filepath.Join(RepoRoot(t), "build", "guests")
	}
	for _, g := range []engine.Guest{engine.Python, engine.QuickJS} {
		if _, err := os.Stat(filepath.Join(dir, g.Name)); err != nil {
			t.Fatalf("guest %s missing in %s: run `make guests` first", g.Name, dir)
		}
	}
	return dir
}

var (
	engOnce sync.Once
	eng     *engine.Engine
	engErr  error
)

// Engine returns a process-wide engine with the guests and a compilation
// cache under build/wazero-cache, shared by all tests of a package.
func Engine(t testing.TB) *engine.Engine {
	t.Helper()
	gd := GuestDir(t)
	engOnce.Do(func() {
		eng, engErr = engine.New(context.Background(), engine.Options{
			GuestDir: gd,
			CacheDir: filepath.Join(RepoRoot(t), "build", "wazero-cache"),
		})
	})
	if engErr != nil {
		t.Fatal(engErr)
	}
	return eng
}

// PythonBuild returns the manifest of the source-built CPython in the guest
// directory. The test fails, never skips, when it is missing: `make guests`
// builds it.
func PythonBuild(t testing.TB) engine.PythonBuild {
	t.Helper()
	b, err := engine.LoadPythonBuild(GuestDir(t))
	if err != nil {
		t.Fatalf("%v: run `make guests` first", err)
	}
	return b
}

// MemStats returns this process's resident and proportional set sizes in
// bytes (from /proc/self/smaps_rollup; RSS from /proc/self/status and a
// zero PSS where that is missing; zeros elsewhere).
func MemStats() (rss, pss int64) {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return rssBytes(), 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Rss:":
			rss = kb << 10
		case "Pss:":
			pss = kb << 10
		}
	}
	return rss, pss
}

// rssBytes returns this process's resident set size, or 0 when unknown.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// ReportPercentiles adds the given percentiles of ds (in ms, named
// "p50-ms" and so on) to the benchmark's output. It sorts ds.
func ReportPercentiles(b *testing.B, ds []time.Duration, percentiles ...int) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	for _, p := range percentiles {
		b.ReportMetric(float64(ds[len(ds)*p/100])/float64(time.Millisecond), fmt.Sprintf("p%d-ms", p))
	}
}

// Footprint logs what contexts cost in resident memory (MemStats): one
// fresh context, then 100 idle ones. start makes one context and runs its
// first execution; the contexts stay open (the caller closes them). The Go
// heap's free pages are returned to the system before each reading.
func Footprint(t testing.TB, start func()) {
	t.Helper()
	start() // warm the host's caches
	debug.FreeOSMemory()
	rss0, pss0 := MemStats()
	start()
	rss1, pss1 := MemStats()
	for range 99 {
		start()
	}
	debug.FreeOSMemory()
	rss2, pss2 := MemStats()
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	t.Logf("a fresh context after its first execution: RSS +%.2f MiB, PSS +%.2f MiB", mib(rss1-rss0), mib(pss1-pss0))
	t.Logf("100 idle contexts: RSS +%.1f MiB, PSS +%.1f MiB (%.2f / %.2f MiB each)",
		mib(rss2-rss0), mib(pss2-pss0), mib(rss2-rss0)/100, mib(pss2-pss0)/100)
}
