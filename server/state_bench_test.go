package server

import (
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// fork posts a fork of id and returns the copy's id.
func (c *benchClient) fork(b *testing.B, id string) string {
	out := c.post(b, "/v1/sandboxes/"+id+"/fork", nil, `{}`)
	var resp api.ForkSandboxResponse
	if err := json.Unmarshal(out, &resp); err != nil || len(resp.Sandboxes) != 1 {
		b.Fatalf("fork: %v %s", err, out)
	}
	return resp.Sandboxes[0].ID
}

// benchFork50MB forks a sandbox whose Python context holds 50 MB of data.
// mode "dirty": right after an execution changed the context, so the fork
// writes the context's state first; "saved": again with nothing changed
// (the state on disk is current: the fork links it and copies the
// workspace); "first-result": fork → the copy's first result (its context
// restored from 50 MB of state).
func benchFork50MB(b *testing.B, mode string) {
	c := newBenchClient(b)
	id := c.create(b)
	c.code(b, id, "python", "data = b'x' * (50 << 20)\nn = 0\nlen(data)", "52428800")
	var lat latencies
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if mode == "dirty" || i == 0 {
			c.code(b, id, "python", "n += 1\nlen(data)", "52428800")
		}
		if mode != "dirty" && i == 0 {
			c.delete(b, c.fork(b, id)) // saves the state
		}
		b.StartTimer()
		start := time.Now()
		f := c.fork(b, id)
		if mode == "first-result" {
			c.code(b, f, "python", "len(data)", "52428800")
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		c.delete(b, f)
		b.StartTimer()
	}
	b.StopTimer()
	lat.report(b)
}

func BenchmarkForkPython50MBDirty(b *testing.B)       { benchFork50MB(b, "dirty") }
func BenchmarkForkPython50MBSaved(b *testing.B)       { benchFork50MB(b, "saved") }
func BenchmarkForkPython50MBFirstResult(b *testing.B) { benchFork50MB(b, "first-result") }

// BenchmarkRestoreFirstResult: the server restarted; each sandbox's first
// Python execution restores its context (variables and imported modules)
// from its saved state and answers.
func BenchmarkRestoreFirstResult(b *testing.B) {
	dir := b.TempDir()
	h := newHarness(&testing.T{}, dir, harnessOpts{})
	c := &benchClient{h: h, hc: newBenchClient(b).hc}
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = c.create(b)
		c.code(b, ids[i], "python", "import json, re, collections\nx = 2\nx", "2")
	}
	h.close() // saves what is not saved yet
	h2 := newHarness(&testing.T{}, dir, harnessOpts{})
	b.Cleanup(h2.close)
	c.h = h2
	c.code(b, c.create(b), "python", "1+1", "2") // the server's own warm-up
	var lat latencies
	b.ResetTimer()
	for _, id := range ids {
		start := time.Now()
		c.code(b, id, "python", "x", "2")
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	lat.report(b)
}

// BenchmarkPerCallPython: `1+1` in a sandbox with per-call isolation, so
// every execution starts from a fresh clone of the image (compare with
// BenchmarkWarmPythonRun).
func BenchmarkPerCallPython(b *testing.B) {
	c := newBenchClient(b)
	out := c.post(b, "/v1/sandboxes", nil, `{"image":{"uri":"wasm://default"},"extensions":{"hybox.io/isolation":"per-call"}}`)
	var sb api.Sandbox
	if err := json.Unmarshal(out, &sb); err != nil {
		b.Fatal(err)
	}
	c.code(b, sb.ID, "python", "1+1", "2")
	var lat latencies
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		c.code(b, sb.ID, "python", "1+1", "2")
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	lat.report(b)
}

// BenchmarkPauseFreesMemory: b.N sandboxes whose Python context holds
// 20 MB each; the process's resident memory before and after pausing them
// all, per sandbox (MiB/sandbox is what pause gave back). Resident
// memory counts the page cache mapped into the process, not files only
// written.
func BenchmarkPauseFreesMemory(b *testing.B) {
	c := newBenchClient(b)
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = c.create(b)
		c.code(b, ids[i], "python", "data = bytes(range(256)) * (80 << 10)\nlen(data)", "20971520")
	}
	runtime.GC()
	before := rssBytes()
	b.ResetTimer()
	for _, id := range ids {
		c.post(b, "/v1/sandboxes/"+id+"/pause", nil, "")
	}
	b.StopTimer()
	runtime.GC()
	after := rssBytes()
	b.ReportMetric(float64(before-after)/float64(b.N)/(1<<20), "MiB/sandbox")
	for _, id := range ids {
		c.post(b, "/v1/sandboxes/"+id+"/resume", nil, "")
		c.code(b, id, "python", "len(data)", "20971520")
	}
}
