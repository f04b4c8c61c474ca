package hybox_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// p50 returns the median of ds.
func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func p99(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)*99/100]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// rawClient sends requests the way a program without the SDK would: one
// shared http.Client, the API key, JSON decoding.
type rawClient struct {
	hc  *http.Client
	key string
}

func (r rawClient) getJSON(b *testing.B, u string, hdr map[string]string, out any) {
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set(hybox.APIKeyHeader, r.key)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		b.Fatal(err)
	}
}

// runCommand runs a command through execd with a raw request and reads
// its stream to the end.
func (r rawClient) runCommand(b *testing.B, u string, hdr map[string]string, cmd string) string {
	body, _ := json.Marshal(api.CommandRequest{Command: cmd})
	req, _ := http.NewRequest(http.MethodPost, u+"/command", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var out strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev api.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			b.Fatal(err)
		}
		if ev.Type == api.EventTypeStdout {
			out.WriteString(ev.Text)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return out.String()
}

// BenchmarkSDKOverhead measures what the SDK adds per call over the same
// request written by hand with net/http, interleaving the two so that both
// see the same server: a lifecycle call (GET /sandboxes/{id}) and a
// foreground command through execd (POST /command, stream read to its end).
func BenchmarkSDKOverhead(b *testing.B) {
	srv := server(b)
	c := newClient(b, srv)
	sb := newSandbox(b, c, api.CreateSandboxRequest{})
	ctx := context.Background()
	if _, err := sb.WaitRunning(ctx, 0); err != nil {
		b.Fatal(err)
	}
	raw := rawClient{hc: &http.Client{}, key: srv.APIKey}
	execURL, execHdr, err := sb.URL(ctx, hybox.ExecdPort)
	if err != nil {
		b.Fatal(err)
	}
	hdr := map[string]string{}
	for k := range execHdr {
		hdr[k] = execHdr.Get(k)
	}
	b.Run("get", func(b *testing.B) {
		var rawD, sdkD []time.Duration
		for b.Loop() {
			t0 := time.Now()
			var info api.Sandbox
			raw.getJSON(b, srv.URL+"/v1/sandboxes/"+sb.ID(), nil, &info)
			t1 := time.Now()
			if _, err := sb.Refresh(ctx); err != nil {
				b.Fatal(err)
			}
			rawD, sdkD = append(rawD, t1.Sub(t0)), append(sdkD, time.Since(t1))
		}
		b.ReportMetric(us(p50(sdkD)), "p50-µs")
		b.ReportMetric(us(p50(rawD)), "raw-p50-µs")
		b.ReportMetric(us(p50(sdkD)-p50(rawD)), "added-p50-µs")
	})
	b.Run("exec", func(b *testing.B) {
		var rawD, sdkD []time.Duration
		for b.Loop() {
			t0 := time.Now()
			if out := raw.runCommand(b, execURL, hdr, "echo hi"); out != "hi" {
				b.Fatalf("raw output %q", out)
			}
			t1 := time.Now()
			x, err := sb.Exec(ctx, hybox.Command{Command: "echo hi"}, nil)
			if err != nil || x.Text() != "hi" {
				b.Fatalf("sdk: %v %+v", err, x)
			}
			rawD, sdkD = append(rawD, t1.Sub(t0)), append(sdkD, time.Since(t1))
		}
		b.ReportMetric(us(p50(sdkD)), "p50-µs")
		b.ReportMetric(us(p50(rawD)), "raw-p50-µs")
		b.ReportMetric(us(p50(sdkD)-p50(rawD)), "added-p50-µs")
	})
}

// BenchmarkCreateToFirstResult measures, through the SDK, the time from
// creating a sandbox to the result of its first command (the sandbox is
// then killed, outside the measured time): wasm always, runc when the
// container tests can run (HYBOX_SDK_CONTAINERD).
func BenchmarkCreateToFirstResult(b *testing.B) {
	b.Run("wasm", func(b *testing.B) { benchCreateToFirstResult(b, server(b), api.CreateSandboxRequest{}) })
	for _, runtime := range []string{"runc", "runsc"} {
		req := api.CreateSandboxRequest{Image: api.ImageSpec{URI: testImage}, Entrypoint: []string{"sleep", "infinity"},
			Extensions: api.Extensions{hybox.RuntimeExtension: runtime}}
		// Cold: a server without pools. From a pool: a server whose pool
		// of this image and runtime keeps two members idle (it refills
		// between iterations, outside the measured time).
		b.Run(runtime, func(b *testing.B) { benchCreateToFirstResult(b, containerServer(b, runtime, 0), req) })
		b.Run(runtime+"-pool", func(b *testing.B) { benchCreateToFirstResult(b, containerServer(b, runtime, 2), req) })
	}
}

func benchCreateToFirstResult(b *testing.B, srv *testServer, req api.CreateSandboxRequest) {
	c := newClient(b, srv)
	ctx := context.Background()
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		sb, err := c.Create(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		x, err := sb.Exec(ctx, hybox.Command{Command: "echo ready"}, nil)
		if err != nil || x.Text() != "ready" {
			b.Fatalf("first command: %v %+v", err, x)
		}
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		if err := sb.Kill(ctx); err != nil {
			b.Fatal(err)
		}
		waitPoolIdle(b, c, srv)
		b.StartTimer()
	}
	b.ReportMetric(ms(p50(ds)), "p50-ms")
	b.ReportMetric(ms(p99(ds)), "p99-ms")
}
