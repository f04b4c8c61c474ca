package k8s_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/runtimes"
)

// BenchmarkCreateFirstCommand: a sandbox Pod from create to the result of
// its first command (`echo`), image present on the node; each iteration is
// one sandbox, destroyed after the clock stops. Reports p50 and p90.
// runc+egress: with an egress controller (a deny-all policy), so the Pod
// has hybox-egress's init container and sidecar.
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
	}{{"runc", "runc", false}, {"runc", "runc", true}, {"runsc", "gvisor", false}} {
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
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodPost, "/command", strings.NewReader(`{"command":"echo hi"}`))
				req.Header.Set("Content-Type", "application/json")
				sb.Execd().ServeHTTP(rec, req)
				first = append(first, time.Since(begin))
				if rec.Code != 200 || !strings.Contains(rec.Body.String(), "hi") {
					b.Fatalf("command: %d %s", rec.Code, rec.Body)
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
