package egress

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/policy/xt"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
	"github.com/hybox-dev/hybox/vault"
)

// The agent (hybox-egress) enforces a sandbox's egress inside a network
// namespace that the server cannot enter, with the same Controller the
// server uses for the namespaces it can: the same firewall, DNS proxy and
// credential proxy, and the same cuts on a policy change. It runs in the
// namespace it fences, so its own connections carry Options.Mark (which
// the firewall lets pass, and which the workload, without CAP_NET_ADMIN,
// cannot set), and its control port is guarded (Options.GuardPorts): no
// socket of the namespace can connect to it, so only connections from
// outside reach it. It is TLS with a certificate the server made and pins
// by its SHA-256, and every request carries a bearer token: the channel is
// confidential (the vault travels over it) and authenticated both ways.

// AgentPath is the agent's one route: PUT the state (wireState).
const AgentPath = "/v1/state"

// maxAgentBody bounds a pushed state.
const maxAgentBody = 8 << 20

// AgentConfig is everything an agent starts from; the server writes it
// into the sandbox's Secret, which only the agent's containers mount.
type AgentConfig struct {
	// ID is the sandbox's id.
	ID string `json:"id"`
	// State is the state at create (EncodeState).
	State json.RawMessage `json:"state"`
	// DNSUpstreams are the resolvers allowed names are forwarded to.
	DNSUpstreams []string `json:"dnsUpstreams"`
	// Roots (PEM) verify upstream TLS servers for the credential proxy.
	Roots []byte `json:"roots,omitempty"`
	// Mark is the socket mark of the agent's own connections.
	Mark uint32 `json:"mark"`
	// ControlPort is the agent's HTTPS port on the Pod's address.
	ControlPort uint16 `json:"controlPort"`
	// Key seals the vault in State and in every push.
	Key vault.Key `json:"-"`
	// KeyHex is Key on the wire (hex).
	KeyHex string `json:"key"`
	// Token authenticates the server to the agent.
	Token string `json:"token"`
	// CertPEM and KeyPEM are the agent's TLS certificate and key.
	CertPEM []byte `json:"cert"`
	KeyPEM  []byte `json:"certKey"`
}

// wireState is a State on the wire: the policy, and the vault and CA
// sealed with the agent's key (absent without a credential proxy).
type wireState struct {
	Policy *policy.Policy `json:"policy"`
	Sealed []byte         `json:"sealed,omitempty"`
}

// EncodeState is st on the wire (and in AgentConfig.State), its vault and
// CA sealed with key for sandbox id.
//
// # Errors
// When sealing fails.
func EncodeState(key vault.Key, id string, st State) ([]byte, error) {
	w := wireState{Policy: st.Policy}
	if st.Vault != nil {
		b, err := SealState(key, id, st.Vault, st.CA)
		if err != nil {
			return nil, err
		}
		w.Sealed = b
	}
	return json.Marshal(w)
}

// decodeState reads what EncodeState wrote.
func decodeState(key vault.Key, id string, b []byte) (State, error) {
	var w wireState
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&w); err != nil {
		return State{}, fmt.Errorf("%w: egress state: %s", errdefs.ErrInvalid, errdefs.DescribeJSON(err))
	}
	st := State{Policy: w.Policy}
	if w.Policy != nil {
		n, err := policy.Normalize(*w.Policy)
		if err != nil {
			return State{}, fmt.Errorf("%w: egress state: policy: %v", errdefs.ErrInvalid, err)
		}
		st.Policy = &n
	}
	if w.Sealed != nil {
		v, ca, err := OpenState(key, id, w.Sealed)
		if err != nil {
			return State{}, err
		}
		st.Vault, st.CA = v, ca
	}
	return st, nil
}

// ParseAgentConfig reads an agent's configuration file.
//
// # Errors
// When b is not a complete configuration.
func ParseAgentConfig(b []byte) (*AgentConfig, error) {
	var c AgentConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("egress agent config: %s", errdefs.DescribeJSON(err))
	}
	k, err := hexKey(c.KeyHex)
	if err != nil {
		return nil, err
	}
	c.Key = k
	if c.ID == "" || c.Token == "" || c.ControlPort == 0 || len(c.DNSUpstreams) == 0 {
		return nil, errors.New("egress agent config: id, token, controlPort and dnsUpstreams are required")
	}
	return &c, nil
}

func hexKey(s string) (vault.Key, error) {
	var k vault.Key
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(k) {
		return k, errors.New("egress agent config: key: want 64 hex digits")
	}
	copy(k[:], b)
	return k, nil
}

// Manager returns the agent's Manager: the config's upstreams and roots
// (nothing else is trusted), its mark, its control port guarded, its
// namespace's packet filter programmed through fw (nil: NFTables).
//
// # Errors
// As NewManager's.
func (c *AgentConfig) Manager(logger *slog.Logger, fw FirewallBackend) (*Manager, error) {
	// Only the configured roots: the agent's image has no trust store of
	// its own, and none at all fails every intercepted upstream (closed).
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(c.Roots)
	return NewManager(Options{DNSUpstreams: c.DNSUpstreams, RootCAs: roots, SystemBundle: []byte{},
		Mark: c.Mark, GuardPorts: []uint16{c.ControlPort}, Firewall: fw, Logger: logger})
}

// Controller returns the controller of the config's state.
//
// # Errors
// When the state cannot be opened (another key, corrupted).
func (c *AgentConfig) Controller(m *Manager) (*Controller, error) {
	st, err := decodeState(c.Key, c.ID, c.State)
	if err != nil {
		return nil, err
	}
	return m.New(c.ID, Config{Policy: st.Policy, Vault: st.Vault, CA: st.CA})
}

// Agent serves a controller's control API (PUT AgentPath) to the server.
type Agent struct {
	cfg *AgentConfig
	c   *Controller
	mu  sync.Mutex // one push at a time
}

// NewAgent serves controller c, configured by cfg.
func NewAgent(cfg *AgentConfig, c *Controller) *Agent { return &Agent{cfg: cfg, c: c} }

// TLSConfig is the agent's server TLS configuration.
//
// # Errors
// When the certificate or key does not parse.
func (a *Agent) TLSConfig() (*tls.Config, error) {
	cert, err := tls.X509KeyPair(a.cfg.CertPEM, a.cfg.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("egress agent: TLS certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}, nil
}

// ServeHTTP implements http.Handler: PUT AgentPath with the bearer token
// puts the state in force (204); anything else is refused.
func (a *Agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(a.cfg.Token)) != 1 {
		errdefs.Write(w, fmt.Errorf("%w: the egress agent needs the sandbox's agent token", errdefs.ErrUnauthorized))
		return
	}
	if r.URL.Path != AgentPath || r.Method != http.MethodPut {
		errdefs.Write(w, fmt.Errorf("%w: the egress agent serves only PUT %s", errdefs.ErrNotFound, AgentPath))
		return
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxAgentBody+1))
	if err != nil || len(b) > maxAgentBody {
		errdefs.Write(w, fmt.Errorf("%w: egress state: unreadable or larger than %d bytes", errdefs.ErrInvalid, maxAgentBody))
		return
	}
	if err := a.Apply(b); err != nil {
		errdefs.Write(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Apply puts an encoded state in force: the vault's content replaced (the
// first vault of an agent made without one, a pool member's at claim,
// starts its credential proxy), the policy set (the firewall replaced,
// denied connections cut).
//
// # Errors
// When the state does not decode, or drops the vault the agent has, or
// the proxy or the firewall cannot be set up.
func (a *Agent) Apply(b []byte) error {
	st, err := decodeState(a.cfg.Key, a.cfg.ID, b)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if st.Vault == nil {
		if a.c.Vault() != nil {
			return fmt.Errorf("%w: egress state: the sandbox has a credential vault, which stays once given (an empty one injects nothing)", errdefs.ErrInvalid)
		}
	} else if err := a.c.useVault(st.Vault, st.CA); err != nil {
		return err
	}
	if err := a.c.SetPolicy(st.Policy); errors.Is(err, xt.ErrFull) {
		// The policy's rules do not fit the netstack's tables: the
		// user's to change, and said as it is.
		return fmt.Errorf("%w: egress state: %v", errdefs.ErrInvalid, err)
	} else if err != nil {
		return err
	}
	return nil
}

// AgentClient is a Remote: it pushes states to an agent over HTTPS,
// pinning the agent's certificate and sending its token.
type AgentClient struct {
	url    string
	id     string
	key    vault.Key
	token  string
	client *http.Client
}

var _ Remote = (*AgentClient)(nil)

// NewAgentClient returns a client of the agent at addr ("ip:port") whose
// configuration is cfg (the server keeps it in the sandbox's Secret).
//
// # Errors
// When cfg's certificate does not parse.
func NewAgentClient(addr string, cfg *AgentConfig) (*AgentClient, error) {
	blk, _ := pem.Decode(cfg.CertPEM)
	if blk == nil {
		return nil, errors.New("egress agent: no PEM certificate in its config")
	}
	pin := sha256.Sum256(blk.Bytes)
	tr := &http.Transport{
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS13,
			// The agent's certificate is not a CA's: it is trusted by its
			// fingerprint, which the server made and keeps.
			InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("egress agent: no certificate")
				}
				if sha256.Sum256(cs.PeerCertificates[0].Raw) != pin {
					return errors.New("egress agent: the certificate is not the sandbox's agent's")
				}
				return nil
			},
		},
		IdleConnTimeout: 30 * time.Second,
	}
	return &AgentClient{url: "https://" + addr + AgentPath, id: cfg.ID, key: cfg.Key, token: cfg.Token,
		client: &http.Client{Transport: tr}}, nil
}

// Push implements Remote.
//
// # Errors
// errdefs.ErrUnavailable when the agent does not answer or refuses, with
// its reason.
func (c *AgentClient) Push(ctx context.Context, st State) error {
	b, err := EncodeState(c.key, c.id, st)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: sandbox %s: its egress agent does not answer: %v", errdefs.ErrUnavailable, c.id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%w: sandbox %s: its egress agent refused the state (%s): %s", errdefs.ErrUnavailable, c.id, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// CloseIdleConnections drops the client's idle connections.
func (c *AgentClient) CloseIdleConnections() { c.client.CloseIdleConnections() }

// NewAgentConfig makes the configuration of the agent of c's sandbox, for
// its current state: a fresh key, token and self-signed certificate; the
// agent forwards allowed names to dnsUpstreams (nil: the Manager's).
//
// # Errors
// When randomness or sealing fails.
func (c *Controller) NewAgentConfig(controlPort uint16, mark uint32, dnsUpstreams []string) (*AgentConfig, error) {
	id := c.id
	if len(dnsUpstreams) == 0 {
		dnsUpstreams = c.m.DNSUpstreams()
	}
	cfg := &AgentConfig{ID: id, DNSUpstreams: dnsUpstreams, Roots: c.m.Roots(), Mark: mark, ControlPort: controlPort}
	if _, err := rand.Read(cfg.Key[:]); err != nil {
		return nil, err
	}
	cfg.KeyHex = hex.EncodeToString(cfg.Key[:])
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	cfg.Token = hex.EncodeToString(tok)
	st, err := EncodeState(cfg.Key, id, c.State())
	if err != nil {
		return nil, err
	}
	cfg.State = st
	if cfg.CertPEM, cfg.KeyPEM, err = agentCert(id); err != nil {
		return nil, err
	}
	return cfg, nil
}

// agentCert makes a self-signed P-256 certificate for the agent of
// sandbox id (trusted by its fingerprint only).
func agentCert(id string) (certPEM, keyPEM []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "hybox-egress " + id},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"hybox-egress"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}
