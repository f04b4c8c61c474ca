package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkCreateFirstCommand: a sandbox Pod from create to the result of
// its first command (`echo`), image present on the node; each iteration is
// one sandbox, destroyed after the clock stops. Reports p50 and p90.
// runc+egress, gvisor+egress: with an egress controller (a deny-all
// policy), so the Pod has hybox-egress's init container and sidecar
// (under gVisor programming the netstack's iptables).
//
//	go test -trimpath ./runtimes/k8s -run '^$' -bench CreateFirstCommand -benchtime 10x
func BenchmarkCreateFirstCommand(b *testing.B) {
	c, env, image := clusterB(b)
	m, err := egress.NewManager(egress.Options{DNSUpstreams: []string{nodeAddr + ":53"}})
	if err != nil {
		b.Fatal(err)
	}
	for _, rc := range []struct {
		name, class string
		egress      bool
	}{{"runc", "runc", false}, {"runc", "runc", true}, {"runsc", "gvisor", false}, {"runsc", "gvisor", true}} {
		label := rc.class
		if rc.egress {
			label += "+egress"
		}
		b.Run(label, func(b *testing.B) {
			if !slices.Contains(env.Classes, rc.class) {
				b.Skipf("no RuntimeClass %s", rc.class)
			}
			rt := c.Runtime(rc.name, rc.class)
			ctx := context.Background()
			var created, first []time.Duration
			for i := 0; b.Loop(); i++ {
				spec := runtimes.Spec{ID: "bench-" + suffix(), Image: image, Entrypoint: []string{"sleep", "infinity"}}
				var ctl *egress.Controller
				if rc.egress {
					if ctl, err = m.New(spec.ID, egress.Config{Policy: &policy.Policy{DefaultAction: policy.Deny, Egress: []policy.Rule{}}}); err != nil {
						b.Fatal(err)
					}
					spec.Egress = ctl
				}
				begin := time.Now()
				sb, err := rt.Create(ctx, spec)
				if err != nil {
					b.Fatal(err)
				}
				created = append(created, time.Since(begin))
				code, out := execdCommand(sb, "echo hi")
				first = append(first, time.Since(begin))
				if code != 200 || !strings.Contains(out, "hi") {
					b.Fatalf("command: %d %s", code, out)
				}
				b.StopTimer()
				_ = sb.Close(ctx)
				if err := rt.Destroy(ctx, spec); err != nil {
					b.Fatal(err)
				}
				if ctl != nil {
					ctl.Close()
				}
				b.StartTimer()
			}
			b.ReportMetric(pct(created, 50), "create-p50-ms")
			b.ReportMetric(pct(first, 50), "first-result-p50-ms")
			b.ReportMetric(pct(first, 90), "first-result-p90-ms")
			b.ReportMetric(pct(first, 99), "first-result-p99-ms")
		})
	}
}

func pct(d []time.Duration, p int) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return float64(s[i].Microseconds()) / 1000
}

// BenchmarkPoolClaimFirstCommand: a warm pool member (started with the
// clock stopped) from its claim (env and entrypoint) to the result of its
// first command; each iteration is one member, destroyed after the clock
// stops; runc-resize claims with other limits than the member's;
// runc+vault binds a deny-all policy and a credential vault at the claim
// (the member's agent opens its credential proxy, execd writes the trust
// store). Reports claim p50 and first-result p50, p90 and p99.
//
//	go test -trimpath ./runtimes/k8s -run '^$' -bench PoolClaimFirstCommand -benchtime 10x
func BenchmarkPoolClaimFirstCommand(b *testing.B) {
	c, env, image := clusterB(b)
	m, err := egress.NewManager(egress.Options{DNSUpstreams: []string{nodeAddr + ":53"}})
	if err != nil {
		b.Fatal(err)
	}
	for _, rc := range []struct {
		name, class, sub string
		resize, vault    bool
	}{{"runc", "runc", "runc", false, false}, {"runsc", "gvisor", "gvisor", false, false},
		{"runc", "runc", "runc-resize", true, false}, {"runc", "runc", "runc+vault", false, true}} {
		b.Run(rc.sub, func(b *testing.B) {
			if !slices.Contains(env.Classes, rc.class) {
				b.Skipf("no RuntimeClass %s", rc.class)
			}
			rt := c.Runtime(rc.name, rc.class)
			ctx := context.Background()
			var claimed, first []time.Duration
			b.StopTimer()
			for range b.N {
				spec := runtimes.Spec{ID: "benchpool-" + suffix(), Image: image, MemoryBytes: 256 << 20}
				var ctl, warm *egress.Controller
				if rc.vault {
					// Warmed as the server warms one: an agent enforcing nothing.
					if warm, err = m.New(spec.ID, egress.Config{}); err != nil {
						b.Fatal(err)
					}
					spec.Egress = warm
				}
				member, err := rt.Warm(ctx, spec)
				if warm != nil {
					warm.Close()
				}
				if err != nil {
					b.Fatal(err)
				}
				if rc.resize {
					spec.MemoryBytes = 300 << 20 // pods/resize, and the kubelet applies it
				}
				if rc.vault {
					ca, err := tproxy.NewCA("bench " + spec.ID)
					if err != nil {
						b.Fatal(err)
					}
					if ctl, err = m.New(spec.ID, egress.Config{Policy: &policy.Policy{DefaultAction: policy.Deny, Egress: []policy.Rule{}},
						Vault: vault.New(), CA: ca}); err != nil {
						b.Fatal(err)
					}
					spec.Egress = ctl
				}
				spec.Env = map[string]string{"GREETING": "hi"}
				spec.Entrypoint = []string{"sleep", "infinity"}
				b.StartTimer()
				begin := time.Now()
				if err := rt.Claim(ctx, member, spec); err != nil {
					b.Fatal(err)
				}
				claimed = append(claimed, time.Since(begin))
				out := firstCommand(b, member)
				first = append(first, time.Since(begin))
				b.StopTimer()
				if !strings.Contains(out, "hi") {
					b.Fatalf("command: %s", out)
				}
				_ = member.Close(ctx)
				if err := rt.Destroy(ctx, spec); err != nil {
					b.Fatal(err)
				}
				if ctl != nil {
					ctl.Close()
				}
			}
			b.ReportMetric(pct(claimed, 50), "claim-p50-ms")
			b.ReportMetric(pct(first, 50), "first-result-p50-ms")
			b.ReportMetric(pct(first, 90), "first-result-p90-ms")
			b.ReportMetric(pct(first, 99), "first-result-p99-ms")
		})
	}
}

// firstCommand runs `echo $GREETING` in sb and returns the answer's body.
func firstCommand(b *testing.B, sb runtimes.Sandbox) string {
	code, out := execdCommand(sb, "echo $GREETING")
	if code != 200 {
		b.Fatalf("command: %d %s", code, out)
	}
	return out
}

// execdCommand runs command through sb's execd proxy (POST /command) and
// returns the status and the whole streamed answer.
func execdCommand(sb runtimes.Sandbox, command string) (int, string) {
	body, _ := json.Marshal(map[string]string{"command": command})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/command", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	sb.Execd().ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// BenchmarkPoolClaimMany: n members started ahead (clock stopped; n is
// HYBOX_BENCH_POOL_RUNC, default 100, and HYBOX_BENCH_POOL_GVISOR,
// default 20; 128 MiB each), then all claimed, 10 at a time, each to the
// result of its first command. Reports the total time.
//
//	go test -trimpath -timeout 30m ./runtimes/k8s -run '^$' -bench PoolClaimMany -benchtime 1x
func BenchmarkPoolClaimMany(b *testing.B) {
	c, env, image := clusterB(b)
	// Limits are requests too: with the default 1 GiB the scheduler fits
	// 23 members on a 24 GB node, so the members ask for less.
	for _, rc := range []struct {
		name, class, envVar string
		def                 int
		mem                 int64
	}{{"runc", "runc", "HYBOX_BENCH_POOL_RUNC", 100, 128 << 20}, {"runsc", "gvisor", "HYBOX_BENCH_POOL_GVISOR", 20, 128 << 20}} {
		b.Run(rc.class, func(b *testing.B) {
			if !slices.Contains(env.Classes, rc.class) {
				b.Skipf("no RuntimeClass %s", rc.class)
			}
			n := rc.def
			if v := os.Getenv(rc.envVar); v != "" {
				var err error
				if n, err = strconv.Atoi(v); err != nil || n <= 0 {
					b.Fatalf("%s=%q: want a positive count", rc.envVar, v)
				}
			}
			rt := c.Runtime(rc.name, rc.class)
			ctx := context.Background()
			var totals []time.Duration
			b.StopTimer()
			for range b.N {
				specs := make([]runtimes.Spec, n)
				members := make([]runtimes.Sandbox, n)
				for i := range specs {
					specs[i] = runtimes.Spec{ID: fmt.Sprintf("benchmany-%s-%d", suffix(), i), Image: image, MemoryBytes: rc.mem}
				}
				b.Cleanup(func() {
					for i, spec := range specs {
						if members[i] != nil {
							_ = members[i].Close(ctx)
						}
						_ = rt.Destroy(ctx, spec)
					}
				})
				availBefore := memAvailableMB()
				warmStart := time.Now()
				if err := each(n, 10, func(i int) error {
					sb, err := rt.Warm(ctx, specs[i])
					members[i] = sb
					return err
				}); err != nil {
					b.Fatalf("warm %d members: %v", n, err)
				}
				b.Logf("%s: %d members started in %s; the node's available memory went from %d to %d MB", rc.class, n,
					time.Since(warmStart).Round(time.Millisecond), availBefore, memAvailableMB())
				b.StartTimer()
				begin := time.Now()
				if err := each(n, 10, func(i int) error {
					spec := specs[i]
					spec.Env = map[string]string{"GREETING": "hi"}
					spec.Entrypoint = []string{"sleep", "infinity"}
					if err := rt.Claim(ctx, members[i], spec); err != nil {
						return err
					}
					rec := httptest.NewRecorder()
					req := httptest.NewRequest(http.MethodPost, "/command", strings.NewReader(`{"command":"echo $GREETING"}`))
					req.Header.Set("Content-Type", "application/json")
					members[i].Execd().ServeHTTP(rec, req)
					if rec.Code != 200 || !strings.Contains(rec.Body.String(), "hi") {
						return fmt.Errorf("command in %s: %d %s", spec.ID, rec.Code, rec.Body)
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
				totals = append(totals, time.Since(begin))
				b.StopTimer()
				for i, spec := range specs {
					_ = members[i].Close(ctx)
					members[i] = nil
					if err := rt.Destroy(ctx, spec); err != nil {
						b.Fatal(err)
					}
				}
				waitNoPods(b, env)
			}
			b.ReportMetric(float64(n), "sandboxes")
			b.ReportMetric(pct(totals, 50), "total-ms")
		})
	}
}

// each runs f(0..n-1), at most par at a time, and returns the first error.
func each(n, par int, f func(i int) error) error {
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	sem := make(chan struct{}, par)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// waitNoPods waits until the namespace has no Pod left (the kubelet stops
// the containers of deleted Pods after the API objects are gone).
func waitNoPods(b *testing.B, env *k8stest.Env) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := env.Client.CoreV1().Pods(k8stest.Namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d Pods left", len(list.Items))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// memAvailableMB is MemAvailable of /proc/meminfo (the test cluster's
// node is this machine), or -1.
func memAvailableMB() int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			if kb, err := strconv.Atoi(f[1]); err == nil {
				return kb / 1024
			}
		}
	}
	return -1
}
