package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
)

// egressPort is the sandbox port of the egress API (PROTOCOL.md section 4).
// hybox serves it from the server for every backend: the sandbox cannot
// reach it, so the workload cannot change its own policy.
const egressPort = 18080

// headerEgressAuth carries a sandbox's egress token.
const headerEgressAuth = "OPENSANDBOX-EGRESS-AUTH"

// egressToken is derived from the sandbox's access token, so it needs no
// storage of its own and is unique per sandbox.
func egressToken(r *Record) string {
	m := hmac.New(sha256.New, []byte(r.Token))
	m.Write([]byte("hybox egress api"))
	return hex.EncodeToString(m.Sum(nil))
}

// networkPolicyOf reads a create request's networkPolicy. Absent, null and
// {} mean unrestricted.
func networkPolicyOf(p *api.NetworkPolicy) (*policy.Policy, error) {
	if p == nil || (p.DefaultAction == "" && p.Egress == nil) {
		return nil, nil
	}
	n, err := policy.Normalize(*p)
	if err != nil {
		return nil, badRequest("networkPolicy: " + err.Error())
	}
	return &n, nil
}

// newEgress builds a sandbox's egress controller, loading its vault and CA
// from the store, or making new ones when fresh is set.
func (s *Server) newEgress(r *Record, fresh bool) (*egress.Controller, error) {
	cfg := egress.Config{Policy: r.NetworkPolicy}
	if r.CredentialProxy {
		if s.opts.VaultKey == nil {
			return nil, errdefs.New(api.ErrorCodeUNAVAILABLE,
				"the credential vault is off on this server: it needs a key (vault.key_file or HYBOX_VAULT_KEY)")
		}
		var (
			v   *vault.Vault
			ca  *tproxy.CA
			err error
		)
		if fresh {
			v = vault.New()
			if ca, err = tproxy.NewCA("hybox sandbox " + r.ID); err != nil {
				return nil, err
			}
			if err := s.saveEgress(r, v, ca); err != nil {
				return nil, err
			}
		} else {
			b, err := s.store.getEgress(r)
			if err != nil {
				return nil, err
			}
			if b == nil {
				return nil, errdefs.New(api.ErrorCodeUNAVAILABLE, "sandbox %s: its credential vault is missing from the database", r.ID)
			}
			if v, ca, err = egress.OpenState(*s.opts.VaultKey, r.ID, b); err != nil {
				return nil, err
			}
		}
		cfg.Vault, cfg.CA = v, ca
	}
	return s.opts.Egress.New(r.ID, cfg)
}

// saveEgress seals and stores a sandbox's vault and CA.
func (s *Server) saveEgress(r *Record, v *vault.Vault, ca *tproxy.CA) error {
	b, err := egress.SealState(*s.opts.VaultKey, r.ID, v, ca)
	if err != nil {
		return err
	}
	return s.store.putEgress(r, b)
}

// egressOf returns a live sandbox's egress controller.
func (s *Server) egressOf(id string) (*egress.Controller, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.egress[id]
	return e, ok
}

// egressAPI serves the egress API of sandbox id (PROTOCOL.md section 4)
// under the sandbox's lock; the API itself lives in policy/egress.
func (s *Server) egressAPI(id string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, ok := s.egressOf(id)
		if !ok {
			errdefs.Write(w, errdefs.New(api.ErrorCodeUNAVAILABLE, "sandbox %s is not running", id))
			return
		}
		unlock := s.lock(id)
		defer unlock()
		rec, err := s.store.get(id)
		if err != nil {
			errdefs.Write(w, err)
			return
		}
		if err := s.refreshEgress(e, rec); err != nil {
			errdefs.Write(w, err)
			return
		}
		egress.NewAPI(e, egressRecords{s, rec}, rec.Runtime != "wasm").ServeHTTP(w, r)
	})
}

// refreshEgress brings the controller of a shared sandbox up to what the
// store holds before its egress API changes anything: another replica may
// have changed its policy or vault since this one adopted it, and a change
// made from a stale vault would drop that replica's credentials.
func (s *Server) refreshEgress(e *egress.Controller, rec *Record) error {
	if !s.store.isShared(rec) {
		return nil // this replica is the only writer
	}
	if rec.CredentialProxy && s.opts.VaultKey != nil {
		b, err := s.store.getEgress(rec)
		if err != nil {
			return err
		}
		if b != nil {
			v, _, err := egress.OpenState(*s.opts.VaultKey, rec.ID, b)
			if err != nil {
				return err
			}
			e.Vault().Replace(v)
		}
	}
	return e.SetPolicy(rec.NetworkPolicy)
}

// egressRecords keeps the egress API's changes in a sandbox's record and
// the egress bucket.
type egressRecords struct {
	s   *Server
	rec *Record
}

func (e egressRecords) Policy() (*policy.Policy, error) { return e.rec.NetworkPolicy, nil }

func (e egressRecords) SavePolicy(p *policy.Policy) error {
	e.rec.NetworkPolicy = p
	return e.s.store.put(e.rec)
}

func (e egressRecords) SaveVault(c *egress.Controller) error {
	return e.s.saveEgress(e.rec, c.Vault(), c.CA())
}
