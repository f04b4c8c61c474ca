package egress

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/internal/netns"
	"github.com/hybox-dev/hybox/internal/netns/netnstest"
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
	return newAgentPairFirewall(t, e, cfg, nil)
}

// newAgentPairFirewall is newAgentPair with the agent's firewall
// programmed through fw, as hybox-egress --firewall does.
func newAgentPairFirewall(t *testing.T, e *env, cfg Config, fw FirewallBackend) agentPair {
	t.Helper()
	srv := e.sandbox(t, cfg)
	ac, err := srv.NewAgentConfig(44773, 0x68796278, nil)
	require.NoError(t, err)
	// The configuration goes through its file form, as in a Pod.
	b, err := json.Marshal(ac)
	require.NoError(t, err)
	parsed, err := ParseAgentConfig(b)
	require.NoError(t, err)
	am, err := parsed.Manager(nil, fw)
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
	})
	t.Run("VaultAtClaim", func(t *testing.T) {
		// A pool member's agent is made without a vault; the claim's
		// state brings one, and from then on the agent keeps it.
		p := newAgentPair(t, e, Config{})
		require.Nil(t, p.agent.Vault())
		client, err := NewAgentClient(p.addr, p.cfg)
		require.NoError(t, err)
		ca, err := tproxy.NewCA("claim")
		require.NoError(t, err)
		v := vault.New()
		_, err = v.Create(vault.CreateRequest{
			Credentials: []vault.Credential{{Name: "tok", Source: vault.Source{Value: vault.NewSecret("s3cret")}}},
			Bindings: []vault.Binding{{Name: "b", Match: vault.Match{Hosts: []string{"a.test"}},
				Auth: vault.Auth{Type: vault.AuthBearer, Credential: "tok"}}},
		}, func(string) error { return nil })
		require.NoError(t, err)
		require.NoError(t, client.Push(context.Background(), State{Policy: pol(policy.Deny, "allow a.test"), Vault: v, CA: ca}))
		require.NotNil(t, p.agent.Vault(), "the claim's vault")
		got, err := p.agent.Vault().Get()
		require.NoError(t, err)
		require.Len(t, got.Credentials, 1)
		assert.Equal(t, "tok", got.Credentials[0].Name)
		assert.Equal(t, ca.CertPEM(), p.agent.CA().CertPEM(), "the claim's CA signs what the proxy intercepts")
		assert.Equal(t, "a.test", p.agent.Policy().Policy().Egress[0].Target)
		// A state without it is refused: the vault stays.
		err = client.Push(context.Background(), State{})
		require.ErrorIs(t, err, errdefs.ErrUnavailable)
		assert.Contains(t, err.Error(), "stays once given")
		assert.NotNil(t, p.agent.Vault())
		assert.False(t, p.agent.Policy().DefaultAllow(), "nothing of a refused state is applied")
	})
}

// TestAgentVaultLive needs root: an agent enforcing a namespace without a
// vault starts its credential proxy there when a state brings one (a pool
// member's claim), and the firewall sends connections to it.
func TestAgentVaultLive(t *testing.T) {
	for _, fw := range firewalls {
		t.Run(fw.Name(), func(t *testing.T) { testAgentVaultLive(t, fw) })
	}
}

func testAgentVaultLive(t *testing.T, fw FirewallBackend) {
	ns := netnstest.New(t) // skips unless root
	e := newEnv(t)
	p := newAgentPairFirewall(t, e, Config{Policy: pol(policy.Deny, "allow ok.test")}, fw)
	require.NoError(t, p.agent.Enforce(context.Background(), ns.Path))
	proxyAddr := "127.0.0.1:" + strconv.Itoa(ProxyPort)
	dial := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := netns.Dial(ctx, ns.Path, "tcp", proxyAddr)
		if err == nil {
			c.Close()
		}
		return err
	}
	require.ErrorIs(t, dial(), syscall.ECONNREFUSED, "no credential proxy before the vault")
	ca, err := tproxy.NewCA("claim")
	require.NoError(t, err)
	client, err := NewAgentClient(p.addr, p.cfg)
	require.NoError(t, err)
	require.NoError(t, client.Push(context.Background(), State{Policy: pol(policy.Deny, "allow ok.test"), Vault: vault.New(), CA: ca}))
	require.NoError(t, dial(), "the credential proxy listens after the vault came")
	// The firewall redirects to it now, as at a create with a vault.
	assert.Equal(t, uint16(ProxyPort), p.agent.rules().RedirectPort)
	// And a restore (Enforce again) keeps it.
	require.NoError(t, p.agent.Enforce(context.Background(), ns.Path))
	require.NoError(t, dial())
}

// records keeps the egress API's changes in memory.
type records struct{ p *policy.Policy }

func (r *records) Policy() (*policy.Policy, error)   { return r.p, nil }
func (r *records) SavePolicy(p *policy.Policy) error { r.p = p; return nil }
func (r *records) SaveVault(*Controller) error       { return nil }

// TestAgentPolicyTooLarge needs root: a policy whose rules do not fit the
// xtables firewall (gVisor's netstack) is refused by the agent with the
// reason, and the agent keeps the policy it had.
func TestAgentPolicyTooLarge(t *testing.T) {
	ns := netnstest.New(t) // skips unless root
	e := newEnv(t)
	p := newAgentPairFirewall(t, e, Config{Policy: pol(policy.Deny, "allow ok.test")}, XTables)
	require.NoError(t, p.agent.Enforce(context.Background(), ns.Path))
	client, err := NewAgentClient(p.addr, p.cfg)
	require.NoError(t, err)
	var rules []string
	for i := range 300 {
		rules = append(rules, fmt.Sprintf("allow 198.18.%d.%d", i/250, i%250))
	}
	err = client.Push(context.Background(), State{Policy: pol(policy.Deny, rules...)})
	require.ErrorIs(t, err, errdefs.ErrUnavailable)
	assert.Contains(t, err.Error(), "400")
	assert.Contains(t, err.Error(), "the egress firewall is full")
	assert.Contains(t, err.Error(), "IPv4 filter")
	kept := p.agent.Policy().Policy().Egress
	require.Len(t, kept, 1, "the agent keeps its policy")
	assert.Equal(t, "ok.test", kept[0].Target)
	require.NoError(t, client.Push(context.Background(), State{Policy: pol(policy.Deny, rules[:100]...)}), "a policy that fits")
}
