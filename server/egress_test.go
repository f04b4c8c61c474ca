package server

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/vault"
)

// egressCall sends a request to the sandbox's egress API through the
// endpoint the server returns for port 18080, authenticated only by the
// endpoint's headers (as the SDKs do).
func (h *harness) egressCall(id, method, path string, body any, hdr ...string) (int, []byte) {
	h.t.Helper()
	st, b, _ := h.do("GET", "/v1/sandboxes/"+id+"/endpoints/18080", nil)
	require.Equal(h.t, http.StatusOK, st, string(b))
	var ep api.Endpoint
	require.NoError(h.t, json.Unmarshal(b, &ep))
	host := strings.TrimPrefix(h.ts.URL, "http://")
	all := []string{"OPEN-SANDBOX-API-KEY", ""}
	for k, v := range ep.Headers {
		all = append(all, k, v)
	}
	st, b, _ = h.do(method, strings.TrimPrefix(ep.Endpoint, host)+path, body, append(all, hdr...)...)
	return st, b
}

type policyReply struct {
	Status          string `json:"status"`
	Mode            string `json:"mode"`
	EnforcementMode string `json:"enforcementMode"`
	Policy          struct {
		DefaultAction string `json:"defaultAction"`
		Egress        []struct {
			Action string `json:"action"`
			Target string `json:"target"`
		} `json:"egress"`
	} `json:"policy"`
}

func (h *harness) policy(id string) policyReply {
	h.t.Helper()
	st, b := h.egressCall(id, "GET", "/policy", nil)
	require.Equal(h.t, http.StatusOK, st, string(b))
	var p policyReply
	require.NoError(h.t, json.Unmarshal(b, &p))
	return p
}

func targets(p policyReply) []string {
	var out []string
	for _, r := range p.Policy.Egress {
		out = append(out, r.Action+" "+r.Target)
	}
	return out
}

func testVaultKey(t *testing.T) *vault.Key {
	t.Helper()
	k, err := vault.GenerateKey()
	require.NoError(t, err)
	return &k
}

// The egress API: policy reads and changes, its own authentication, and
// precise errors for bad input.
func TestEgressPolicyAPI(t *testing.T) {
	h := newHarness(t, "", harnessOpts{vaultKey: testVaultKey(t)})

	open := h.create(nil)
	p := h.policy(open.ID)
	assert.Equal(t, "ok", p.Status)
	assert.Equal(t, "allow_all", p.Mode)
	assert.Equal(t, "host", p.EnforcementMode)
	assert.Equal(t, "allow", p.Policy.DefaultAction)
	assert.Empty(t, p.Policy.Egress)

	// Only the endpoint's egress token (or the API key) opens the API.
	st, b, hdr := h.do("GET", "/v1/sandboxes/"+open.ID+"/endpoints/18080", nil)
	require.Equal(t, 200, st, string(b))
	_ = hdr
	var ep api.Endpoint
	require.NoError(t, json.Unmarshal(b, &ep))
	require.NotEmpty(t, ep.Headers[headerEgressAuth])
	assert.NotContains(t, ep.Headers, headerExecdToken, "the egress endpoint does not hand out the execd token")
	path := "/v1/sandboxes/" + open.ID + "/proxy/18080/policy"
	st, _, _ = h.do("GET", path, nil, "OPEN-SANDBOX-API-KEY", "")
	assert.Equal(t, 401, st)
	st, _, _ = h.do("GET", path, nil, "OPEN-SANDBOX-API-KEY", "", headerEgressAuth, "wrong")
	assert.Equal(t, 401, st)
	other := h.create(nil)
	st, b, _ = h.do("GET", "/v1/sandboxes/"+other.ID+"/endpoints/18080", nil)
	require.Equal(t, 200, st)
	var otherEp api.Endpoint
	require.NoError(t, json.Unmarshal(b, &otherEp))
	st, _, _ = h.do("GET", path, nil, "OPEN-SANDBOX-API-KEY", "", headerEgressAuth, otherEp.Headers[headerEgressAuth])
	assert.Equal(t, 401, st, "another sandbox's egress token")

	sb := h.create(map[string]any{"networkPolicy": map[string]any{
		"defaultAction": "deny",
		"egress":        []map[string]string{{"action": "allow", "target": "Example.COM."}},
	}})
	p = h.policy(sb.ID)
	assert.Equal(t, "enforcing", p.Mode)
	assert.Equal(t, []string{"allow example.com"}, targets(p))

	// PATCH: new rules first; a rule for an existing target replaces it.
	st, b = h.egressCall(sb.ID, "PATCH", "/policy", []map[string]string{
		{"action": "deny", "target": "*.example.com"}, {"action": "allow", "target": "10.0.0.0/8"}})
	require.Equal(t, 200, st, string(b))
	assert.Equal(t, []string{"deny *.example.com", "allow 10.0.0.0/8", "allow example.com"}, targets(h.policy(sb.ID)))
	st, b = h.egressCall(sb.ID, "PATCH", "/policy", []map[string]string{{"action": "deny", "target": "example.com"}})
	require.Equal(t, 200, st, string(b))
	assert.Equal(t, []string{"deny example.com", "deny *.example.com", "allow 10.0.0.0/8"}, targets(h.policy(sb.ID)))

	st, b = h.egressCall(sb.ID, "DELETE", "/policy", []string{"example.com", "10.0.0.0/8"})
	require.Equal(t, 200, st, string(b))
	assert.Equal(t, []string{"deny *.example.com"}, targets(h.policy(sb.ID)))

	st, b = h.egressCall(sb.ID, "PUT", "/policy", map[string]any{"egress": []map[string]string{{"action": "allow", "target": "2001:db8::/32"}}})
	require.Equal(t, 200, st, string(b))
	p = h.policy(sb.ID)
	assert.Equal(t, "deny", p.Policy.DefaultAction, "an unset defaultAction is deny")
	assert.Equal(t, []string{"allow 2001:db8::/32"}, targets(p))

	// Bad input: precise 400s, and the policy is untouched.
	for _, c := range []struct {
		method string
		body   any
		want   string
	}{
		{"PUT", "{", "JSON"},
		{"PUT", map[string]any{"defaultAction": "maybe"}, "maybe"},
		{"POST", map[string]any{"egress": []map[string]string{{"action": "allow", "target": "exa mple.com"}}}, "exa mple.com"},
		{"PATCH", []map[string]string{{"action": "permit", "target": "x.com"}}, "permit"},
		{"PATCH", map[string]string{"action": "allow"}, ""},
		{"DELETE", map[string]string{"target": "x"}, "array"},
		{"PUT", nil, "body"},
	} {
		st, b := h.egressCall(sb.ID, c.method, "/policy", c.body)
		assert.Equal(t, 400, st, "%s %v: %s", c.method, c.body, b)
		assert.Contains(t, string(b), c.want, "%s %v", c.method, c.body)
	}
	assert.Equal(t, []string{"allow 2001:db8::/32"}, targets(h.policy(sb.ID)))
	st, _ = h.egressCall(sb.ID, "GET", "/nope", nil)
	assert.Equal(t, 404, st)
	st, _ = h.egressCall(sb.ID, "OPTIONS", "/policy", nil)
	assert.Equal(t, 405, st)

	// A create request with a bad policy is refused and leaves nothing.
	st, b, _ = h.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]string{"uri": "wasm://default"},
		"networkPolicy": map[string]any{"egress": []map[string]string{{"action": "allow", "target": "*"}}}})
	assert.Equal(t, 400, st, string(b))
	assert.Contains(t, string(b), "networkPolicy")
	st, b, _ = h.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]string{"uri": "wasm://default"},
		"credentialProxy": map[string]bool{"enabled": true}})
	assert.Equal(t, 400, st, string(b))
	assert.Contains(t, string(b), "networkPolicy")

	// No credential proxy: the vault API says so.
	st, b = h.egressCall(sb.ID, "GET", "/credential-vault", nil)
	assert.Equal(t, 409, st, string(b))
	assert.Contains(t, string(b), "credentialProxy")

	// The policy survives a restart.
	dir := h.dataDir
	h.close()
	h2 := newHarness(t, dir, harnessOpts{vaultKey: testVaultKey(t)})
	assert.Equal(t, []string{"allow 2001:db8::/32"}, targets(h2.policy(sb.ID)))
}

const vaultSecret = "hybox-secret-7f3a9c1e5b"

func vaultBody(host string) map[string]any {
	return map[string]any{
		"credentials": []map[string]any{{"name": "api-token", "source": map[string]string{"type": "inline", "value": vaultSecret}}},
		"bindings": []map[string]any{{
			"name":  "bound-api",
			"match": map[string]any{"schemes": []string{"https"}, "ports": []int{443}, "hosts": []string{host}},
			"auth":  map[string]string{"type": "bearer", "credential": "api-token"},
		}},
	}
}

// The credential-vault API: create, read, patch with revisions, delete;
// secret values never come back and are sealed in the database.
func TestCredentialVaultAPI(t *testing.T) {
	key := testVaultKey(t)
	h := newHarness(t, "", harnessOpts{vaultKey: key})
	sb := h.create(map[string]any{
		"networkPolicy":   map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": "api.example.com"}}},
		"credentialProxy": map[string]bool{"enabled": true},
	})
	st, b := h.egressCall(sb.ID, "GET", "/credential-vault", nil)
	assert.Equal(t, 404, st, string(b))

	st, b = h.egressCall(sb.ID, "POST", "/credential-vault", vaultBody("api.example.com"))
	require.Equal(t, 201, st, string(b))
	assert.NotContains(t, string(b), vaultSecret)
	var state struct {
		Revision    int64 `json:"revision"`
		Credentials []struct {
			Name       string `json:"name"`
			SourceType string `json:"sourceType"`
		} `json:"credentials"`
		Bindings []map[string]any `json:"bindings"`
	}
	require.NoError(t, json.Unmarshal(b, &state))
	assert.EqualValues(t, 1, state.Revision)
	require.Len(t, state.Credentials, 1)
	assert.Equal(t, "api-token", state.Credentials[0].Name)
	assert.Equal(t, "inline", state.Credentials[0].SourceType)
	require.Len(t, state.Bindings, 1)

	for _, p := range []string{"/credential-vault", "/credential-vault/credentials", "/credential-vault/credentials/api-token",
		"/credential-vault/bindings", "/credential-vault/bindings/bound-api"} {
		st, b := h.egressCall(sb.ID, "GET", p, nil)
		assert.Equal(t, 200, st, "%s: %s", p, b)
		assert.NotContains(t, string(b), vaultSecret, p)
		want := "api-token"
		if strings.Contains(p, "bindings") {
			want = "bound-api"
		}
		assert.Contains(t, string(b), want, p)
	}
	st, _ = h.egressCall(sb.ID, "GET", "/credential-vault/credentials/nope", nil)
	assert.Equal(t, 404, st)

	// A binding host the policy denies is refused.
	st, b = h.egressCall(sb.ID, "PATCH", "/credential-vault", map[string]any{
		"bindings": map[string]any{"add": []map[string]any{{
			"name": "evil", "match": map[string]any{"hosts": []string{"evil.example.org"}},
			"auth": map[string]string{"type": "bearer", "credential": "api-token"}}}}})
	assert.Equal(t, 400, st, string(b))
	assert.Contains(t, string(b), "evil.example.org")

	// expectedRevision guards concurrent edits.
	st, b = h.egressCall(sb.ID, "PATCH", "/credential-vault", map[string]any{"expectedRevision": 7,
		"credentials": map[string]any{"replace": []map[string]any{{"name": "api-token", "source": map[string]string{"type": "inline", "value": "x"}}}}})
	assert.Equal(t, 409, st, string(b))
	st, b = h.egressCall(sb.ID, "PATCH", "/credential-vault", map[string]any{"expectedRevision": 1,
		"credentials": map[string]any{"replace": []map[string]any{{"name": "api-token", "source": map[string]string{"type": "inline", "value": vaultSecret + "-2"}}}}})
	require.Equal(t, 200, st, string(b))
	require.NoError(t, json.Unmarshal(b, &state))
	assert.EqualValues(t, 2, state.Revision)

	// Malformed input.
	for _, body := range []any{"{", map[string]any{"credentials": "x"}, map[string]any{"bogus": 1}} {
		st, b := h.egressCall(sb.ID, "POST", "/credential-vault", body)
		assert.Equal(t, 400, st, "%v: %s", body, b)
	}

	// Sealed at rest: the database never holds the value in clear.
	dir := h.dataDir
	h.close()
	db, err := os.ReadFile(filepath.Join(dir, "hybox.db"))
	require.NoError(t, err)
	assert.NotContains(t, string(db), vaultSecret)
	assert.NotContains(t, string(db), "PRIVATE KEY", "the sandbox CA's key is sealed too")

	// After a restart with the same key the vault is back.
	h2 := newHarness(t, dir, harnessOpts{vaultKey: key})
	st, b = h2.egressCall(sb.ID, "GET", "/credential-vault", nil)
	require.Equal(t, 200, st, string(b))
	require.NoError(t, json.Unmarshal(b, &state))
	assert.EqualValues(t, 2, state.Revision)
	st, _ = h2.egressCall(sb.ID, "DELETE", "/credential-vault", nil)
	assert.Equal(t, 204, st)
	st, _ = h2.egressCall(sb.ID, "GET", "/credential-vault", nil)
	assert.Equal(t, 404, st)
	h2.close()

	// With another key the sealed vault cannot be opened: the sandbox
	// fails to restore with a clear reason instead of running unprotected.
	h3 := newHarness(t, dir, harnessOpts{vaultKey: testVaultKey(t)})
	st, b, _ = h3.do("GET", "/v1/sandboxes/"+sb.ID, nil)
	require.Equal(t, 200, st)
	assert.Contains(t, string(b), "Failed")
	h3.close()

	// A server without a vault key refuses credentialProxy clearly.
	h4 := newHarness(t, "", harnessOpts{})
	st, b, _ = h4.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]string{"uri": "wasm://default"},
		"networkPolicy":   map[string]any{"defaultAction": "deny"},
		"credentialProxy": map[string]bool{"enabled": true}})
	assert.Equal(t, 503, st, string(b))
	assert.Contains(t, string(b), "key")
}
