package ingress_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/ingress"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

func TestRouterRefusals(t *testing.T) {
	g := newGateway(t, ingress.Target{Handler: newUpstream()}, nil)
	hyphenID := "a-b-c-d"
	tests := []struct {
		name       string
		path, host string
		headers    []string
		wantStatus int
		wantCode   api.ErrorCode
		wantInMsg  string
	}{
		{name: "nothing names a sandbox", path: "/", wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "path without port", path: "/" + sbID, wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "path with bad port", path: "/" + sbID + "/http/", wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "path port zero", path: "/" + sbID + "/0/", wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "path port too big", path: "/" + sbID + "/65536/", wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "path id with escape", path: "/a%2Fb/8080/", wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "header lone hyphen", path: "/", headers: []string{ingress.HeaderIngressTo, "-"}, wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "header no port", path: "/", headers: []string{ingress.HeaderIngressTo, "abc-"}, wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "header port too big", path: "/", headers: []string{ingress.HeaderIngressTo, "x-99999"}, wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "header no hyphen", path: "/", headers: []string{ingress.HeaderIngressTo, "abc"}, wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "header empty", path: "/", headers: []string{ingress.HeaderIngressTo, ""}, wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "header signed port", path: "/", headers: []string{ingress.HeaderIngressTo, "abc-+80"}, wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "header twice", path: "/", headers: []string{ingress.HeaderIngressTo, sbID + "-8080", ingress.HeaderIngressTo, sbID + "-8080"}, wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "header wins over path", path: "/" + sbID + "/8080/", headers: []string{ingress.HeaderIngressTo, "x-99999"}, wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "host without port", path: "/", host: "abc-." + domain, wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "host too deep", path: "/", host: "x.abc-80." + domain, wantStatus: 400, wantCode: ingress.CodeInvalidRoute},
		{name: "unknown sandbox by header", path: "/", headers: []string{ingress.HeaderIngressTo, hyphenID + "-8080"}, wantStatus: 404, wantCode: ingress.CodeNotFound, wantInMsg: hyphenID},
		{name: "unknown sandbox by host", path: "/", host: hyphenID + "-8080." + domain, wantStatus: 404, wantCode: ingress.CodeNotFound, wantInMsg: hyphenID},
		{name: "unknown sandbox by path", path: "/" + hyphenID + "/8080/x", wantStatus: 404, wantCode: ingress.CodeNotFound, wantInMsg: hyphenID},
		{name: "unknown port", path: "/" + sbID + "/9090/", wantStatus: 404, wantCode: ingress.CodeNotFound, wantInMsg: "9090"},
		{name: "paused sandbox", path: "/paused-sandbox/8080/", wantStatus: 503, wantCode: ingress.CodeUnavailable, wantInMsg: "paused"},
		{name: "resolver failure hides detail", path: "/broken-sandbox/8080/", wantStatus: 500, wantCode: ingress.CodeInternal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := g.do(t, "GET", tc.path, tc.host, "", tc.headers...)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.wantStatus, b)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q", ct)
			}
			code, msg := errBody(t, b)
			if code != tc.wantCode {
				t.Errorf("code %q, want %q", code, tc.wantCode)
			}
			if !strings.Contains(msg, tc.wantInMsg) {
				t.Errorf("message %q does not mention %q", msg, tc.wantInMsg)
			}
			if strings.Contains(msg, "secret.sock") {
				t.Errorf("message %q leaks an internal detail", msg)
			}
		})
	}
}

func TestRouterAuthorize(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	signer, err := ingress.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tests := []struct {
		name       string
		authorize  func(*http.Request, string, int) error
		headers    []string
		wantStatus int
		wantCode   api.ErrorCode
		wantNotIn  string
	}{
		{name: "refused", wantStatus: 401, wantCode: ingress.CodeUnauthorized,
			authorize: func(*http.Request, string, int) error {
				return fmt.Errorf("%w: no API key", ingress.ErrUnauthorized)
			}},
		{name: "forbidden", wantStatus: 403, wantCode: ingress.CodeForbidden,
			authorize: func(*http.Request, string, int) error {
				return fmt.Errorf("%w: not your sandbox", ingress.ErrForbidden)
			}},
		{name: "unknown error becomes 403 without detail", wantStatus: 403, wantCode: ingress.CodeForbidden, wantNotIn: "db at",
			authorize: func(*http.Request, string, int) error { return errors.New("db at /var/lib/x locked") }},
		{name: "authorizer sees the route", wantStatus: 200,
			authorize: func(r *http.Request, id string, port int) error {
				if id != sbID || port != sbPort || r.Header.Get(ingress.HeaderRouteToken) != "t" {
					return fmt.Errorf("%w: saw %s %d", ingress.ErrForbidden, id, port)
				}
				return nil
			}, headers: []string{ingress.HeaderRouteToken, "t"}},
		{name: "token missing", authorize: signer.Authorize, wantStatus: 401, wantCode: ingress.CodeUnauthorized},
		{name: "token valid", authorize: signer.Authorize, wantStatus: 200,
			headers: []string{ingress.HeaderRouteToken, signer.Sign(sbID, sbPort, now.Add(time.Hour))}},
		{name: "token for another port", authorize: signer.Authorize, wantStatus: 401, wantCode: ingress.CodeInvalidRouteToken,
			headers: []string{ingress.HeaderRouteToken, signer.Sign(sbID, 8081, now.Add(time.Hour))}},
		{name: "token for another sandbox", authorize: signer.Authorize, wantStatus: 401, wantCode: ingress.CodeInvalidRouteToken,
			headers: []string{ingress.HeaderRouteToken, signer.Sign("other", sbPort, now.Add(time.Hour))}},
		{name: "token expired", authorize: signer.Authorize, wantStatus: 401, wantCode: ingress.CodeRouteTokenExpired,
			headers: []string{ingress.HeaderRouteToken, signer.Sign(sbID, sbPort, now.Add(-time.Second))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway(t, ingress.Target{Handler: newUpstream()}, tc.authorize)
			resp, b := g.do(t, "GET", "/"+sbID+"/8080/", "", "", tc.headers...)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.wantStatus, b)
			}
			if tc.wantStatus == 200 {
				if e := decodeEcho(t, b); e.Header.Get(ingress.HeaderRouteToken) != "" {
					t.Errorf("the route token reached the sandbox")
				}
				return
			}
			code, msg := errBody(t, b)
			if code != tc.wantCode {
				t.Errorf("code %q, want %q", code, tc.wantCode)
			}
			if tc.wantNotIn != "" && strings.Contains(msg, tc.wantNotIn) {
				t.Errorf("message %q leaks %q", msg, tc.wantNotIn)
			}
			if n := g.resolveCalls(); n != 0 {
				t.Errorf("a refused request reached the resolver %d times", n)
			}
		})
	}
}

func TestRouterClaims(t *testing.T) {
	rt, err := ingress.NewRouter(ingress.Options{
		Domain: "." + strings.ToUpper(domain) + ".",
		Resolver: ingress.ResolverFunc(func(context.Context, string, int) (ingress.Target, error) {
			return ingress.Target{}, ingress.ErrNoRoute
		}),
		Authorize: func(*http.Request, string, int) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		host   string
		header string
		want   bool
	}{
		{name: "api host", host: "hybox.local:8080", want: false},
		{name: "the domain itself", host: domain, want: false},
		{name: "look-alike domain", host: "x-80.evil" + domain, want: false},
		{name: "sandbox host", host: "x-80." + domain, want: true},
		{name: "sandbox host with port", host: "x-80." + domain + ":8443", want: true},
		{name: "malformed sandbox host", host: "nonsense." + domain, want: true},
		{name: "header", host: "hybox.local", header: "x-80", want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.Host = tc.host
			if tc.header != "" {
				r.Header.Set(ingress.HeaderIngressTo, tc.header)
			}
			if got := rt.Claims(r); got != tc.want {
				t.Errorf("Claims = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNewRouterValidates(t *testing.T) {
	res := ingress.ResolverFunc(func(context.Context, string, int) (ingress.Target, error) { return ingress.Target{}, nil })
	allow := func(*http.Request, string, int) error { return nil }
	tests := []struct {
		name    string
		opts    ingress.Options
		wantErr bool
	}{
		{name: "ok", opts: ingress.Options{Resolver: res, Authorize: allow}},
		{name: "ok with domain", opts: ingress.Options{Resolver: res, Authorize: allow, Domain: "sbx.example.com"}},
		{name: "no resolver", opts: ingress.Options{Authorize: allow}, wantErr: true},
		{name: "no authorizer", opts: ingress.Options{Resolver: res}, wantErr: true},
		{name: "domain with slash", opts: ingress.Options{Resolver: res, Authorize: allow, Domain: "a/b"}, wantErr: true},
		{name: "domain with empty label", opts: ingress.Options{Resolver: res, Authorize: allow, Domain: "a..b"}, wantErr: true},
		{name: "domain only dots", opts: ingress.Options{Resolver: res, Authorize: allow, Domain: ".."}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := ingress.NewRouter(tc.opts)
			if (err != nil) != tc.wantErr || (err == nil) != (rt != nil) {
				t.Fatalf("NewRouter = %v, %v; want error %v", rt, err, tc.wantErr)
			}
		})
	}
}

// TestStatus: the package's sentinels map to their statuses through errdefs.
func TestStatus(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantKnown  bool
	}{
		{name: "bad target", err: ingress.ErrBadTarget, wantStatus: 400, wantKnown: true},
		{name: "wrapped expired", err: fmt.Errorf("x: %w", ingress.ErrExpired), wantStatus: 401, wantKnown: true},
		{name: "joined no route", err: fmt.Errorf("%w: %w", ingress.ErrNoRoute, errors.New("runtime: not found")), wantStatus: 404, wantKnown: true},
		{name: "unreachable", err: ingress.ErrUnreachable, wantStatus: 502, wantKnown: true},
		{name: "other", err: errors.New("x"), wantStatus: 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _ := errdefs.HTTP(tc.err)
			if known := !errdefs.Internal(tc.err); status != tc.wantStatus || known != tc.wantKnown {
				t.Errorf("Status = %d %v, want %d %v", status, known, tc.wantStatus, tc.wantKnown)
			}
		})
	}
}
