package oci_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

// These benchmarks drive the real backend on the test containerd. Each
// reports p50/p99 latencies (ms) or a total as extra metrics, like
// server/bench_test.go.

type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	q := func(p float64) float64 {
		i := int(p * float64(len(l)-1))
		return float64(l[i].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// BenchmarkCreateReady measures Create until hybox-execd answers /ping
// over its socket (Create returns only then); Destroy is not timed.
func BenchmarkCreateReady(b *testing.B) {
	be := newBackend(b)
	for _, name := range []string{"runc", "runsc"} {
		b.Run(name, func(b *testing.B) {
			rt := runtimeNamed(b, be, name)
			ctx := context.Background()
			var lat latencies
			for i := 0; i < b.N; i++ {
				spec := testSpec(b, "bench-create-"+name)
				start := time.Now()
				sb, err := rt.Create(ctx, spec)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				b.StopTimer()
				_ = sb.Close(ctx)
				if err := rt.Destroy(ctx, spec); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			lat.report(b)
		})
	}
}

// BenchmarkCommandRoundTrip measures POST /command {"command":"echo hi"}
// through Sandbox.Execd (loopback HTTP, then the execd unix socket) until
// the stream's last event.
// BenchmarkCommandRoundTrip measures `echo hi` through execd, back to back
// and (the "paced" rows) with 100 ms between commands, as an agent that
// reads each result before the next command sends them: hybox-execd's warm
// shell (started once no command has started for 20 ms) then takes each.
func BenchmarkCommandRoundTrip(b *testing.B) {
	be := newBackend(b)
	for _, name := range []string{"runc", "runsc"} {
		for _, pace := range []time.Duration{0, 100 * time.Millisecond} {
			label := name
			if pace > 0 {
				label += "-paced"
			}
			b.Run(label, func(b *testing.B) {
				c := newExecClient(b, mustCreate(b, runtimeNamed(b, be, name), testSpec(b, "bench-rt-"+name)))
				c.run("echo warm")
				var lat latencies
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if pace > 0 {
						b.StopTimer()
						time.Sleep(pace)
						b.StartTimer()
					}
					start := time.Now()
					if o := c.run("echo hi"); o.Stdout != "hi" || !o.Complete {
						b.Fatalf("%+v", o)
					}
					lat = append(lat, time.Since(start))
				}
				lat.report(b)
			})
		}
	}
}

// BenchmarkConcurrentCreate20 creates 20 runc sandboxes at once and
// reports the time until all of them are ready.
func BenchmarkConcurrentCreate20(b *testing.B) {
	be := newBackend(b)
	rt := runtimeNamed(b, be, "runc")
	ctx := context.Background()
	const n = 20
	var total latencies
	for i := 0; i < b.N; i++ {
		specs := make([]runtimes.Spec, n)
		for j := range specs {
			specs[j] = testSpec(b, "bench-conc")
		}
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := time.Now()
		for j := range specs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := rt.Create(ctx, specs[j])
				if err == nil {
					_ = sb.Close(ctx)
				}
				errs[j] = err
			}()
		}
		wg.Wait()
		total = append(total, time.Since(start))
		b.StopTimer()
		for j, spec := range specs {
			if errs[j] != nil {
				b.Errorf("create %d: %v", j, errs[j])
			}
			if err := rt.Destroy(ctx, spec); err != nil {
				b.Error(err)
			}
		}
		b.StartTimer()
	}
	sort.Slice(total, func(i, j int) bool { return total[i] < total[j] })
	b.ReportMetric(float64(total[len(total)/2].Microseconds())/1000, "total-ms")
}

// BenchmarkIdleMemory reports what an idle runc sandbox costs: its
// cgroup's memory usage (execd, the entrypoint, page cache charged to it)
// plus the resident memory of its containerd shim.
func BenchmarkIdleMemory(b *testing.B) {
	be := newBackend(b)
	rt := runtimeNamed(b, be, "runc")
	var cg, shim float64
	for i := 0; i < b.N; i++ {
		spec := testSpec(b, "bench-mem")
		mustCreate(b, rt, spec)
		time.Sleep(500 * time.Millisecond) // settle
		usage, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", ocitest.Namespace, spec.ID, "memory.usage_in_bytes"))
		if err != nil {
			b.Fatal(err)
		}
		u, _ := strconv.ParseFloat(strings.TrimSpace(string(usage)), 64)
		cg += u
		shim += shimRSS(b, spec.ID)
	}
	const mib = 1 << 20
	b.ReportMetric(cg/float64(b.N)/mib, "cgroup-MiB")
	b.ReportMetric(shim/float64(b.N)/mib, "shim-MiB")
	b.ReportMetric((cg+shim)/float64(b.N)/mib, "MiB/sandbox")
}

// shimRSS is the resident memory of the shim serving container id.
func shimRSS(b *testing.B, id string) float64 {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), "containerd-shim") || !strings.Contains(string(cmd), "\x00"+id+"\x00") {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				return kb * 1024
			}
		}
	}
	b.Logf("no shim found for %s", id)
	return 0
}
