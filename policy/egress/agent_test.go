package egress

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
)

// agentPair is a server-side controller attached to an agent whose own
// controller is built from the configuration, as hybox-egress builds it,
// served over TLS on loopback.
type agentPair struct {
	server, agent *Controller
	cfg           *AgentConfig
	addr          string
}

func newAgentPair(t *testing.T, e *env, cfg Config) agentPair {
	t.Helper()
	srv := e.sandbox(t, cfg)
	ac, err := srv.NewAgentConfig(44773, 0x68796278, nil)
	require.NoError(t, err)
	// The configuration goes through its file form, as in a Pod.
	b, err := json.Marshal(ac)
	require.NoError(t, err)
	parsed, err := ParseAgentConfig(b)
	require.NoError(t, err)
	am, err := parsed.Manager(nil)
	require.NoError(t, err)
	agentCtl, err := parsed.Controller(am)
	require.NoError(t, err)
	t.Cleanup(func() { _ = agentCtl.Close() })
	a := NewAgent(parsed, agentCtl)
	tc, err := a.TLSConfig()
	require.NoError(t, err)
	ts := httptest.NewUnstartedServer(a)
	ts.TLS = tc
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return agentPair{server: srv, agent: agentCtl, cfg: parsed, addr: ts.Listener.Addr().String()}
}

func TestAgent(t *testing.T) {
	e := newEnv(t)
	t.Run("PolicyAndVault", func(t *testing.T) {
		ca, err := tproxy.NewCA("agent test")
		require.NoError(t, err)
		p := newAgentPair(t, e, Config{Policy: pol(policy.Deny, "allow a.test"), Vault: vault.New(), CA: ca})
		assert.Equal(t, "a.test", p.agent.Policy().Policy().Egress[0].Target, "the agent starts from the configured state")
		client, err := NewAgentClient(p.addr, p.cfg)
		require.NoError(t, err)
		require.NoError(t, p.server.Attach(context.Background(), client))
		// A policy change through the egress API is in force in the agent
		// before the API answers.
		rec := &records{p: pol(policy.Deny, "allow a.test")}
		api := NewAPI(p.server, rec, true)
		w := httptest.NewRecorder()
		api.ServeHTTP(w, httptest.NewRequest("PATCH", "/policy", strings.NewReader(`[{"action":"allow","target":"b.test"}]`)))
		require.Equal(t, 200, w.Code, w.Body.String())
		assert.True(t, p.agent.Policy().Name("b.test").Allow)
		// So is a vault change; the agent's vault is the one its
		// credential proxy injects from.
		w = httptest.NewRecorder()
		api.ServeHTTP(w, httptest.NewRequest("POST", "/credential-vault", strings.NewReader(
			`{"credentials":[{"name":"tok","source":{"type":"inline","value":"s3cret"}}],`+
				`"bindings":[{"name":"b","match":{"hosts":["a.test"]},"auth":{"type":"bearer","credential":"tok"}}]}`)))
		require.Equal(t, 201, w.Code, w.Body.String())
		st, err := p.agent.Vault().Get()
		require.NoError(t, err)
		require.Len(t, st.Credentials, 1)
		assert.Equal(t, "tok", st.Credentials[0].Name)
	})
	t.Run("Refusals", func(t *testing.T) {
		p := newAgentPair(t, e, Config{Policy: pol(policy.Deny, "allow a.test")})
		// Another token: 401, and the change is not made anywhere.
		bad := *p.cfg
		bad.Token = strings.Repeat("0", 64)
		client, err := NewAgentClient(p.addr, &bad)
		require.NoError(t, err)
		err = p.server.Attach(context.Background(), client)
		require.ErrorIs(t, err, errdefs.ErrUnavailable)
		assert.Contains(t, err.Error(), "401")
		err = p.server.SetPolicy(pol(policy.Allow))
		require.ErrorIs(t, err, errdefs.ErrUnavailable)
		assert.False(t, p.server.Policy().DefaultAllow(), "a change the agent refused is not made")
		assert.False(t, p.agent.Policy().DefaultAllow())
		// Another agent's certificate: the client refuses the server.
		other := newAgentPair(t, e, Config{})
		impostor := *other.cfg
		impostor.CertPEM = p.cfg.CertPEM
		client, err = NewAgentClient(other.addr, &impostor)
		require.NoError(t, err)
		err = client.Push(context.Background(), State{})
		require.ErrorIs(t, err, errdefs.ErrUnavailable)
		assert.Contains(t, err.Error(), "certificate")
		// Anything but PUT /v1/state, even with the token: 404.
		good, err := NewAgentClient(p.addr, p.cfg)
		require.NoError(t, err)
		req, _ := http.NewRequest("GET", "https://"+p.addr+AgentPath, nil)
		req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
		resp, err := good.client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 404, resp.StatusCode)
		// A state with a vault for an agent without one is refused.
		ca, err := tproxy.NewCA("x")
		require.NoError(t, err)
		err = good.Push(context.Background(), State{Vault: vault.New(), CA: ca})
		require.True(t, errors.Is(err, errdefs.ErrUnavailable), "%v", err)
		assert.Contains(t, err.Error(), "fixed at create")
	})
}

// records keeps the egress API's changes in memory.
type records struct{ p *policy.Policy }

func (r *records) Policy() (*policy.Policy, error)   { return r.p, nil }
func (r *records) SavePolicy(p *policy.Policy) error { r.p = p; return nil }
func (r *records) SaveVault(*Controller) error       { return nil }
