package oci_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

var seq atomic.Int64

// testSpec is a sandbox spec with a unique id and its own host directory.
func testSpec(t testing.TB, prefix string) runtimes.Spec {
	t.Helper()
	id := strings.ToLower(prefix) + "-" + time.Now().Format("150405") + "-" + strconv.FormatInt(seq.Add(1), 10)
	dir := filepath.Join(t.TempDir(), "sb")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return runtimes.Spec{ID: id, Image: ocitest.ImageName, Entrypoint: []string{"sleep", "infinity"},
		Dir: dir, MemoryBytes: 256 << 20}
}

// mustCreate creates a sandbox and destroys it when t ends.
func mustCreate(t testing.TB, rt runtimes.Runtime, spec runtimes.Spec) runtimes.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create %s: %v", spec.ID, err)
	}
	t.Cleanup(func() {
		_ = sb.Close(ctx)
		if err := rt.Destroy(ctx, spec); err != nil {
			t.Errorf("destroy %s: %v", spec.ID, err)
		}
	})
	return sb
}

// execClient drives a sandbox's execd API over a loopback HTTP server, as
// the server and the conformance suite do.
type execClient struct {
	t   testing.TB
	url string
}

func newExecClient(t testing.TB, sb runtimes.Sandbox) *execClient {
	ts := httptest.NewServer(sb.Execd())
	t.Cleanup(ts.Close)
	return &execClient{t: t, url: ts.URL}
}

func (c *execClient) do(method, path, body string) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, strings.NewReader(body))
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

// outcome is what a command stream said.
type outcome struct {
	ID        string
	Stdout    string // lines joined by "\n"
	Stderr    string
	EName     string
	EValue    string
	Traceback []string
	Complete  bool
}

// run runs a foreground command and parses its stream.
func (c *execClient) run(command string) outcome {
	c.t.Helper()
	b, _ := json.Marshal(map[string]any{"command": command})
	st, body := c.do("POST", "/command", string(b))
	if st != http.StatusOK {
		c.t.Fatalf("command %q: %d %s", command, st, body)
	}
	var o outcome
	var out, errs []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Text  string `json:"text"`
			Error *struct {
				EName     string   `json:"ename"`
				EValue    string   `json:"evalue"`
				Traceback []string `json:"traceback"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			c.t.Fatalf("bad event %q: %v", line, err)
		}
		switch ev.Type {
		case "init":
			o.ID = ev.Text
		case "stdout":
			out = append(out, strings.TrimSuffix(ev.Text, "\n"))
		case "stderr":
			errs = append(errs, strings.TrimSuffix(ev.Text, "\n"))
		case "error":
			o.EName, o.EValue, o.Traceback = ev.Error.EName, ev.Error.EValue, ev.Error.Traceback
		case "execution_complete":
			o.Complete = true
		}
	}
	o.Stdout, o.Stderr = strings.Join(out, "\n"), strings.Join(errs, "\n")
	return o
}

// status reads GET /command/status/{id}.
func (c *execClient) status(id string) map[string]any {
	c.t.Helper()
	st, body := c.do("GET", "/command/status/"+id, "")
	if st != http.StatusOK {
		c.t.Fatalf("status %s: %d %s", id, st, body)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		c.t.Fatal(err)
	}
	return m
}
