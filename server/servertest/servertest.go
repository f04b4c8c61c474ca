// Package servertest starts a real hybox server in-process for tests of
// API clients (the CLI): the wasm backend, a fresh database, an API key and
// a fresh credential-vault key, on a loopback listener. It is a test
// helper: it imports testing. It needs the guest interpreters (`make
// guests`).
package servertest

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/wasm"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmtest"
	"github.com/hybox-dev/hybox/sdks"
	"github.com/hybox-dev/hybox/sdks/apitest"
	"github.com/hybox-dev/hybox/server"
	"github.com/hybox-dev/hybox/vault"
)

// loadSpec parses the protocol document once per test binary.
var loadSpec = sync.OnceValues(func() (*apitest.Spec, error) { return apitest.Load(sdks.OpenAPI) })

// APIKey is the API key every Server requires.
const APIKey = "servertest-key-0123456789"

// Server is a running hybox server.
type Server struct {
	// URL is the server's domain, such as http://127.0.0.1:PORT.
	URL string
	// APIKey is required in OPEN-SANDBOX-API-KEY.
	APIKey string
}

// New starts a server that tb stops at its end. It fails tb when the server
// cannot start.
func New(tb testing.TB) *Server {
	tb.Helper()
	ctx := context.Background()
	rt, stop, err := wasm.Setup(ctx, wasm.SetupOptions{Engine: wasmtest.Engine(tb), PythonPool: 1, PythonReady: 2})
	if err != nil {
		tb.Fatalf("servertest: wasm backend: %v", err)
	}
	router, err := runtimes.NewSelector([]runtimes.Runtime{rt}, runtimes.BuiltinImageRules, "")
	if err != nil {
		_ = stop()
		tb.Fatalf("servertest: router: %v", err)
	}
	key, err := vault.GenerateKey()
	if err != nil {
		_ = stop()
		tb.Fatalf("servertest: vault key: %v", err)
	}
	srv, err := server.New(ctx, server.Options{DataDir: tb.TempDir(), APIKey: APIKey, Runtimes: router,
		ReapInterval: time.Hour, VaultKey: &key, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		_ = stop()
		tb.Fatalf("servertest: server: %v", err)
	}
	handler := srv.Handler()
	if t, ok := tb.(*testing.T); ok {
		spec, err := loadSpec()
		if err != nil {
			t.Fatalf("servertest: protocol document: %v", err)
		}
		// Registered before the cleanup below, so it runs after the
		// server has stopped (cleanups run last-in first-out).
		handler = apitest.Check(t, spec, handler)
	}
	ts := httptest.NewServer(handler)
	tb.Cleanup(func() {
		ts.Close()
		_ = srv.Close(context.Background())
		_ = stop()
	})
	return &Server{URL: ts.URL, APIKey: APIKey}
}
