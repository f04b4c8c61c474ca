package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/policy/egress/egresstest"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// diagnostics reads a sandbox's diagnostic events.
func (h *harness) diagnostics(id, scope string) api.DiagnosticContentResponse {
	h.t.Helper()
	st, b, _ := h.do("GET", "/v1/sandboxes/"+id+"/diagnostics/events?scope="+scope, nil)
	require.Equal(h.t, http.StatusOK, st, string(b))
	var d api.DiagnosticContentResponse
	require.NoError(h.t, json.Unmarshal(b, &d))
	return d
}

// TestDiagnosticEvents checks the diagnostics route's answers and its bad
// input.
func TestDiagnosticEvents(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	sb := h.create(nil)
	d := h.diagnostics(sb.ID, "network")
	assert.Equal(t, api.DiagnosticContentResponse{SandboxID: sb.ID, Kind: "events", Scope: "network", Delivery: "inline",
		ContentType: "text/plain; charset=utf-8"}, d)
	assert.Equal(t, "all", h.diagnostics(sb.ID, "all").Scope)
	for _, c := range []struct {
		path, want string
		status     int
		code       api.ErrorCode
	}{
		{"/v1/sandboxes/" + sb.ID + "/diagnostics/events", "scope is required", 400, api.ErrorCodeINVALIDREQUEST},
		{"/v1/sandboxes/" + sb.ID + "/diagnostics/events?scope=", "scope is required", 400, api.ErrorCodeINVALIDREQUEST},
		{"/v1/sandboxes/" + sb.ID + "/diagnostics/events?scope=kernel", `scope "kernel" is not supported (network or all)`, 400, api.ErrorCodeINVALIDREQUEST},
		{"/v1/sandboxes/7d5a3b59-2a55-4b8e-9a41-0d5bb6a0f3c1/diagnostics/events?scope=all", "7d5a3b59-2a55-4b8e-9a41-0d5bb6a0f3c1", 404, api.ErrorCodeSANDBOXNOTFOUND},
	} {
		st, b, _ := h.do("GET", c.path, nil)
		require.Equal(t, c.status, st, "%s: %s", c.path, b)
		var e api.Error
		require.NoError(t, json.Unmarshal(b, &e))
		assert.Equal(t, c.code, e.Code, c.path)
		assert.Contains(t, e.Message, c.want, c.path)
	}
	st, _, _ := h.do("GET", "/v1/sandboxes/"+sb.ID+"/diagnostics/events?scope=all", nil, "OPEN-SANDBOX-API-KEY", "")
	assert.Equal(t, http.StatusUnauthorized, st)
}

// TestEgressPlainCredentialTrust checks, in a container, the plaintext
// credential rule: a request with a bound Host header sent to an address
// the sandbox's resolver did not give for it is spliced without the
// credential, and the diagnostics events say why; once an explicit IP rule
// allows that address, the same request gets the credential.
func TestEgressPlainCredentialTrust(t *testing.T) {
	up := startUpstream(t)
	h := newHarness(t, "", harnessOpts{containers: true, upstream: up, vaultKey: testVaultKey(t)})
	sb := h.create(map[string]any{
		"image":           map[string]string{"uri": ocitest.ImageName},
		"extensions":      map[string]string{"hybox.io/runtime": "runc"},
		"entrypoint":      []string{"sleep", "infinity"},
		"networkPolicy":   egressPolicy(),
		"credentialProxy": map[string]bool{"enabled": true},
	})
	t.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil) })
	body := vaultBody(egresstest.BoundName)
	body["bindings"] = []map[string]any{{
		"name": "bound-plain", "match": map[string]any{"schemes": []string{"http"}, "hosts": []string{egresstest.BoundName}},
		"auth": map[string]string{"type": "bearer", "credential": "api-token"}}}
	st, b := h.egressCall(sb.ID, "POST", "/credential-vault", body)
	require.Equal(t, 201, st, string(b))
	probe := containerProber(t, h, sb.ID)
	authOf := func(path string) (string, bool) {
		for _, r := range up.Requests() {
			if r.Path == path {
				return r.Header.Get("Authorization"), true
			}
		}
		return "", false
	}

	assert.Equal(t, "SENT", probe("spoof", egresstest.AllowedName, egresstest.BoundName, "/untrusted"))
	auth, seen := authOf("/untrusted")
	require.True(t, seen, "the spliced request reached the upstream")
	assert.Empty(t, auth, "a forged Host header got the credential")
	d := h.diagnostics(sb.ID, "network")
	assert.Contains(t, d.Content, "network credential-proxy: no credential added to a plaintext HTTP request for "+
		egresstest.BoundName+" sent to "+up.Allowed.String()+":80: the sandbox's resolver did not answer "+egresstest.BoundName+" with "+up.Allowed.String())
	assert.NotContains(t, d.Content, vaultSecret)

	// The user trusts the address: an explicit IP rule allows it.
	st, b = h.egressCall(sb.ID, "PATCH", "/policy", []map[string]string{{"action": "allow", "target": up.Allowed.String()}})
	require.Equal(t, 200, st, string(b))
	assert.Equal(t, "SENT", probe("spoof", egresstest.AllowedName, egresstest.BoundName, "/trusted"))
	auth, seen = authOf("/trusted")
	require.True(t, seen)
	assert.Equal(t, "Bearer "+vaultSecret, auth)
	d = h.diagnostics(sb.ID, "all")
	assert.Contains(t, d.Content, "credential added: "+up.Allowed.String()+" is allowed by rule 0 (allow "+up.Allowed.String()+")")
	assert.Equal(t, 2, strings.Count(d.Content, "\n"), d.Content)
}
