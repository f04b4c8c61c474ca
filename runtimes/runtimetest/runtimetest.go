// Package runtimetest is the one conformance suite that every sandbox
// backend (wasm, runc, runsc) must pass: lifecycle, the execd API through
// Sandbox.Execd, isolation between sandboxes, pause/resume and cleanup.
package runtimetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/runtimes"
)

// Config describes the backend under test.
type Config struct {
	Runtime runtimes.Runtime
	// Image for the sandboxes (for example "wasm://default").
	Image string
	// Entrypoint for the sandboxes (may be empty).
	Entrypoint []string
	// Paused says what the execd API answers while paused: 409 for all
	// backends today.

	// PauseUnsupported says that the backend cannot pause (Kubernetes, for
	// now): then Pause and Resume must fail with runtimes.ErrNotSupported
	// and leave the sandbox working, instead of pausing it.
	PauseUnsupported bool
}

// Run runs the suite against cfg.Runtime.
func Run(t *testing.T, cfg Config) {
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, cfg) })
	t.Run("Isolation", func(t *testing.T) { testIsolation(t, cfg) })
	t.Run("PauseResume", func(t *testing.T) { testPauseResume(t, cfg) })
	t.Run("RestoreAndDestroy", func(t *testing.T) { testRestoreDestroy(t, cfg) })
}

func newSpec(t *testing.T, cfg Config) runtimes.Spec {
	id := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(id) > 40 {
		id = id[len(id)-40:]
	}
	id = strings.Trim(id, "-") + "-" + time.Now().Format("150405.000000")
	id = strings.ReplaceAll(id, ".", "")
	dir := filepath.Join(t.TempDir(), "sb")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return runtimes.Spec{ID: id, Image: cfg.Image, Entrypoint: cfg.Entrypoint, Dir: dir,
		Env: map[string]string{"HYBOX_SUITE": "yes"}, MemoryBytes: 256 << 20}
}

// create makes a sandbox and registers its destruction.
func create(t *testing.T, cfg Config) (runtimes.Spec, runtimes.Sandbox) {
	t.Helper()
	spec := newSpec(t, cfg)
	ctx := context.Background()
	sb, err := cfg.Runtime.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		_ = sb.Close(ctx)
		if err := cfg.Runtime.Destroy(ctx, spec); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return spec, sb
}

type client struct {
	t  *testing.T
	ts *httptest.Server
}

func newClient(t *testing.T, sb runtimes.Sandbox) *client {
	ts := httptest.NewServer(sb.Execd())
	t.Cleanup(ts.Close)
	return &client{t: t, ts: ts}
}

func (c *client) do(method, path, body string) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.ts.URL+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type event struct {
	Type    string            `json:"type"`
	Text    string            `json:"text"`
	Results map[string]string `json:"results"`
	Error   *struct {
		EName  string `json:"ename"`
		EValue string `json:"evalue"`
	} `json:"error"`
}

type outcome struct {
	stdout   []string
	result   string
	ename    string
	evalue   string
	complete bool
}

func parse(t *testing.T, body []byte) outcome {
	t.Helper()
	var o outcome
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("bad event %q: %v", line, err)
		}
		switch ev.Type {
		case "stdout":
			o.stdout = append(o.stdout, ev.Text)
		case "result":
			o.result = ev.Results["text"]
		case "error":
			o.ename, o.evalue = ev.Error.EName, ev.Error.EValue
		case "execution_complete":
			o.complete = true
		}
	}
	return o
}

func (c *client) command(cmd string) outcome {
	c.t.Helper()
	b, _ := json.Marshal(map[string]string{"command": cmd})
	st, body := c.do("POST", "/command", string(b))
	if st != 200 {
		c.t.Fatalf("command %q: %d %s", cmd, st, body)
	}
	return parse(c.t, body)
}

func (c *client) python(code string) outcome {
	c.t.Helper()
	b, _ := json.Marshal(map[string]any{"context": map[string]string{"language": "python"}, "code": code})
	st, body := c.do("POST", "/code", string(b))
	if st != 200 {
		c.t.Fatalf("code %q: %d %s", code, st, body)
	}
	return parse(c.t, body)
}

func testLifecycle(t *testing.T, cfg Config) {
	_, sb := create(t, cfg)
	c := newClient(t, sb)
	if st, b := c.do("GET", "/ping", ""); st != 200 {
		t.Fatalf("ping: %d %s", st, b)
	}
	o := c.command("echo hello; echo $HYBOX_SUITE; exit 3")
	if strings.Join(o.stdout, ",") != "hello,yes" || o.ename != "CommandExecError" || o.evalue != "3" {
		t.Fatalf("command outcome %+v", o)
	}
	if o := c.python("x = 41"); o.ename != "" {
		t.Fatalf("python: %+v", o)
	}
	if o := c.python("x + 1"); o.result != "42" {
		t.Fatalf("python state: %+v", o)
	}
	if o := c.python("1/0"); o.ename != "ZeroDivisionError" {
		t.Fatalf("python exception: %+v", o)
	}
	if o := c.command("mkdir -p /tmp/suite && echo data > /tmp/suite/f.txt"); !o.complete {
		t.Fatalf("write: %+v", o)
	}
	st, b := c.do("GET", "/files/download?path=/tmp/suite/f.txt", "")
	if st != 200 || string(b) != "data\n" {
		t.Fatalf("download: %d %q", st, b)
	}
	if o := c.python("open('/tmp/suite/f.txt').read()"); o.result != "'data\\n'" {
		t.Fatalf("python sees files: %+v", o)
	}
}

func testIsolation(t *testing.T, cfg Config) {
	_, a := create(t, cfg)
	_, b := create(t, cfg)
	ca, cb := newClient(t, a), newClient(t, b)
	ca.command("echo secret > /tmp/only-in-a")
	if st, _ := cb.do("GET", "/files/download?path=/tmp/only-in-a", ""); st != 404 {
		t.Fatalf("sandbox b sees a's file: status %d", st)
	}
	ca.python("shared = 'a'")
	if o := cb.python("shared"); o.ename != "NameError" {
		t.Fatalf("sandbox b sees a's variable: %+v", o)
	}
}

func testPauseResume(t *testing.T, cfg Config) {
	_, sb := create(t, cfg)
	c := newClient(t, sb)
	c.python("kept = 7")
	ctx := context.Background()
	if cfg.PauseUnsupported {
		if err := sb.Pause(ctx); !errors.Is(err, runtimes.ErrNotSupported) {
			t.Fatalf("pause: %v, want ErrNotSupported", err)
		}
		if err := sb.Resume(ctx); !errors.Is(err, runtimes.ErrNotSupported) {
			t.Fatalf("resume: %v, want ErrNotSupported", err)
		}
		if o := c.python("kept * 6"); o.result != "42" {
			t.Fatalf("state after a refused pause: %+v", o)
		}
		return
	}
	if err := sb.Pause(ctx); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if st, _ := c.do("POST", "/command", `{"command":"echo hi"}`); st != http.StatusConflict {
		t.Fatalf("command while paused: status %d, want 409", st)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if o := c.python("kept * 6"); o.result != "42" {
		t.Fatalf("state after resume: %+v", o)
	}
}

func testRestoreDestroy(t *testing.T, cfg Config) {
	ctx := context.Background()
	spec := newSpec(t, cfg)
	sb, err := cfg.Runtime.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	newClient(t, sb).command("echo persisted > /tmp/p.txt")
	if err := sb.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	// A new server process would do this.
	sb2, err := cfg.Runtime.Restore(ctx, spec)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if st, b := newClient(t, sb2).do("GET", "/files/download?path=/tmp/p.txt", ""); st != 200 || string(b) != "persisted\n" {
		t.Fatalf("after restore: %d %q", st, b)
	}
	_ = sb2.Close(ctx)
	if err := cfg.Runtime.Destroy(ctx, spec); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if err := cfg.Runtime.Destroy(ctx, spec); err != nil {
		t.Fatalf("second destroy must succeed with nothing to do: %v", err)
	}
	if _, err := cfg.Runtime.Restore(ctx, spec); !errors.Is(err, runtimes.ErrNotFound) {
		t.Fatalf("restore after destroy: %v, want ErrNotFound", err)
	}
}
