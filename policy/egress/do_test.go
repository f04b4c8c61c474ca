package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
)

// TestDoDecisions checks which loopback destinations each policy lets Do
// reach: loopback only when a rule names the host or its address, and an
// IP rule that denies the resolved address beats a name rule.
func TestDoDecisions(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		name    string
		pol     *policy.Policy
		host    string
		wantErr string // "" = reached
		denied  bool   // the error matches policy.ErrDenied
	}{
		{"no policy: loopback name", nil, "ok.test", "ok.test resolves to host-local address 127.0.0.1; only a rule naming it allows it", true},
		{"no policy: loopback address", nil, "127.0.0.1", "127.0.0.1 is a host-local address; only a rule naming it allows it", true},
		{"default allow: loopback name", pol(policy.Allow), "ok.test", "ok.test resolves to host-local address 127.0.0.1", true},
		{"default allow: loopback address", pol(policy.Allow), "127.0.0.1", "127.0.0.1 is a host-local address", true},
		{"name rule", pol(policy.Deny, "allow ok.test"), "ok.test", "", false},
		{"name rule, upper case", pol(policy.Deny, "allow ok.test"), "OK.Test", "", false},
		{"wildcard rule", pol(policy.Deny, "allow *.test"), "other.test", "", false},
		{"name rule: other name", pol(policy.Deny, "allow ok.test"), "other.test", "egress to other.test denied by the default action (deny)", true},
		{"name rule: address", pol(policy.Deny, "allow ok.test"), "127.0.0.1", "egress to 127.0.0.1 denied by the default action (deny)", true},
		{"CIDR rule: name", pol(policy.Allow, "allow 127.0.0.0/8"), "ok.test", "", false},
		{"CIDR rule: address", pol(policy.Allow, "allow 127.0.0.0/8"), "127.0.0.1", "", false},
		{"address rule", pol(policy.Deny, "allow 127.0.0.1"), "127.0.0.1", "", false},
		{"CIDR rule does not allow a name", pol(policy.Deny, "allow 127.0.0.0/8"), "ok.test", "egress to ok.test denied by the default action (deny)", true},
		{"denied name", pol(policy.Allow, "deny ok.test"), "ok.test", "egress to ok.test denied by rule 0 (deny ok.test)", true},
		{"denied wildcard", pol(policy.Allow, "allow other.test", "deny *.test"), "ok.test", "egress to ok.test denied by rule 1 (deny *.test)", true},
		{"IP deny before name allow", pol(policy.Allow, "deny 127.0.0.0/8", "allow ok.test"), "ok.test",
			"egress to ok.test (127.0.0.1) denied by rule 0 (deny 127.0.0.0/8)", true},
		{"IP deny after name allow", pol(policy.Allow, "allow ok.test", "deny 127.0.0.1"), "ok.test",
			"egress to ok.test (127.0.0.1) denied by rule 1 (deny 127.0.0.1)", true},
		{"unknown name", pol(policy.Deny, "allow *.test"), "nx.test", "resolve nx.test", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := e.sandbox(t, Config{Policy: c.pol})
			resp, body, err := get(t, s, e.http.url(c.host, "/hello"))
			if c.wantErr == "" {
				require.NoError(t, err)
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				assert.Equal(t, "/hello", body)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.wantErr)
			assert.Equal(t, c.denied, errorsIsDenied(err), "errors.Is(err, policy.ErrDenied) for %v", err)
		})
	}
	assert.Len(t, e.http.requests(), 6, "only the allowed requests reach the server")
}

// TestAllowedAddrs checks the decisions for addresses that Do must never
// dial in a test (public and link-local ones): they are decided only.
func TestAllowedAddrs(t *testing.T) {
	e := newEnv(t)
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	for _, c := range []struct {
		name    string
		pol     *policy.Policy
		host    string
		want    []netip.Addr
		wantErr string
	}{
		{"no policy: public name", nil, "pub.test", addrs("192.0.2.1", "2001:db8::1"), ""},
		{"no policy: public address", nil, "192.0.2.9", addrs("192.0.2.9"), ""},
		{"no policy: mapped address", nil, "[::ffff:192.0.2.9]", addrs("192.0.2.9"), ""},
		{"no policy: loopback dropped from a mixed answer", nil, "mixed.test", addrs("192.0.2.1"), ""},
		{"no policy: link-local name", nil, "ll.test", nil, "ll.test resolves to host-local address 169.254.1.1"},
		{"no policy: metadata address", nil, "169.254.169.254", nil, "169.254.169.254 is a host-local address"},
		{"no policy: IPv6 loopback name", nil, "v6local.test", nil, "v6local.test resolves to host-local address ::1"},
		{"no policy: IPv6 loopback", nil, "[::1]", nil, "::1 is a host-local address"},
		{"no policy: unspecified", nil, "0.0.0.0", nil, "0.0.0.0 is a host-local address"},
		{"metadata address named", pol(policy.Allow, "allow 169.254.169.254"), "169.254.169.254", addrs("169.254.169.254"), ""},
		{"link-local name named", pol(policy.Deny, "allow ll.test"), "ll.test", addrs("169.254.1.1"), ""},
		{"IPv4 denied, IPv6 kept", pol(policy.Allow, "deny 192.0.2.0/24"), "pub.test", addrs("2001:db8::1"), ""},
		{"all denied", pol(policy.Allow, "allow pub.test", "deny 192.0.2.0/24", "deny 2001:db8::/32"), "pub.test", nil,
			"egress to pub.test ("},
		{"denied address", pol(policy.Allow, "deny 192.0.2.0/24"), "192.0.2.9", nil, "egress to 192.0.2.9 denied by rule 0 (deny 192.0.2.0/24)"},
		{"default deny", pol(policy.Deny, "allow ok.test"), "pub.test", nil, "egress to pub.test denied by the default action (deny)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := e.sandbox(t, Config{Policy: c.pol})
			got, err := s.allowedAddrs(context.Background(), c.host)
			if c.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.wantErr)
				assert.True(t, errorsIsDenied(err), "errors.Is(err, policy.ErrDenied) for %v", err)
				return
			}
			require.NoError(t, err)
			assert.ElementsMatch(t, c.want, got)
		})
	}
}

// TestSetPolicyNextRequest checks that a policy change decides the very
// next request, even to a host whose connection is still open.
func TestSetPolicyNextRequest(t *testing.T) {
	e := newEnv(t)
	s := e.sandbox(t, Config{Policy: pol(policy.Deny, "allow ok.test")})
	u := e.http.url("ok.test", "/a")

	_, _, err := get(t, s, u)
	require.NoError(t, err)

	require.NoError(t, s.SetPolicy(pol(policy.Allow, "deny ok.test")))
	_, _, err = get(t, s, u)
	require.ErrorIs(t, err, policy.ErrDenied)
	assert.Contains(t, err.Error(), "denied by rule 0 (deny ok.test)")

	require.NoError(t, s.SetPolicy(pol(policy.Allow, "allow 127.0.0.0/8")))
	_, _, err = get(t, s, u)
	require.NoError(t, err)

	require.NoError(t, s.SetPolicy(nil))
	assert.Nil(t, s.Policy())
	_, _, err = get(t, s, u)
	require.ErrorIs(t, err, policy.ErrDenied)
	assert.Contains(t, err.Error(), "host-local")

	// An invalid policy is refused and the current one stays.
	require.NoError(t, s.SetPolicy(pol(policy.Deny, "allow ok.test")))
	err = s.SetPolicy(pol(policy.Deny, "allow exa mple.test"))
	require.ErrorIs(t, err, policy.ErrInvalid)
	assert.Equal(t, "allowed by rule 0 (allow ok.test)", s.Policy().Name("ok.test").Reason())
	_, _, err = get(t, s, u)
	require.NoError(t, err)
	assert.Len(t, e.http.requests(), 3)
}

// TestDoDoesNotFollowRedirects checks that a redirect comes back to the
// caller, who decides whether to make the next hop.
func TestDoDoesNotFollowRedirects(t *testing.T) {
	e := newEnv(t)
	s := e.sandbox(t, Config{Policy: pol(policy.Deny, "allow ok.test", "allow other.test")})
	to := e.http.url("other.test", "/landing")
	resp, _, err := get(t, s, e.http.url("ok.test", "/redirect?to="+to))
	require.NoError(t, err)
	assert.Equal(t, http.StatusFound, resp.StatusCode)
	assert.Equal(t, to, resp.Header.Get("Location"))
	require.Len(t, e.http.requests(), 1)
	assert.Equal(t, "/redirect", e.http.requests()[0].URL.Path)
}

func TestDoRefusesBadURLs(t *testing.T) {
	e := newEnv(t)
	s := e.sandbox(t, Config{})
	for _, c := range []struct{ url, want string }{
		{"ftp://ok.test/x", `unsupported URL scheme "ftp": only http and https`},
		{"file:///etc/passwd", `unsupported URL scheme "file"`},
		{"http:///x", "the URL has no host"},
	} {
		req, err := http.NewRequest(http.MethodGet, c.url, nil)
		require.NoError(t, err)
		_, err = s.Do(req)
		require.Error(t, err, c.url)
		assert.Contains(t, err.Error(), c.want)
	}
}

const secret = "s3cr3t-token-value"

// vaultSandbox is a sandbox whose vault puts a bearer token on HTTPS
// requests to ok.test at the TLS server's port.
func vaultSandbox(t *testing.T, e *env) *Controller {
	t.Helper()
	v := vault.New()
	port, err := strconv.Atoi(e.tls.port)
	require.NoError(t, err)
	_, err = v.Create(vault.CreateRequest{
		Credentials: []vault.Credential{{Name: "token", Source: vault.Source{Value: vault.NewSecret(secret)}}},
		Bindings: []vault.Binding{{Name: "ok", Match: vault.Match{Hosts: []string{"ok.test"}, Ports: []int{port}},
			Auth: vault.Auth{Type: vault.AuthBearer, Credential: "token"}}},
	}, func(string) error { return nil })
	require.NoError(t, err)
	ca, err := tproxy.NewCA("hybox egress test sandbox")
	require.NoError(t, err)
	return e.sandbox(t, Config{Policy: pol(policy.Deny, "allow ok.test", "allow other.test"), Vault: v, CA: ca})
}

func TestDoInjects(t *testing.T) {
	e := newEnv(t)
	s := vaultSandbox(t, e)

	req, err := http.NewRequest(http.MethodGet, e.tls.url("ok.test", "/api"), nil)
	require.NoError(t, err)
	req.Header.Set("X-Guest", "1")
	resp, err := s.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "/api", string(body))

	seen := e.tls.requests()
	require.Len(t, seen, 1)
	assert.Equal(t, "Bearer "+secret, seen[0].Header.Get("Authorization"), "the upstream gets the credential")
	assert.Equal(t, "1", seen[0].Header.Get("X-Guest"))
	assert.Empty(t, req.Header.Values("Authorization"), "the caller's request is not modified")
	assert.Equal(t, http.Header{"X-Guest": {"1"}}, req.Header)

	assert.Equal(t, "Bearer [REDACTED]", resp.Header.Get("X-Echo"), "an echoed secret is redacted")
	assert.Equal(t, "Bearer [REDACTED]", resp.Trailer.Get("X-Echo-Trailer"), "an echoed secret is redacted from trailers")
	assertNoSecret(t, resp)

	// Another host gets nothing.
	resp, _, err = get(t, s, e.tls.url("other.test", "/api"))
	require.NoError(t, err)
	assert.Empty(t, resp.Header.Get("X-Echo"))
	seen = e.tls.requests()
	require.Len(t, seen, 2)
	assert.Empty(t, seen[1].Header.Values("Authorization"))
}

// TestDoInjectsPerHop checks that a redirect is handed back untouched and
// that the next hop, to another host, is injected (not) on its own.
func TestDoInjectsPerHop(t *testing.T) {
	e := newEnv(t)
	s := vaultSandbox(t, e)
	to := e.tls.url("other.test", "/landing")
	resp, _, err := get(t, s, e.tls.url("ok.test", "/redirect?to="+to))
	require.NoError(t, err)
	assert.Equal(t, http.StatusFound, resp.StatusCode)
	assert.Equal(t, to, resp.Header.Get("Location"), "the Location is untouched")
	assertNoSecret(t, resp)

	resp, _, err = get(t, s, resp.Header.Get("Location"))
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	seen := e.tls.requests()
	require.Len(t, seen, 2)
	assert.Equal(t, "Bearer "+secret, seen[0].Header.Get("Authorization"))
	assert.Empty(t, seen[1].Header.Values("Authorization"), "the credential does not follow the redirect")
}

// TestDoVaultRespectsPolicy checks that the vault does not open a way
// around the policy.
func TestDoVaultRespectsPolicy(t *testing.T) {
	e := newEnv(t)
	s := vaultSandbox(t, e)
	require.NoError(t, s.SetPolicy(pol(policy.Allow, "deny ok.test")))
	_, _, err := get(t, s, e.tls.url("ok.test", "/api"))
	require.ErrorIs(t, err, policy.ErrDenied)
	assert.NotContains(t, err.Error(), secret)
	assert.Empty(t, e.tls.requests())
}

func assertNoSecret(t *testing.T, resp *http.Response) {
	t.Helper()
	for _, h := range []http.Header{resp.Header, resp.Trailer} {
		for k, vs := range h {
			for _, v := range vs {
				assert.False(t, strings.Contains(v, secret), "header %s holds the secret", k)
			}
		}
	}
}

func errorsIsDenied(err error) bool { return errors.Is(err, policy.ErrDenied) }

// A stricter policy fails Do's requests in flight to what it now denies;
// the others finish.
func TestSetPolicyCutsRequestsInFlight(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first|")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		case <-time.After(10 * time.Second):
		}
		io.WriteString(w, "rest")
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	s := e.sandbox(t, Config{Policy: pol(policy.Deny, "allow ok.test", "allow other.test")})
	start := func(host string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/", nil)
		require.NoError(t, err)
		resp, err := s.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		buf := make([]byte, len("first|"))
		_, err = io.ReadFull(resp.Body, buf)
		require.NoError(t, err)
		return resp
	}
	revoked, kept := start("ok.test"), start("other.test")

	require.NoError(t, s.SetPolicy(pol(policy.Deny, "allow other.test")))
	close(release)
	_, err := io.ReadAll(revoked.Body)
	assert.Error(t, err, "the request to a host the policy now denies fails")
	rest, err := io.ReadAll(kept.Body)
	require.NoError(t, err)
	assert.Equal(t, "rest", string(rest), "the request to a host still allowed finishes")

	s.connMu.Lock()
	n := len(s.conns)
	s.connMu.Unlock()
	assert.LessOrEqual(t, n, 1, "closed connections are forgotten (the kept one may be pooled)")
}
