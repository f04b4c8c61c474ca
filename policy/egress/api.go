package egress

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
	"github.com/hybox-dev/hybox/vault"
)

// MaxAPIBody caps an egress API request body.
const MaxAPIBody = 1 << 20

// Records is where the egress API keeps what it changes, beside the
// controller's live state: the sandbox's record (its policy) and its
// sealed vault. The server implements it over its database.
type Records interface {
	// Policy returns the sandbox's stored policy; nil means unrestricted.
	Policy() (*policy.Policy, error)
	// SavePolicy stores p (nil: unrestricted) as the sandbox's policy.
	SavePolicy(p *policy.Policy) error
	// SaveVault persists the controller's vault and CA after a change.
	SaveVault(c *Controller) error
}

// API serves one sandbox's egress API (the operations tagged egress in the
// protocol document): /policy and /credential-vault. Every change is in
// force in the controller, and stored, before the answer.
//
// Callers serialise requests for one sandbox (the server holds the
// sandbox's lock around ServeHTTP).
type API struct {
	c       *Controller
	records Records
	mode    api.PolicyStatusEnforcementMode
	mux     *http.ServeMux
}

// NewAPI returns the egress API of controller c. container says the
// sandbox is a container (enforced by DNS proxy and firewall) rather than a
// wasm sandbox (requests made by the host).
func NewAPI(c *Controller, records Records, container bool) *API {
	a := &API{c: c, records: records, mode: api.PolicyStatusEnforcementModeHost}
	if container {
		a.mode = api.PolicyStatusEnforcementModeDNSNft
	}
	m := http.NewServeMux()
	m.HandleFunc("GET /policy", a.getPolicy)
	m.HandleFunc("POST /policy", a.setPolicy)
	m.HandleFunc("PUT /policy", a.setPolicy)
	m.HandleFunc("PATCH /policy", a.patchPolicy)
	m.HandleFunc("DELETE /policy", a.removeRules)
	m.HandleFunc("GET /credential-vault", a.vault(a.getVault))
	m.HandleFunc("POST /credential-vault", a.vault(a.createVault))
	m.HandleFunc("PUT /credential-vault", a.vault(a.createVault))
	m.HandleFunc("PATCH /credential-vault", a.vault(a.patchVault))
	m.HandleFunc("DELETE /credential-vault", a.vault(a.deleteVault))
	m.HandleFunc("GET /credential-vault/credentials", a.vault(a.listCredentials))
	m.HandleFunc("GET /credential-vault/credentials/{name}", a.vault(a.getCredential))
	m.HandleFunc("GET /credential-vault/bindings", a.vault(a.listBindings))
	m.HandleFunc("GET /credential-vault/bindings/{name}", a.vault(a.getBinding))
	// Known paths with another method, and everything else.
	const all, get = "GET, HEAD, POST, PUT, PATCH, DELETE", "GET, HEAD"
	for p, allow := range map[string]string{"/policy": all, "/credential-vault": all,
		"/credential-vault/credentials": get, "/credential-vault/credentials/{name}": get,
		"/credential-vault/bindings": get, "/credential-vault/bindings/{name}": get} {
		m.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeErr(w, errdefs.New(api.ErrorCodeMETHODNOTALLOWED, "method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow))
		})
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, errdefs.New(api.ErrorCodeNOTFOUND, "no route %s %s in the egress API", r.Method, r.URL.Path))
	})
	a.mux = m
	return a
}

// Patterns lists the routes the API serves ("GET /policy", ...), for the
// check against the protocol document.
func Patterns() []string {
	return []string{
		"GET /policy", "POST /policy", "PUT /policy", "PATCH /policy", "DELETE /policy",
		"GET /credential-vault", "POST /credential-vault", "PUT /credential-vault",
		"PATCH /credential-vault", "DELETE /credential-vault",
		"GET /credential-vault/credentials", "GET /credential-vault/credentials/{name}",
		"GET /credential-vault/bindings", "GET /credential-vault/bindings/{name}",
	}
}

// ServeHTTP implements http.Handler. A trailing slash is ignored.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := strings.TrimSuffix(r.URL.Path, "/"); p != r.URL.Path && p != "" {
		r2 := r.Clone(r.Context())
		r2.URL.Path = p
		r = r2
	}
	a.mux.ServeHTTP(w, r)
}

func (a *API) getPolicy(w http.ResponseWriter, _ *http.Request) {
	a.answerPolicy(w)
}

func (a *API) setPolicy(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	if string(bytes.TrimSpace(body)) == "null" {
		writeErr(w, errdefs.New(api.ErrorCodeINVALIDREQUEST, "the policy must be a JSON object, not null"))
		return
	}
	p, err := policy.Parse(body)
	if err != nil {
		writeErr(w, err)
		return
	}
	a.replace(w, &p)
}

func (a *API) patchPolicy(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	rules, err := policy.ParseRules(body)
	if err != nil {
		writeErr(w, err)
		return
	}
	cur, err := a.current()
	if err != nil {
		writeErr(w, err)
		return
	}
	p := policy.Patch(cur, rules)
	if len(p.Egress) > policy.MaxRules {
		writeErr(w, errdefs.New(api.ErrorCodeINVALIDREQUEST, "egress: %d rules after the patch, more than the limit of %d", len(p.Egress), policy.MaxRules))
		return
	}
	a.replace(w, &p)
}

func (a *API) removeRules(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	var targets []string
	if err := json.Unmarshal(body, &targets); err != nil {
		writeErr(w, errdefs.New(api.ErrorCodeINVALIDREQUEST, "DELETE /policy takes a JSON array of targets: %s", errdefs.DescribeJSON(err)))
		return
	}
	if targets == nil {
		writeErr(w, errdefs.New(api.ErrorCodeINVALIDREQUEST, "DELETE /policy takes a JSON array of targets, not null"))
		return
	}
	for i, t := range targets {
		if t == "" {
			writeErr(w, errdefs.New(api.ErrorCodeINVALIDREQUEST, "targets[%d] must be a non-empty target, not empty or null", i))
			return
		}
	}
	cur, err := a.current()
	if err != nil {
		writeErr(w, err)
		return
	}
	p := policy.Remove(cur, targets)
	a.replace(w, &p)
}

// current is the policy a PATCH or DELETE starts from: an unrestricted
// sandbox starts from "allow everything".
func (a *API) current() (policy.Policy, error) {
	p, err := a.records.Policy()
	if err != nil || p == nil {
		return policy.Policy{DefaultAction: policy.Allow, Egress: []policy.Rule{}}, err
	}
	return *p, nil
}

// replace makes next the sandbox's policy: stored, then in force. When the
// controller refuses it, the stored policy is put back.
func (a *API) replace(w http.ResponseWriter, next *policy.Policy) {
	prev, err := a.records.Policy()
	if err != nil {
		writeErr(w, err)
		return
	}
	if err := a.records.SavePolicy(next); err != nil {
		writeErr(w, err)
		return
	}
	if err := a.c.SetPolicy(next); err != nil {
		_ = a.records.SavePolicy(prev)
		_ = a.c.SetPolicy(prev)
		writeErr(w, err)
		return
	}
	a.answerPolicy(w)
}

func (a *API) answerPolicy(w http.ResponseWriter) {
	p, err := a.records.Policy()
	if err != nil {
		writeErr(w, err)
		return
	}
	st := api.PolicyStatus{Status: api.PolicyStatusStatusOk, Mode: api.PolicyStatusMode(a.c.Policy().Mode()), EnforcementMode: a.mode}
	if p == nil {
		st.Policy = policy.Policy{DefaultAction: policy.Allow, Egress: []policy.Rule{}}
		st.Reason = "no network policy: egress is unrestricted"
	} else {
		st.Policy = *p
	}
	writeJSON(w, http.StatusOK, st)
}

// vault wraps a vault route: the sandbox must have a credential proxy.
func (a *API) vault(h func(http.ResponseWriter, *http.Request, *vault.Vault)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := a.c.Vault()
		if v == nil {
			writeErr(w, errdefs.New(api.ErrorCodeCREDENTIALPROXYDISABLED,
				"the credential vault is off for this sandbox: create it with credentialProxy.enabled and a networkPolicy"))
			return
		}
		h(w, r, v)
	}
}

// hostAllowed refuses a binding host the network policy does not allow.
func (a *API) hostAllowed(host string) error {
	name := host
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		name = "subdomain." + rest
	}
	if d := a.c.Policy().Name(name); !d.Allow {
		return errdefs.New(api.ErrorCodeINVALIDREQUEST, "binding host %s is not allowed by the network policy (%s)", host, d.Reason())
	}
	return nil
}

func (a *API) getVault(w http.ResponseWriter, _ *http.Request, v *vault.Vault) {
	st, err := v.Get()
	answer(w, http.StatusOK, st, err)
}

func (a *API) createVault(w http.ResponseWriter, r *http.Request, v *vault.Vault) {
	var req vault.CreateRequest
	if err := decodeStrict(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if _, err := v.Get(); err == nil && r.Method == http.MethodPost {
		writeErr(w, errdefs.New(api.ErrorCodeVAULTEXISTS, "the credential vault already exists: PATCH it, or DELETE it first"))
		return
	}
	st, err := v.Create(req, a.hostAllowed)
	if err == nil {
		err = a.saveVault()
	}
	answer(w, http.StatusCreated, st, err)
}

func (a *API) patchVault(w http.ResponseWriter, r *http.Request, v *vault.Vault) {
	var req vault.PatchRequest
	if err := decodeStrict(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	st, err := v.Patch(req, a.hostAllowed)
	if err == nil {
		err = a.saveVault()
	}
	answer(w, http.StatusOK, st, err)
}

func (a *API) deleteVault(w http.ResponseWriter, _ *http.Request, v *vault.Vault) {
	err := v.Delete()
	if err == nil {
		err = a.saveVault()
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) listCredentials(w http.ResponseWriter, _ *http.Request, v *vault.Vault) {
	st, err := v.Get()
	answer(w, http.StatusOK, api.VaultCredentialList{Revision: st.Revision, Credentials: st.Credentials}, err)
}

func (a *API) getCredential(w http.ResponseWriter, r *http.Request, v *vault.Vault) {
	ci, err := v.Credential(r.PathValue("name"))
	answer(w, http.StatusOK, ci, err)
}

func (a *API) listBindings(w http.ResponseWriter, _ *http.Request, v *vault.Vault) {
	st, err := v.Get()
	answer(w, http.StatusOK, api.VaultBindingList{Revision: st.Revision, Bindings: st.Bindings}, err)
}

func (a *API) getBinding(w http.ResponseWriter, r *http.Request, v *vault.Vault) {
	bi, err := v.Binding(r.PathValue("name"))
	answer(w, http.StatusOK, bi, err)
}

// saveVault stores the vault after a change and, for a controller
// attached to an agent, puts the change in force there.
func (a *API) saveVault() error {
	if err := a.records.SaveVault(a.c); err != nil {
		return err
	}
	return a.c.vaultChanged()
}

// answer writes v with status, or err.
func answer[T any](w http.ResponseWriter, status int, v T, err error) {
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, status, v)
}

// readBody reads a required JSON body of at most MaxAPIBody bytes.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxAPIBody+1))
	if err != nil {
		return nil, errdefs.New(api.ErrorCodeINVALIDREQUEST, "read body: %v", err)
	}
	if len(b) > MaxAPIBody {
		return nil, errdefs.New(api.ErrorCodePAYLOADTOOLARGE, "the body is larger than %d bytes", MaxAPIBody)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errdefs.New(api.ErrorCodeINVALIDREQUEST, "a JSON body is required")
	}
	return b, nil
}

// decodeStrict reads a required body into v, refusing unknown fields.
func decodeStrict(r *http.Request, v any) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if string(bytes.TrimSpace(b)) == "null" {
		return errdefs.New(api.ErrorCodeINVALIDREQUEST, "the request body must be a JSON object, not null")
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return errdefs.New(api.ErrorCodeINVALIDREQUEST, "%s", errdefs.DescribeJSON(err))
	}
	if d.More() {
		return errdefs.New(api.ErrorCodeINVALIDREQUEST, "malformed JSON: more than one value")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeErr answers through errdefs.HTTP, the one mapping of errors to
// statuses.
func writeErr(w http.ResponseWriter, err error) { errdefs.Write(w, err) }
