package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hybox-dev/hybox/ingress"
	"github.com/hybox-dev/hybox/runtimes"
)

// loadRouteKey reads the key that signs route tokens, creating it on first
// start. It lives in the data directory so tokens survive restarts.
func loadRouteKey(dataDir string) ([]byte, error) {
	path := filepath.Join(dataDir, "route.key")
	b, err := os.ReadFile(path)
	if err == nil && len(b) >= ingress.MinKeyLen {
		return b, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("route key: %w", err)
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("route key: %w", err)
	}
	return b, nil
}

// authorizeSandbox decides whether r may reach port of sandbox id: the API
// key, the sandbox's own access token, or a signed route token for exactly
// that sandbox and port.
func (s *Server) authorizeSandbox(r *http.Request, id string, port int) error {
	if s.opts.Insecure {
		return nil
	}
	if key := r.Header.Get("OPEN-SANDBOX-API-KEY"); key != "" && constantTimeEqual(key, s.opts.APIKey) {
		return nil
	}
	if tok := r.Header.Get(headerEgressAuth); tok != "" && port == egressPort {
		if rec, err := s.proxyRecord(r.Context(), id); err == nil && constantTimeEqual(tok, egressToken(rec)) {
			return nil
		}
	}
	if tok := r.Header.Get(headerExecdToken); tok != "" {
		if rec, err := s.proxyRecord(r.Context(), id); err == nil && constantTimeEqual(tok, rec.Token) {
			return nil
		}
	}
	if r.Header.Get(ingress.HeaderRouteToken) != "" {
		return s.signer.Authorize(r, id, port)
	}
	return fmt.Errorf("%w: an API key, the sandbox's access token or a route token is required", ingress.ErrUnauthorized)
}

// Resolve implements ingress.Resolver over the live sandboxes.
// Traffic that reaches a sandbox renews it when it opted in (renew.go).
func (s *Server) Resolve(ctx context.Context, id string, port int) (_ ingress.Target, retErr error) {
	rec, err := s.proxyRecord(ctx, id)
	if errors.Is(err, runtimes.ErrNotFound) {
		s.forget(ctx, id)
	}
	if err != nil {
		return ingress.Target{}, fmt.Errorf("%w: sandbox %s", ingress.ErrNoRoute, id)
	}
	defer func() {
		if retErr == nil {
			s.renewOnAccess(rec)
		}
	}()
	sb, err := s.liveOf(ctx, rec)
	if err != nil {
		return ingress.Target{}, fmt.Errorf("%w: %v", ingress.ErrUnavailable, err)
	}
	if port == execdPort {
		return ingress.Target{Handler: sb.Execd()}, nil
	}
	if port == egressPort {
		return ingress.Target{Handler: s.egressAPI(id)}, nil
	}
	h, err := sb.Proxy(port)
	if err != nil {
		if errors.Is(err, runtimes.ErrNotSupported) {
			// The sandbox serves nothing on that port (a wasm sandbox has
			// no network ports).
			return ingress.Target{}, fmt.Errorf("%w: %v", ingress.ErrNoRoute, err)
		}
		return ingress.Target{}, fmt.Errorf("%w: %v", ingress.ErrUnavailable, err)
	}
	return ingress.Target{Handler: h}, nil
}

// stripHeaders are hybox's credentials, never forwarded into a sandbox.
var stripHeaders = []string{"OPEN-SANDBOX-API-KEY", headerEgressAuth}

// withIngress puts the header/host router in front of the API handler.
func (s *Server) withIngress(api http.Handler) (http.Handler, error) {
	rt, err := ingress.NewRouter(ingress.Options{
		Domain: s.opts.IngressDomain, Resolver: s, Authorize: s.authorizeSandbox,
		StripHeaders: stripHeaders, Logger: s.log,
	})
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forwarded, r := s.forward(w, r, rt)
		if forwarded {
			return // to the replica that holds the sandbox (replicas.go)
		}
		if rt.Claims(r) {
			rt.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	}), nil
}

// routeTokenHeaders returns the endpoint headers for a signed route that
// expires at the unix time given in expires ("" = none).
func (s *Server) routeTokenHeaders(id string, port int, expires string) (map[string]string, error) {
	if expires == "" {
		return nil, nil
	}
	var unix int64
	if _, err := fmt.Sscan(strings.TrimSpace(expires), &unix); err != nil {
		return nil, badRequest("expires must be a unix time in seconds")
	}
	exp := time.Unix(unix, 0)
	if !exp.After(time.Now()) {
		return nil, badRequest("expires must be in the future")
	}
	return map[string]string{ingress.HeaderRouteToken: s.signer.Sign(id, port, exp)}, nil
}
