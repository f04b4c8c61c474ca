package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/policy/egress/egresstest"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
	"github.com/hybox-dev/hybox/vault"
)

// egressBenchClient runs inside a container: n HTTPS requests, each on a new
// connection (TCP, TLS, GET, read to the end), to ip with SNI and Host
// name; or, with "keepalive", as many requests as fit in n milliseconds on
// one connection. It prints the count and the p50 and p99 in microseconds
// as JSON.
const egressBenchClient = `
import socket, ssl, sys, time, json
mode, ip, name, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
req = ("GET /bench HTTP/1.1\r\nHost: %s\r\nConnection: %s\r\n\r\n" % (name, "close" if mode == "new" else "keep-alive")).encode()
out = []
if mode == "new":
    for _ in range(n):
        t = time.perf_counter_ns()
        with socket.create_connection((ip, 443), timeout=10) as raw:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with ctx.wrap_socket(raw, server_hostname=name) as s:
                s.sendall(req)
                while s.recv(65536): pass
        out.append((time.perf_counter_ns() - t) // 1000)
elif mode == "resolve":
    for _ in range(n):
        t = time.perf_counter_ns()
        try: socket.getaddrinfo(name, 443, socket.AF_INET)
        except socket.gaierror: pass
        out.append((time.perf_counter_ns() - t) // 1000)
else:
    raw = socket.create_connection((ip, 443), timeout=10)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s = ctx.wrap_socket(raw, server_hostname=name); f = s.makefile("rb")
    end = time.monotonic() + n / 1000
    while time.monotonic() < end:
        t = time.perf_counter_ns()
        s.sendall(req)
        length = 0
        while True:
            line = f.readline()
            if line.lower().startswith(b"content-length:"): length = int(line.split(b":")[1])
            if line in (b"\r\n", b""): break
        f.read(length)
        out.append((time.perf_counter_ns() - t) // 1000)
out.sort()
print(json.dumps({"n": len(out), "p50": out[(len(out) - 1) // 2], "p99": out[int((len(out) - 1) * 0.99)]}))
`

func percentileMs(us []int64, p float64) float64 {
	s := append([]int64(nil), us...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[int(float64(len(s)-1)*p)]) / 1000
}

// BenchmarkEgressHTTPS measures an HTTPS request from inside a runc
// container: with no policy ("direct"), through the policy path (firewall
// plus the credential proxy splicing a host without a binding), and with a
// credential injected (TLS terminated with the sandbox's CA). It reports
// p50/p99 and the added p50 against direct; and, on one kept-alive
// connection, requests per second direct and through the injecting proxy.
// DNS: a resolution through the sandbox's DNS proxy, allowed (forwarded)
// and denied (decided locally).
func BenchmarkEgressHTTPS(b *testing.B) {
	up := egresstest.Start(b)
	h := newBenchHarness(b, up)
	mk := func(body map[string]any) string {
		body["image"] = map[string]string{"uri": ocitest.ImageName}
		body["extensions"] = map[string]string{"hybox.io/runtime": "runc"}
		body["entrypoint"] = []string{"sleep", "infinity"}
		sb := h.create(body)
		b.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil) })
		writeFileB(b, h, sb.ID, "/tmp/bench.py", egressBenchClient)
		return sb.ID
	}
	direct := mk(map[string]any{})
	pol := egressPolicy()
	pol["egress"] = append(pol["egress"].([]map[string]string),
		map[string]string{"action": "allow", "target": up.Allowed.String()},
		map[string]string{"action": "allow", "target": up.Bound.String()})
	enforced := mk(map[string]any{"networkPolicy": pol, "credentialProxy": map[string]bool{"enabled": true}})
	st, body := h.egressCall(enforced, "POST", "/credential-vault", vaultBody(egresstest.BoundName))
	require.Equal(b, 201, st, string(body))

	type summary struct{ N, P50, P99 int64 }
	run := func(b *testing.B, id string, args ...string) summary {
		b.Helper()
		o := h.command(id, "python3 /tmp/bench.py "+strings.Join(args, " "))
		require.Nil(b, o.err, "%+v", o)
		var s summary
		require.NoError(b, json.Unmarshal([]byte(lines(o)), &s), lines(o))
		require.NotZero(b, s.N)
		return s
	}
	report := func(b *testing.B, s summary) float64 {
		b.ReportMetric(float64(s.P50)/1000, "p50-ms")
		b.ReportMetric(float64(s.P99)/1000, "p99-ms")
		return float64(s.P50) / 1000
	}
	var directP50 float64
	cases := []struct {
		name, id, ip, host string
	}{
		{"direct", direct, up.Allowed.String(), egresstest.AllowedName},
		{"policy-no-binding", enforced, up.Allowed.String(), egresstest.AllowedName},
		{"policy-injection", enforced, up.Bound.String(), egresstest.BoundName},
	}
	for _, c := range cases {
		b.Run("new-connection/"+c.name, func(b *testing.B) {
			run(b, c.id, "new", c.ip, c.host, "20") // warm up
			b.ResetTimer()
			p50 := report(b, run(b, c.id, "new", c.ip, c.host, fmt.Sprint(b.N)))
			if c.name == "direct" {
				directP50 = p50
			} else if directP50 > 0 {
				b.ReportMetric(p50-directP50, "added-p50-ms")
			}
		})
	}
	for _, c := range []struct{ name, id, ip, host string }{cases[0], cases[2]} {
		b.Run("keepalive-2s/"+c.name, func(b *testing.B) {
			s := run(b, c.id, "keepalive", c.ip, c.host, "2000")
			report(b, s)
			b.ReportMetric(float64(s.N)/2, "req/s")
		})
	}
	// A policy change: the PATCH returns once the firewall is replaced,
	// so its round trip bounds the time until new connections follow it.
	b.Run("policy-patch", func(b *testing.B) {
		us := make([]int64, 0, b.N)
		for i := 0; i < b.N; i++ {
			action := []string{"allow", "deny"}[i%2]
			t := time.Now()
			st, body := h.egressCall(enforced, "PATCH", "/policy", []map[string]string{{"action": action, "target": "patched.test"}})
			us = append(us, time.Since(t).Microseconds())
			require.Equal(b, 200, st, string(body))
		}
		b.ReportMetric(percentileMs(us, 0.5), "p50-ms")
		b.ReportMetric(percentileMs(us, 0.99), "p99-ms")
	})
	for _, c := range []struct{ name, host string }{{"allowed", egresstest.AllowedName}, {"denied", egresstest.DeniedName}} {
		b.Run("dns/"+c.name, func(b *testing.B) {
			report(b, run(b, enforced, "resolve", "-", c.host, fmt.Sprint(b.N)))
		})
	}
}

// BenchmarkEgressWasmHTTPS measures the host side of a wasm guest's HTTPS
// request (policy decision, resolution through the sandbox's resolvers,
// vault injection, a new connection each time) against a plain Go client
// dialing the address directly.
func BenchmarkEgressWasmHTTPS(b *testing.B) {
	up := egresstest.Start(b)
	h := newBenchHarness(b, up)
	sb := h.create(map[string]any{"networkPolicy": egressPolicy(), "credentialProxy": map[string]bool{"enabled": true}})
	st, body := h.egressCall(sb.ID, "POST", "/credential-vault", vaultBody(egresstest.BoundName))
	require.Equal(b, 201, st, string(body))
	eg, ok := h.srv.egressOf(sb.ID)
	require.True(b, ok)
	plain := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: up.Roots},
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort(up.Allowed.String(), port))
		},
	}}
	measure := func(b *testing.B, do func(*http.Request) (*http.Response, error), url string) {
		us := make([]int64, 0, b.N)
		for i := 0; i < b.N; i++ {
			req, err := http.NewRequest("GET", url, nil)
			require.NoError(b, err)
			req.Close = true
			t := time.Now()
			resp, err := do(req)
			require.NoError(b, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			us = append(us, time.Since(t).Microseconds())
		}
		b.ReportMetric(percentileMs(us, 0.5), "p50-ms")
		b.ReportMetric(percentileMs(us, 0.99), "p99-ms")
	}
	b.Run("direct", func(b *testing.B) { measure(b, plain.Do, "https://allowed.test/bench") })
	b.Run("policy-no-binding", func(b *testing.B) { measure(b, eg.Do, "https://allowed.test/bench") })
	b.Run("policy-injection", func(b *testing.B) { measure(b, eg.Do, "https://api.bound.test/bench") })
}

// newBenchHarness is a harness with containers and the upstream network.
func newBenchHarness(b *testing.B, up *egresstest.Net) *harness {
	b.Helper()
	k, err := vault.GenerateKey()
	require.NoError(b, err)
	return newHarness(b, "", harnessOpts{containers: true, upstream: up, vaultKey: &k})
}

// writeFileB is writeFile for any test or benchmark.
func writeFileB(tb testing.TB, h *harness, id, path, content string) {
	tb.Helper()
	o := h.command(id, "cat > "+path+" <<'HYBOX_EOF'\n"+content+"\nHYBOX_EOF")
	require.Nil(tb, o.err, "%+v", o)
}
