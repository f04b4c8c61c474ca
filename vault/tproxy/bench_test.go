package tproxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// benchClient returns an HTTP client whose connections all go to addr,
// trusting roots; keepAlive false makes every request a new TCP and TLS
// connection.
func benchClient(b *testing.B, addr string, roots *x509.CertPool, keepAlive bool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
		TLSClientConfig:     &tls.Config{RootCAs: roots},
		DisableKeepAlives:   !keepAlive,
		MaxIdleConnsPerHost: 64,
	}
	b.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func benchGet(b *testing.B, c *http.Client, url string) {
	res, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		b.Fatalf("status %d, err %v", res.StatusCode, err)
	}
}

// percentiles are the latency quantiles of one sub-benchmark, by name.
type percentiles struct {
	mu sync.Mutex
	m  map[string][2]time.Duration
}

// measure runs the benchmark loop timing each request, and reports p50 and
// p99 in microseconds, requests per second and, when the matching direct
// sub-benchmark ran before, the latency the proxy adds.
func (p *percentiles) measure(b *testing.B, name, directName string, do func()) {
	lat := make([]time.Duration, 0, 1024)
	for b.Loop() {
		t0 := time.Now()
		do()
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	b.ReportMetric(float64(p50.Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(p99.Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(float64(len(lat))/b.Elapsed().Seconds(), "req/s")
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[name] = [2]time.Duration{p50, p99}
	if d, ok := p.m[directName]; ok && directName != name {
		b.ReportMetric(float64((p50-d[0]).Nanoseconds())/1e3, "added-p50-µs")
		b.ReportMetric(float64((p99-d[1]).Nanoseconds())/1e3, "added-p99-µs")
	}
}

func okHandler(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }

// BenchmarkSplice compares an HTTPS request to a host without credential
// binding through the proxy (spliced) with the same request made directly,
// on a new connection per request and on a kept-alive one.
func BenchmarkSplice(b *testing.B) {
	e := newEnv(b, dstHTTPS, nil)
	upstream := e.tlsUpstream(dstHTTPS, http.HandlerFunc(okHandler))
	url := "https://" + unboundHost + "/"
	p := &percentiles{m: map[string][2]time.Duration{}}
	for _, mode := range []string{"new-conn", "keep-alive"} {
		for _, via := range []string{"direct", "splice"} {
			addr := upstream.Listener.Addr().String()
			if via == "splice" {
				addr = e.addr
			}
			name := via + "/" + mode
			b.Run(name, func(b *testing.B) {
				c := benchClient(b, addr, e.roots, mode == "keep-alive")
				benchGet(b, c, url) // warm up
				p.measure(b, name, "direct/"+mode, func() { benchGet(b, c, url) })
			})
		}
	}
}

// BenchmarkIntercept compares an HTTPS request to a bound host through the
// proxy (TLS terminated, credential injected, forwarded over a pooled,
// verified upstream connection) with the same request made directly, on a
// kept-alive connection, sequentially and in parallel.
func BenchmarkIntercept(b *testing.B) {
	e := newEnv(b, dstHTTPS, nil)
	upstream := e.tlsUpstream(dstHTTPS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" && r.Header.Get("X-Direct") == "" {
			http.Error(w, "no credential", http.StatusUnauthorized)
			return
		}
		okHandler(w, r)
	}))
	url := "https://" + boundHost + "/v1/things"
	p := &percentiles{m: map[string][2]time.Duration{}}
	type via struct {
		name  string
		addr  string
		roots *x509.CertPool
	}
	vias := []via{
		{"direct", upstream.Listener.Addr().String(), e.roots},
		{"intercept", e.addr, e.sandbox},
	}
	for _, v := range vias {
		name := v.name + "/keep-alive"
		b.Run(name, func(b *testing.B) {
			c := benchClient(b, v.addr, v.roots, true)
			get := func() {
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("X-Direct", "1") // stands in for the credential when direct
				if v.name == "intercept" {
					req.Header.Del("X-Direct")
				}
				res, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					b.Fatalf("status %d", res.StatusCode)
				}
			}
			get()
			p.measure(b, name, "direct/keep-alive", get)
		})
	}
	for _, v := range vias {
		b.Run(v.name+"/parallel", func(b *testing.B) {
			c := benchClient(b, v.addr, v.roots, true)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(http.MethodGet, url, nil)
					if v.name == "direct" {
						req.Header.Set("X-Direct", "1")
					}
					res, err := c.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}
