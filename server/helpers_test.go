package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/internal/typescript"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/policy/egress/egresstest"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/oci"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
	"github.com/hybox-dev/hybox/runtimes/wasm"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmtest"
	"github.com/hybox-dev/hybox/sdks/apitest"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/vault"
)

const testKey = "test-key-0123456789"

// loadSpec parses the protocol document once per test binary.
var loadSpec = sync.OnceValues(func() (*apitest.Spec, error) { return apitest.Load(openAPIDocument) })

// documentSpec is the parsed protocol document that test traffic is
// validated against.
func documentSpec(t testing.TB) *apitest.Spec {
	t.Helper()
	spec, err := loadSpec()
	require.NoError(t, err)
	return spec
}

// harness is a real hybox server (real wasm backend, real database) on a
// loopback listener.
type harness struct {
	t       testing.TB
	srv     *Server
	ts      *httptest.Server
	dataDir string
	stop    func() error
}

type harnessOpts struct {
	containers    bool // add the runc and runsc runtimes (skips without root)
	ingressDomain string
	execTimeout   time.Duration
	outputLimit   int64
	limiter       *execd.Limiter
	memory        int64
	// upstream, when set, is the only network sandboxes can reach: the
	// server resolves through its zone and trusts its CA.
	upstream *egresstest.Net
	vaultKey *vault.Key
	pools    []api.CreatePoolRequest // pools of the configuration file
	// allowedHostPaths: where host volumes may lie, for every tier.
	allowedHostPaths []string
	pythonReady      int // ready Python clones (0 = 2)
}

func newHarness(t testing.TB, dataDir string, ho harnessOpts) *harness {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	ctx := context.Background()
	eo := execd.Options{ExecTimeout: ho.execTimeout, OutputLimitBytes: ho.outputLimit, Limiter: ho.limiter,
		TypeScript: typescript.Transpiler{}}
	if ho.pythonReady == 0 {
		ho.pythonReady = 2
	}
	rt, stop, err := wasm.Setup(ctx, wasm.SetupOptions{Engine: wasmtest.Engine(t), PythonPool: 2, PythonReady: ho.pythonReady,
		DefaultMemoryBytes: ho.memory, OutputLimitBytes: ho.outputLimit, Exec: eo, AllowedHostPaths: ho.allowedHostPaths})
	require.NoError(t, err)
	rts := []runtimes.Runtime{rt}
	var images runtimes.ImageStore
	if ho.containers {
		// Its own containerd namespace: the server sweeps sandboxes it has
		// no record of, which must not touch other test packages' ones.
		const ns = "hybox-test-server"
		sock := ocitest.Containerd(t)
		ocitest.ImageIn(t, sock, ns)
		b, err := oci.New(ctx, oci.Options{Address: sock, Namespace: ns,
			ExecdBinary: ocitest.ExecdBinary(t), RunscBinary: ocitest.Runsc().Binary, RunscPlatform: ocitest.GVisor(t).Platform,
			CNIPluginDir: "/usr/lib/cni", StateDir: filepath.Join(dataDir, "oci"), AllowedHostPaths: ho.allowedHostPaths})
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		rts = append(rts, b.Runtimes()...)
		images = b
	}
	router, err := runtimes.NewSelector(rts, runtimes.BuiltinImageRules, "")
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var eg *egress.Manager
	if ho.upstream != nil {
		eg, err = egress.NewManager(egress.Options{DNSUpstreams: []string{ho.upstream.DNSAddr}, RootCAs: ho.upstream.Roots, Logger: log})
		require.NoError(t, err)
	}
	srv, err := New(ctx, Options{DataDir: dataDir, APIKey: testKey, Runtimes: router, ReapInterval: time.Hour,
		Images: images, IngressDomain: ho.ingressDomain, Egress: eg, VaultKey: ho.vaultKey,
		Pools: ho.pools, Logger: log})
	require.NoError(t, err)
	handler := srv.Handler()
	if tt, ok := t.(*testing.T); ok {
		// Every response of the test is checked against the document
		// when it ends, after h.close (cleanups run last-in first-out).
		handler = apitest.Check(tt, documentSpec(tt), handler)
	}
	h := &harness{t: t, srv: srv, ts: httptest.NewServer(handler), dataDir: dataDir, stop: stop}
	t.Cleanup(h.close)
	return h
}

func (h *harness) close() {
	if h.ts == nil {
		return
	}
	h.ts.Close()
	_ = h.srv.Close(context.Background())
	_ = h.stop()
	h.ts = nil
}

// do sends a request with the API key and returns status and body.
func (h *harness) do(method, path string, body any, hdr ...string) (int, []byte, http.Header) {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		require.NoError(h.t, err)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, h.ts.URL+path, rd)
	require.NoError(h.t, err)
	req.Header.Set("OPEN-SANDBOX-API-KEY", testKey)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	return resp.StatusCode, b, resp.Header
}

// create makes a sandbox and returns its wire form.
func (h *harness) create(body map[string]any) api.Sandbox {
	h.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	if _, ok := body["image"]; !ok {
		body["image"] = map[string]string{"uri": "wasm://default"}
	}
	st, b, _ := h.do("POST", "/v1/sandboxes", body)
	require.Equal(h.t, http.StatusAccepted, st, string(b))
	var sb api.Sandbox
	require.NoError(h.t, json.Unmarshal(b, &sb))
	return sb
}

// execd sends a request to the sandbox's execd API through the endpoint
// the server returns, authenticating with the endpoint's headers only.
func (h *harness) execd(id, method, path string, body any) (int, []byte) {
	h.t.Helper()
	st, b, _ := h.do("GET", "/v1/sandboxes/"+id+"/endpoints/44772", nil)
	require.Equal(h.t, http.StatusOK, st, string(b))
	var ep api.Endpoint
	require.NoError(h.t, json.Unmarshal(b, &ep))
	host := strings.TrimPrefix(h.ts.URL, "http://")
	require.True(h.t, strings.HasPrefix(ep.Endpoint, host), ep.Endpoint)
	hdr := []string{"OPEN-SANDBOX-API-KEY", ""}
	for k, v := range ep.Headers {
		hdr = append(hdr, k, v)
	}
	st, b, _ = h.do(method, strings.TrimPrefix(ep.Endpoint, host)+path, body, hdr...)
	return st, b
}

// events parses a stream body.
func events(t testing.TB, body []byte) []execd.Event {
	t.Helper()
	var out []execd.Event
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev execd.Event
		require.NoError(t, json.Unmarshal(line, &ev), string(line))
		require.NotZero(t, ev.Timestamp, "every event carries a timestamp")
		out = append(out, ev)
	}
	return out
}

// outcome summarises a stream.
type outcome struct {
	stdout, stderr []string
	results        []map[string]string
	err            *execd.ExecError
	complete       bool
}

func summarise(t testing.TB, body []byte) outcome {
	var o outcome
	for _, ev := range events(t, body) {
		switch ev.Type {
		case execd.EventStdout:
			o.stdout = append(o.stdout, ev.Text)
		case execd.EventStderr:
			o.stderr = append(o.stderr, ev.Text)
		case execd.EventResult:
			o.results = append(o.results, ev.Results)
		case execd.EventError:
			o.err = ev.Error
		case execd.EventExecutionComplete:
			o.complete = true
		}
	}
	return o
}

func (h *harness) code(id, lang, code string) outcome {
	h.t.Helper()
	st, b := h.execd(id, "POST", "/code", map[string]any{"context": map[string]string{"language": lang}, "code": code})
	require.Equal(h.t, http.StatusOK, st, string(b))
	return summarise(h.t, b)
}

func (h *harness) command(id, cmd string) outcome {
	h.t.Helper()
	st, b := h.execd(id, "POST", "/command", map[string]any{"command": cmd})
	require.Equal(h.t, http.StatusOK, st, string(b))
	return summarise(h.t, b)
}
