package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// These benchmarks drive the real server over loopback HTTP, as a client
// would. Each reports p50/p99 latencies (ms) as extra metrics; `make bench`
// prints them as a table (scripts/bench.sh).

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

// benchClient posts with keep-alive connections.
type benchClient struct {
	h  *harness
	hc *http.Client
}

func newBenchClient(b *testing.B) *benchClient { return newBenchClientWith(b, harnessOpts{}) }

func newBenchClientWith(b *testing.B, ho harnessOpts) *benchClient {
	h := newHarness(&testing.T{}, b.TempDir(), ho)
	b.Cleanup(h.close)
	return &benchClient{h: h, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
}

func (c *benchClient) post(b *testing.B, path string, hdr map[string]string, body string) []byte {
	out, err := c.tryPost(path, hdr, body)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// tryPost is post for other goroutines than the benchmark's.
func (c *benchClient) tryPost(path string, hdr map[string]string, body string) ([]byte, error) {
	req, _ := http.NewRequest("POST", c.h.ts.URL+path, strings.NewReader(body))
	req.Header.Set("OPEN-SANDBOX-API-KEY", testKey)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("%s: %d %s", path, resp.StatusCode, out)
	}
	return out, nil
}

func (c *benchClient) create(b *testing.B) string {
	out := c.post(b, "/v1/sandboxes", nil, `{"image":{"uri":"wasm://default"},"timeout":3600}`)
	var sb api.Sandbox
	if err := json.Unmarshal(out, &sb); err != nil {
		b.Fatal(err)
	}
	return sb.ID
}

func (c *benchClient) delete(b *testing.B, id string) {
	req, _ := http.NewRequest("DELETE", c.h.ts.URL+"/v1/sandboxes/"+id, nil)
	req.Header.Set("OPEN-SANDBOX-API-KEY", testKey)
	resp, err := c.hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
}

// code runs code in the sandbox's default context of lang and checks the
// result.
func (c *benchClient) code(b *testing.B, id, lang, code, want string) {
	out := c.post(b, "/v1/sandboxes/"+id+"/proxy/44772/code", nil,
		fmt.Sprintf(`{"context":{"language":%q},"code":%q}`, lang, code))
	if !bytes.Contains(out, []byte(`"text":"`+want+`"`)) {
		b.Fatalf("unexpected stream: %s", out)
	}
}

func BenchmarkCreateToFirstPythonResult(b *testing.B) {
	c := newBenchClient(b)
	c.code(b, c.create(b), "python", "1+1", "2") // warm the pool
	var lat latencies
	var ids []string
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		id := c.create(b)
		c.code(b, id, "python", "1+1", "2")
		lat = append(lat, time.Since(start))
		ids = append(ids, id)
		b.StopTimer()
		// Let the pool refill, as it would between real requests.
		time.Sleep(time.Second)
		b.StartTimer()
	}
	b.StopTimer()
	lat.report(b)
	for _, id := range ids {
		c.delete(b, id)
	}
}

// BenchmarkBurst50CreateToFirstPythonResult: 50 clients each create a
// sandbox at once and run `1+1` in it; each latency runs from the burst's
// start. The server keeps 50 ready Python clones (wasm.python_ready),
// refilled between bursts; BenchmarkBurst50CreateToFirstPythonResultCold
// keeps none.
func BenchmarkBurst50CreateToFirstPythonResult(b *testing.B) { benchBurst50(b, 50) }

func BenchmarkBurst50CreateToFirstPythonResultCold(b *testing.B) { benchBurst50(b, -1) }

func benchBurst50(b *testing.B, ready int) {
	const n = 50
	c := newBenchClientWith(b, harnessOpts{pythonReady: ready})
	c.code(b, c.create(b), "python", "1+1", "2")
	var lat latencies
	var ids []string
	var mu sync.Mutex
	for b.Loop() {
		b.StopTimer()
		time.Sleep(2 * time.Second) // the ready clones are made again
		b.StartTimer()
		start := time.Now()
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := c.tryPost("/v1/sandboxes", nil, `{"image":{"uri":"wasm://default"},"timeout":3600}`)
				if err != nil {
					errs <- err
					return
				}
				var sb api.Sandbox
				if err := json.Unmarshal(out, &sb); err != nil {
					errs <- err
					return
				}
				out, err = c.tryPost("/v1/sandboxes/"+sb.ID+"/proxy/44772/code", nil, `{"context":{"language":"python"},"code":"1+1"}`)
				if err == nil && !bytes.Contains(out, []byte(`"text":"2"`)) {
					err = fmt.Errorf("unexpected stream: %s", out)
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(start))
				ids = append(ids, sb.ID)
				mu.Unlock()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	lat.report(b)
	for _, id := range ids {
		c.delete(b, id)
	}
}

func benchWarm(b *testing.B, lang string) {
	c := newBenchClient(b)
	id := c.create(b)
	c.code(b, id, lang, "1+1", "2")
	var lat latencies
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		c.code(b, id, lang, "1+1", "2")
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	lat.report(b)
}

func BenchmarkWarmPythonRun(b *testing.B)     { benchWarm(b, "python") }
func BenchmarkWarmJavaScriptRun(b *testing.B) { benchWarm(b, "javascript") }

func benchOneShot(b *testing.B, lang string) {
	c := newBenchClient(b)
	hdr := map[string]string{"Accept": "application/json"}
	body := fmt.Sprintf(`{"language":%q,"code":"1+1"}`, lang)
	c.post(b, "/v1/run", hdr, body)
	var lat latencies
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		out := c.post(b, "/v1/run", hdr, body)
		lat = append(lat, time.Since(start))
		if !bytes.Contains(out, []byte(`"text":"2"`)) {
			b.Fatalf("unexpected: %s", out)
		}
		if lang == "python" {
			b.StopTimer()
			time.Sleep(1000 * time.Millisecond) // pool refill
			b.StartTimer()
		}
	}
	b.StopTimer()
	lat.report(b)
}

func BenchmarkOneShotPython(b *testing.B)     { benchOneShot(b, "python") }
func BenchmarkOneShotJavaScript(b *testing.B) { benchOneShot(b, "javascript") }

// BenchmarkExecutionsPerSecond runs `1+1` from many clients at once, each
// in its own sandbox's warm context, and reports executions per second.
func BenchmarkExecutionsPerSecond(b *testing.B) {
	for _, lang := range []string{"python", "javascript"} {
		b.Run(lang, func(b *testing.B) {
			c := newBenchClient(b)
			const clients = 8
			ids := make([]string, clients)
			for i := range ids {
				ids[i] = c.create(b)
				c.code(b, ids[i], lang, "1+1", "2")
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := 0; w < clients; w++ {
				wg.Add(1)
				go func(id string) {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						c.code(b, id, lang, "1+1", "2")
					}
				}(ids[w])
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "execs/s")
		})
	}
}

// rssBytes reads the resident set size of this process.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func heapInuse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// BenchmarkMemoryPerIdleSandbox creates b.N sandboxes that have run
// nothing and reports the Go heap they hold, per sandbox.
func BenchmarkMemoryPerIdleSandbox(b *testing.B) {
	c := newBenchClient(b)
	c.create(b)
	before := heapInuse()
	ids := make([]string, 0, b.N)
	for i := 0; i < b.N; i++ {
		ids = append(ids, c.create(b))
	}
	after := heapInuse()
	b.ReportMetric(float64(after-before)/float64(b.N)/1024, "KiB/sandbox")
	b.StopTimer()
	for _, id := range ids {
		c.delete(b, id)
	}
}

// BenchmarkMemoryPerPythonContext creates b.N live Python contexts (each
// has run one line) and reports resident memory per context.
func BenchmarkMemoryPerPythonContext(b *testing.B) {
	c := newBenchClient(b)
	id := c.create(b)
	c.code(b, id, "python", "1+1", "2")
	time.Sleep(time.Second) // pool full
	runtime.GC()
	before := rssBytes()
	for i := 0; i < b.N; i++ {
		out := c.post(b, "/v1/sandboxes/"+id+"/proxy/44772/code/context", nil, `{"language":"python"}`)
		var cc struct{ ID string }
		if err := json.Unmarshal(out, &cc); err != nil {
			b.Fatal(err)
		}
		out = c.post(b, "/v1/sandboxes/"+id+"/proxy/44772/code", nil, fmt.Sprintf(`{"context":{"id":%q},"code":"x = [1]*10"}`, cc.ID))
		if !bytes.Contains(out, []byte(execd.EventExecutionComplete)) {
			b.Fatalf("unexpected: %s", out)
		}
	}
	time.Sleep(time.Second) // let the pool refill, so it is not counted
	runtime.GC()
	b.ReportMetric(float64(rssBytes()-before)/float64(b.N)/(1<<20), "MiB/context")
}
