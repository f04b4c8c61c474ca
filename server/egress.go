package server

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
)

// egressPort is the sandbox port of the egress API (PROTOCOL.md section 4).
// hybox serves it from the server for every backend: the sandbox cannot
// reach it, so the workload cannot change its own policy.
const egressPort = 18080

// headerEgressAuth carries a sandbox's egress token.
const headerEgressAuth = "OPENSANDBOX-EGRESS-AUTH"

// maxEgressBody caps an egress API request body.
const maxEgressBody = 1 << 20

// egressToken is derived from the sandbox's access token, so it needs no
// storage of its own and is unique per sandbox.
func egressToken(r *Record) string {
	m := hmac.New(sha256.New, []byte(r.Token))
	m.Write([]byte("hybox egress api"))
	return hex.EncodeToString(m.Sum(nil))
}

// parseNetworkPolicy reads a create request's networkPolicy. Absent, null
// and {} mean unrestricted.
func parseNetworkPolicy(raw json.RawMessage) (*policy.Policy, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(t, &probe); err != nil {
		return nil, badRequest("networkPolicy must be an object: " + err.Error())
	}
	if len(probe) == 0 {
		return nil, nil
	}
	p, err := policy.Parse(t)
	if err != nil {
		return nil, badRequest("networkPolicy: " + err.Error())
	}
	return &p, nil
}

// parseCredentialProxy reads a create request's credentialProxy.
func parseCredentialProxy(raw json.RawMessage) (bool, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return false, nil
	}
	var cp struct {
		Enabled *bool `json:"enabled"`
	}
	if err := json.Unmarshal(t, &cp); err != nil {
		return false, badRequest("credentialProxy must be {\"enabled\": true|false}: " + err.Error())
	}
	return cp.Enabled != nil && *cp.Enabled, nil
}

// sealedEgress is what the egress bucket holds for a sandbox with a
// credential proxy: the vault and the CA key sealed with the vault key.
type sealedEgress struct {
	Vault  []byte `json:"vault"`
	CACert []byte `json:"caCert"`
	CAKey  []byte `json:"caKey"`
}

// newEgress builds a sandbox's egress controller, loading its vault and CA
// from the store, or making new ones when fresh is set.
func (s *Server) newEgress(r *Record, fresh bool) (*egress.Sandbox, error) {
	cfg := egress.Config{Policy: r.NetworkPolicy}
	if r.CredentialProxy {
		if s.opts.VaultKey == nil {
			return nil, &apiError{http.StatusServiceUnavailable, codeUnavailable,
				"the credential vault is off on this server: it needs a key (vault.key_file or HYBOX_VAULT_KEY)"}
		}
		v := vault.New()
		var ca *tproxy.CA
		if fresh {
			var err error
			if ca, err = tproxy.NewCA("hybox sandbox " + r.ID); err != nil {
				return nil, err
			}
			if err := s.saveEgress(r.ID, v, ca); err != nil {
				return nil, err
			}
		} else {
			b, err := s.store.getEgress(r.ID)
			if err != nil {
				return nil, err
			}
			if b == nil {
				return nil, fmt.Errorf("sandbox %s: its credential vault is missing from the database", r.ID)
			}
			var se sealedEgress
			if err := json.Unmarshal(b, &se); err != nil {
				return nil, fmt.Errorf("sandbox %s: credential vault: %w", r.ID, err)
			}
			if err := v.UnmarshalSealed(*s.opts.VaultKey, se.Vault); err != nil {
				return nil, fmt.Errorf("sandbox %s: credential vault: %w", r.ID, err)
			}
			key, err := vault.Open(*s.opts.VaultKey, se.CAKey, []byte(r.ID))
			if err != nil {
				return nil, fmt.Errorf("sandbox %s: CA key: %w", r.ID, err)
			}
			if ca, err = tproxy.LoadCA(se.CACert, key); err != nil {
				return nil, fmt.Errorf("sandbox %s: CA: %w", r.ID, err)
			}
		}
		cfg.Vault, cfg.CA = v, ca
	}
	return s.opts.Egress.New(r.ID, cfg)
}

// saveEgress seals and stores a sandbox's vault and CA.
func (s *Server) saveEgress(id string, v *vault.Vault, ca *tproxy.CA) error {
	sv, err := v.MarshalSealed(*s.opts.VaultKey)
	if err != nil {
		return err
	}
	key, err := vault.Seal(*s.opts.VaultKey, ca.KeyPEM(), []byte(id))
	if err != nil {
		return err
	}
	b, err := json.Marshal(sealedEgress{Vault: sv, CACert: ca.CertPEM(), CAKey: key})
	if err != nil {
		return err
	}
	return s.store.putEgress(id, b)
}

// egressOf returns a live sandbox's egress controller.
func (s *Server) egressOf(id string) (*egress.Sandbox, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.egress[id]
	return e, ok
}

// egressAPI serves the egress API of sandbox id (PROTOCOL.md section 4).
func (s *Server) egressAPI(id string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, ok := s.egressOf(id)
		if !ok {
			writeEgressErr(w, &apiError{http.StatusServiceUnavailable, codeUnavailable, "sandbox " + id + " is not running"})
			return
		}
		unlock := s.lock(id)
		defer unlock()
		rec, err := s.store.get(id)
		if err != nil {
			writeEgressErr(w, err)
			return
		}
		path := strings.TrimSuffix(r.URL.Path, "/")
		switch {
		case path == "/policy":
			s.servePolicy(w, r, rec, e)
		case path == "/credential-vault" || strings.HasPrefix(path, "/credential-vault/"):
			s.serveVault(w, r, rec, e, strings.TrimPrefix(path, "/credential-vault"))
		default:
			writeEgressErr(w, &apiError{http.StatusNotFound, codeRouteNotFound, "no route " + r.Method + " " + r.URL.Path + " in the egress API"})
		}
	})
}

// policyStatus is the answer of every /policy call.
type policyStatus struct {
	Status          string        `json:"status"`
	Mode            string        `json:"mode"`
	EnforcementMode string        `json:"enforcementMode"`
	Reason          string        `json:"reason,omitempty"`
	Policy          policy.Policy `json:"policy"`
}

func (s *Server) servePolicy(w http.ResponseWriter, r *http.Request, rec *Record, e *egress.Sandbox) {
	var next *policy.Policy
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost, http.MethodPut:
		body, err := readEgressBody(r)
		if err != nil {
			writeEgressErr(w, err)
			return
		}
		p, err := policy.Parse(body)
		if err != nil {
			writeEgressErr(w, badRequest(err.Error()))
			return
		}
		next = &p
	case http.MethodPatch:
		body, err := readEgressBody(r)
		if err != nil {
			writeEgressErr(w, err)
			return
		}
		rules, err := policy.ParseRules(body)
		if err != nil {
			writeEgressErr(w, badRequest(err.Error()))
			return
		}
		p := policy.Patch(currentPolicy(rec), rules)
		next = &p
	case http.MethodDelete:
		body, err := readEgressBody(r)
		if err != nil {
			writeEgressErr(w, err)
			return
		}
		var targets []string
		if err := json.Unmarshal(body, &targets); err != nil {
			writeEgressErr(w, badRequest("DELETE /policy takes a JSON array of targets: "+err.Error()))
			return
		}
		p := policy.Remove(currentPolicy(rec), targets)
		next = &p
	default:
		writeEgressErr(w, &apiError{http.StatusMethodNotAllowed, codeMethodNotAllow, "method " + r.Method + " is not allowed on /policy"})
		return
	}
	if next != nil {
		prev := rec.NetworkPolicy
		rec.NetworkPolicy = next
		if err := s.store.put(rec); err != nil {
			writeEgressErr(w, err)
			return
		}
		if err := e.SetPolicy(next); err != nil {
			rec.NetworkPolicy = prev
			_ = s.store.put(rec)
			_ = e.SetPolicy(prev)
			writeEgressErr(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, s.policyStatus(rec, e))
}

// currentPolicy is the policy a PATCH or DELETE starts from: an
// unrestricted sandbox starts from "allow everything".
func currentPolicy(rec *Record) policy.Policy {
	if rec.NetworkPolicy == nil {
		return policy.Policy{DefaultAction: policy.Allow, Egress: []policy.Rule{}}
	}
	return *rec.NetworkPolicy
}

func (s *Server) policyStatus(rec *Record, e *egress.Sandbox) policyStatus {
	c := e.Policy()
	mode := "dns+nft"
	if rec.Runtime == "wasm" {
		mode = "host"
	}
	st := policyStatus{Status: "ok", Mode: c.Mode(), EnforcementMode: mode, Policy: currentPolicy(rec)}
	if rec.NetworkPolicy == nil {
		st.Reason = "no network policy: egress is unrestricted"
	}
	return st
}

func (s *Server) serveVault(w http.ResponseWriter, r *http.Request, rec *Record, e *egress.Sandbox, sub string) {
	v := e.Vault()
	if v == nil {
		writeEgressErr(w, &apiError{http.StatusConflict, "CREDENTIAL_PROXY_DISABLED",
			"the credential vault is off for this sandbox: create it with credentialProxy.enabled and a networkPolicy"})
		return
	}
	hostAllowed := func(host string) error {
		name := host
		if rest, ok := strings.CutPrefix(host, "*."); ok {
			name = "subdomain." + rest
		}
		if d := e.Policy().Name(name); !d.Allow {
			return fmt.Errorf("binding host %s is not allowed by the network policy (%s)", host, d.Reason())
		}
		return nil
	}
	var (
		out     any
		status  = http.StatusOK
		err     error
		mutated bool
	)
	switch {
	case sub == "" && r.Method == http.MethodGet:
		out, err = v.Get()
	case sub == "" && (r.Method == http.MethodPost || r.Method == http.MethodPut):
		var body []byte
		if body, err = readEgressBody(r); err == nil {
			var req vault.CreateRequest
			if err = strictJSON(body, &req); err == nil {
				if _, gerr := v.Get(); gerr == nil && r.Method == http.MethodPost {
					err = &apiError{http.StatusConflict, "VAULT_EXISTS", "the credential vault already exists: PATCH it, or DELETE it first"}
				} else {
					out, err = v.Create(req, hostAllowed)
					status, mutated = http.StatusCreated, true
				}
			}
		}
	case sub == "" && r.Method == http.MethodPatch:
		var body []byte
		if body, err = readEgressBody(r); err == nil {
			var req vault.PatchRequest
			if err = strictJSON(body, &req); err == nil {
				out, err = v.Patch(req, hostAllowed)
				mutated = true
			}
		}
	case sub == "" && r.Method == http.MethodDelete:
		err = v.Delete()
		status, mutated = http.StatusNoContent, true
	case sub == "/credentials" && r.Method == http.MethodGet:
		var st vault.State
		if st, err = v.Get(); err == nil {
			out = st.CredentialList()
		}
	case strings.HasPrefix(sub, "/credentials/") && r.Method == http.MethodGet:
		out, err = v.Credential(strings.TrimPrefix(sub, "/credentials/"))
	case sub == "/bindings" && r.Method == http.MethodGet:
		var st vault.State
		if st, err = v.Get(); err == nil {
			out = st.BindingList()
		}
	case strings.HasPrefix(sub, "/bindings/") && r.Method == http.MethodGet:
		out, err = v.Binding(strings.TrimPrefix(sub, "/bindings/"))
	default:
		err = &apiError{http.StatusNotFound, codeRouteNotFound, "no route " + r.Method + " /credential-vault" + sub}
	}
	if err == nil && mutated {
		if e2 := s.saveEgressOf(rec.ID, e); e2 != nil {
			err = e2
		}
	}
	if err != nil {
		writeEgressErr(w, err)
		return
	}
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, out)
}

// saveEgressOf persists a live sandbox's vault after a change.
func (s *Server) saveEgressOf(id string, e *egress.Sandbox) error {
	return s.saveEgress(id, e.Vault(), e.CA())
}

func readEgressBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxEgressBody+1))
	if err != nil {
		return nil, badRequest("read body: " + err.Error())
	}
	if len(b) > maxEgressBody {
		return nil, &apiError{http.StatusRequestEntityTooLarge, codePayloadTooLarge, fmt.Sprintf("the body is larger than %d bytes", maxEgressBody)}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, badRequest("a JSON body is required")
	}
	return b, nil
}

// strictJSON decodes one JSON value, refusing unknown fields.
func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return badRequest("malformed JSON: " + err.Error())
	}
	if d.More() {
		return badRequest("malformed JSON: more than one value")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeEgressErr maps egress and vault errors to {code,message}.
func writeEgressErr(w http.ResponseWriter, err error) {
	var ae *apiError
	status, code, msg := http.StatusInternalServerError, codeInternal, "internal error"
	switch {
	case errors.As(err, &ae):
		status, code, msg = ae.status, ae.code, ae.msg
	case errors.Is(err, vault.ErrNotFound):
		status, code, msg = http.StatusNotFound, "NOT_FOUND", err.Error()
	case errors.Is(err, vault.ErrRevisionConflict):
		status, code, msg = http.StatusConflict, "REVISION_CONFLICT", err.Error()
	case errors.Is(err, vault.ErrInvalid):
		status, code, msg = http.StatusBadRequest, codeInvalidRequest, err.Error()
	}
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}
