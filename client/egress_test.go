package client_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/client"
	"github.com/hybox-dev/hybox/client/servertest"
)

const egressSecret = "client-secret-4b1d8e0c"

// liveSandbox creates a running wasm sandbox on a real server.
func liveSandbox(t *testing.T, c *client.Client, np *client.NetworkPolicy, proxy bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := client.CreateSandboxRequest{Image: &client.Image{URI: "wasm://default"}, NetworkPolicy: np}
	if proxy {
		req.CredentialProxy = &client.CredentialProxy{Enabled: true}
	}
	sb, err := c.CreateSandbox(ctx, req)
	require.NoError(t, err)
	_, err = c.WaitRunning(ctx, sb.ID, 20*time.Millisecond)
	require.NoError(t, err)
	return sb.ID
}

func liveClient(t *testing.T) *client.Client {
	t.Helper()
	srv := servertest.New(t)
	c, err := client.New(client.Options{Domain: srv.URL, APIKey: srv.APIKey})
	require.NoError(t, err)
	return c
}

func rules(st *client.PolicyStatus) []string {
	var out []string
	for _, r := range st.Policy.Egress {
		out = append(out, r.Action+" "+r.Target)
	}
	return out
}

func TestEgressPolicy(t *testing.T) {
	c := liveClient(t)
	ctx := context.Background()

	open := liveSandbox(t, c, nil, false)
	st, err := c.GetEgressPolicy(ctx, open)
	require.NoError(t, err)
	assert.Equal(t, client.ModeAllowAll, st.Mode)
	assert.Equal(t, "host", st.EnforcementMode)
	assert.Equal(t, client.ActionAllow, st.Policy.DefaultAction)
	assert.NotEmpty(t, st.Reason, "an unrestricted sandbox says why")
	assert.Contains(t, string(st.Raw), `"enforcementMode"`)

	id := liveSandbox(t, c, &client.NetworkPolicy{DefaultAction: client.ActionDeny,
		Egress: []client.EgressRule{{Action: client.ActionAllow, Target: "pypi.org"}}}, false)
	st, err = c.GetEgressPolicy(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, client.ModeEnforcing, st.Mode)
	assert.Equal(t, []string{"allow pypi.org"}, rules(st))

	st, err = c.PatchEgressRules(ctx, id, []client.EgressRule{
		{Action: client.ActionDeny, Target: "*.example.com"}, {Action: client.ActionAllow, Target: "10.0.0.0/8"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"deny *.example.com", "allow 10.0.0.0/8", "allow pypi.org"}, rules(st), "new rules go first, in order")

	st, err = c.DeleteEgressRules(ctx, id, []string{"10.0.0.0/8", "pypi.org"})
	require.NoError(t, err)
	assert.Equal(t, []string{"deny *.example.com"}, rules(st))

	st, err = c.SetEgressPolicy(ctx, id, client.NetworkPolicy{Egress: []client.EgressRule{{Action: client.ActionAllow, Target: "2001:db8::/32"}}})
	require.NoError(t, err)
	assert.Equal(t, client.ActionDeny, st.Policy.DefaultAction, "no default action means deny")
	assert.Equal(t, []string{"allow 2001:db8::/32"}, rules(st))

	st, err = c.SetEgressPolicy(ctx, id, client.NetworkPolicy{DefaultAction: client.ActionDeny})
	require.NoError(t, err)
	assert.Equal(t, client.ModeDenyAll, st.Mode)
	assert.Empty(t, st.Policy.Egress)

	// Bad input: the server's message, and the policy is untouched.
	tests := []struct {
		name string
		call func() (*client.PolicyStatus, error)
		want string
	}{
		{name: "bad target", call: func() (*client.PolicyStatus, error) {
			return c.PatchEgressRules(ctx, id, []client.EgressRule{{Action: client.ActionAllow, Target: "exa mple.com"}})
		}, want: "exa mple.com"},
		{name: "bad action", call: func() (*client.PolicyStatus, error) {
			return c.PatchEgressRules(ctx, id, []client.EgressRule{{Action: "permit", Target: "x.com"}})
		}, want: "permit"},
		{name: "bad default", call: func() (*client.PolicyStatus, error) {
			return c.SetEgressPolicy(ctx, id, client.NetworkPolicy{DefaultAction: "maybe"})
		}, want: "maybe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.call()
			var ae *client.APIError
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, http.StatusBadRequest, ae.StatusCode)
			assert.NotEmpty(t, ae.Code)
			assert.Contains(t, ae.Message, tt.want)
		})
	}
	st, err = c.GetEgressPolicy(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, client.ModeDenyAll, st.Mode)

	_, err = c.GetEgressPolicy(ctx, "no-such-sandbox")
	assert.ErrorIs(t, err, client.ErrNotFound)
}

func testVault(host string) client.CreateVaultRequest {
	return client.CreateVaultRequest{
		Credentials: []client.VaultCredential{{Name: "api-token", Source: client.CredentialSource{Type: client.CredentialSourceInline, Value: egressSecret}}},
		Bindings: []client.VaultBinding{{
			Name:  "bound-api",
			Match: client.BindingMatch{Hosts: []string{host}},
			Auth:  client.BindingAuth{Type: client.AuthBearer, Credential: "api-token"},
		}},
	}
}

func TestCredentialVault(t *testing.T) {
	c := liveClient(t)
	ctx := context.Background()
	id := liveSandbox(t, c, &client.NetworkPolicy{DefaultAction: client.ActionDeny,
		Egress: []client.EgressRule{{Action: client.ActionAllow, Target: "api.example.com"}}}, true)

	_, err := c.GetCredentialVault(ctx, id)
	require.ErrorIs(t, err, client.ErrNotFound, "no vault yet")

	st, err := c.CreateCredentialVault(ctx, id, testVault("api.example.com"))
	require.NoError(t, err)
	assert.EqualValues(t, 1, st.Revision)
	require.Len(t, st.Credentials, 1)
	assert.Equal(t, client.CredentialInfo{Name: "api-token", SourceType: "inline", Revision: 1}, st.Credentials[0])
	require.Len(t, st.Bindings, 1)
	b := st.Bindings[0]
	assert.Equal(t, "bound-api", b.Name)
	require.NotNil(t, b.Match)
	require.NotNil(t, b.Auth)
	assert.Equal(t, []string{"api.example.com"}, b.Match.Hosts)
	assert.Equal(t, []string{"https"}, b.Match.Schemes, "defaults are filled in")
	assert.Equal(t, client.AuthBearer, b.Auth.Type)
	assert.NotContains(t, string(st.Raw), egressSecret)

	_, err = c.CreateCredentialVault(ctx, id, testVault("api.example.com"))
	assert.ErrorIs(t, err, client.ErrConflict, "a second create")

	got, err := c.GetCredentialVault(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, st.Credentials, got.Credentials)
	assert.NotContains(t, string(got.Raw), egressSecret)

	cl, err := c.ListVaultCredentials(ctx, id)
	require.NoError(t, err)
	assert.EqualValues(t, 1, cl.Revision)
	assert.Equal(t, st.Credentials, cl.Credentials)
	ci, err := c.GetVaultCredential(ctx, id, "api-token")
	require.NoError(t, err)
	assert.Equal(t, "api-token", ci.Name)
	_, err = c.GetVaultCredential(ctx, id, "nope")
	assert.ErrorIs(t, err, client.ErrNotFound)
	bl, err := c.ListVaultBindings(ctx, id)
	require.NoError(t, err)
	require.Len(t, bl.Bindings, 1)
	bi, err := c.GetVaultBinding(ctx, id, "bound-api")
	require.NoError(t, err)
	assert.Equal(t, "bound-api", bi.Name)

	// A stale revision conflicts; the right one applies.
	stale := int64(7)
	replace := &client.CredentialChanges{Replace: []client.VaultCredential{{Name: "api-token", Source: client.CredentialSource{Value: egressSecret + "-2"}}}}
	_, err = c.PatchCredentialVault(ctx, id, client.PatchVaultRequest{ExpectedRevision: &stale, Credentials: replace})
	assert.ErrorIs(t, err, client.ErrConflict)
	rev := int64(1)
	st, err = c.PatchCredentialVault(ctx, id, client.PatchVaultRequest{ExpectedRevision: &rev, Credentials: replace,
		Bindings: &client.BindingChanges{Add: []client.VaultBinding{{Name: "key-api", Match: client.BindingMatch{Hosts: []string{"api.example.com"}, Paths: []string{"/v2/*"}},
			Auth: client.BindingAuth{Type: client.AuthAPIKey, Name: "X-Api-Key", Credential: "api-token"}}}}})
	require.NoError(t, err)
	assert.EqualValues(t, 2, st.Revision)
	assert.EqualValues(t, 2, st.Credentials[0].Revision)
	require.Len(t, st.Bindings, 2)

	// A binding host the policy denies: the server's message.
	_, err = c.PatchCredentialVault(ctx, id, client.PatchVaultRequest{Bindings: &client.BindingChanges{Add: []client.VaultBinding{{
		Name: "evil", Match: client.BindingMatch{Hosts: []string{"evil.example.org"}}, Auth: client.BindingAuth{Type: client.AuthBearer, Credential: "api-token"}}}}})
	var ae *client.APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusBadRequest, ae.StatusCode)
	assert.Contains(t, ae.Message, "evil.example.org")
	assert.NotContains(t, ae.Error(), egressSecret)

	require.NoError(t, c.DeleteCredentialVault(ctx, id))
	_, err = c.GetCredentialVault(ctx, id)
	assert.ErrorIs(t, err, client.ErrNotFound)
	assert.ErrorIs(t, c.DeleteCredentialVault(ctx, id), client.ErrNotFound)

	// A sandbox without a credential proxy has no vault to create.
	plain := liveSandbox(t, c, &client.NetworkPolicy{DefaultAction: client.ActionDeny}, false)
	_, err = c.CreateCredentialVault(ctx, plain, testVault("api.example.com"))
	assert.ErrorIs(t, err, client.ErrConflict)
}

// A credential's value never shows when the request is printed.
func TestCredentialSourceFormat(t *testing.T) {
	cred := client.VaultCredential{Name: "n", Source: client.CredentialSource{Value: egressSecret}}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		t.Run(verb, func(t *testing.T) {
			out := fmt.Sprintf(verb, cred)
			assert.NotContains(t, out, egressSecret)
			assert.NotContains(t, out, fmt.Sprintf("%x", egressSecret))
		})
	}
	assert.Equal(t, "{inline [REDACTED]}", fmt.Sprint(cred.Source))
}
