package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// EgressPort is the sandbox port of the egress API: the network policy and
// the credential vault of a sandbox.
const EgressPort = 18080

// EgressAuthHeader is the per-sandbox token header of the egress API; the
// endpoint of EgressPort returns it among its headers.
const EgressAuthHeader = "OPENSANDBOX-EGRESS-AUTH"

// Egress rule actions and policy modes.
const (
	ActionAllow = "allow"
	ActionDeny  = "deny"

	ModeAllowAll  = "allow_all" // no rule restricts anything
	ModeDenyAll   = "deny_all"  // everything is denied
	ModeEnforcing = "enforcing" // rules decide
)

// PolicyStatus is the answer of every egress policy call: the policy in
// force after the call and how it is enforced.
type PolicyStatus struct {
	Status string `json:"status"` // "ok"
	// Mode is ModeAllowAll, ModeDenyAll or ModeEnforcing.
	Mode string `json:"mode"`
	// EnforcementMode is "dns+nft" for containers, "host" for wasm guests.
	EnforcementMode string `json:"enforcementMode"`
	// Reason explains an unusual state, such as a sandbox without a policy.
	Reason string        `json:"reason,omitempty"`
	Policy NetworkPolicy `json:"policy"`

	// Raw is the JSON object the server sent.
	Raw json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes a policy status and keeps the raw object in Raw.
func (p *PolicyStatus) UnmarshalJSON(b []byte) error {
	type plain PolicyStatus
	var v plain
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = PolicyStatus(v)
	p.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// egress resolves the egress endpoint of a sandbox and returns a transport
// to it.
func (c *Client) egress(ctx context.Context, sandboxID string) (*transport, error) {
	ep, err := c.GetEndpoint(ctx, sandboxID, EgressPort)
	if err != nil {
		return nil, err
	}
	return c.endpointTransport(*ep)
}

// egressCall resolves the egress endpoint of a sandbox and performs r on it.
func (c *Client) egressCall(ctx context.Context, sandboxID string, r request, out any) error {
	t, err := c.egress(ctx, sandboxID)
	if err != nil {
		return err
	}
	return t.call(ctx, r, out)
}

func (c *Client) policyCall(ctx context.Context, sandboxID, method string, body any) (*PolicyStatus, error) {
	var st PolicyStatus
	if err := c.egressCall(ctx, sandboxID, request{method: method, path: "/policy", body: body}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// GetEgressPolicy returns the network policy of a sandbox. A sandbox
// created without one reports an empty policy with default action allow.
//
// # Errors
// An *APIError (unknown sandbox, sandbox not running), or a transport error.
func (c *Client) GetEgressPolicy(ctx context.Context, sandboxID string) (*PolicyStatus, error) {
	return c.policyCall(ctx, sandboxID, http.MethodGet, nil)
}

// SetEgressPolicy replaces the network policy of a sandbox (PUT /policy).
// An empty DefaultAction means deny.
//
// # Errors
// An *APIError (a bad target or action: status 400), or a transport error.
func (c *Client) SetEgressPolicy(ctx context.Context, sandboxID string, p NetworkPolicy) (*PolicyStatus, error) {
	if p.Egress == nil {
		p.Egress = []EgressRule{}
	}
	return c.policyCall(ctx, sandboxID, http.MethodPut, p)
}

// PatchEgressRules puts rules in front of a sandbox's policy (PATCH
// /policy): they take priority over the existing rules, and a rule replaces
// an existing rule with the same target.
//
// # Errors
// An *APIError (a bad target or action: status 400), or a transport error.
func (c *Client) PatchEgressRules(ctx context.Context, sandboxID string, rules []EgressRule) (*PolicyStatus, error) {
	if rules == nil {
		rules = []EgressRule{}
	}
	return c.policyCall(ctx, sandboxID, http.MethodPatch, rules)
}

// DeleteEgressRules removes the rules with these targets from a sandbox's
// policy (DELETE /policy).
//
// # Errors
// An *APIError, or a transport error.
func (c *Client) DeleteEgressRules(ctx context.Context, sandboxID string, targets []string) (*PolicyStatus, error) {
	if targets == nil {
		targets = []string{}
	}
	return c.policyCall(ctx, sandboxID, http.MethodDelete, targets)
}

// CredentialSourceInline is the only credential source type.
const CredentialSourceInline = "inline"

// CredentialSource is where a credential's value comes from. Value is
// write-only: the server never returns it. CredentialSource formats (fmt,
// any verb) without its value.
type CredentialSource struct {
	Type  string `json:"type,omitempty"` // CredentialSourceInline; empty means inline
	Value string `json:"value"`
}

// Format prints the source type and "[REDACTED]" in place of the value.
func (s CredentialSource) Format(f fmt.State, _ rune) {
	t := s.Type
	if t == "" {
		t = CredentialSourceInline
	}
	fmt.Fprintf(f, "{%s [REDACTED]}", t)
}

// VaultCredential is a named secret value as the client sends it.
type VaultCredential struct {
	Name   string           `json:"name"`
	Source CredentialSource `json:"source"`
}

// BindingMatch selects the requests a binding applies to. Empty Schemes
// means ["https"], empty Methods means GET, POST, PUT, PATCH and DELETE,
// empty Paths means ["/*"]; a path ending in "*" matches by prefix. Hosts
// are exact names or "*.suffix", and the network policy must allow them.
type BindingMatch struct {
	Schemes []string `json:"schemes,omitempty"`
	Ports   []int    `json:"ports,omitempty"`
	Hosts   []string `json:"hosts"`
	Methods []string `json:"methods,omitempty"`
	Paths   []string `json:"paths,omitempty"`
}

// Binding auth types.
const (
	AuthBearer        = "bearer"        // Authorization: Bearer <value>
	AuthBasic         = "basic"         // Authorization: Basic <value>
	AuthAPIKey        = "apiKey"        // header Name: <value>
	AuthCustomHeaders = "customHeaders" // each of Headers
	AuthPassthrough   = "passthrough"   // no header; substitutions only
)

// AuthHeader is one header of a customHeaders auth: Name gets the value of
// the named Credential.
type AuthHeader struct {
	Name       string `json:"name"`
	Credential string `json:"credential"`
}

// Substitution replaces the literal Placeholder with the value of the
// named Credential in the listed parts of a request ("path", "query",
// "header", "body").
type Substitution struct {
	Credential  string   `json:"credential"`
	Placeholder string   `json:"placeholder"`
	In          []string `json:"in"`
}

// BindingAuth is how a binding authenticates a request. Credential fields
// name credentials of the vault; they never hold values.
type BindingAuth struct {
	Type          string         `json:"type"`
	Name          string         `json:"name,omitempty"`       // the header of apiKey
	Credential    string         `json:"credential,omitempty"` // bearer, basic, apiKey
	Headers       []AuthHeader   `json:"headers,omitempty"`    // customHeaders
	Substitutions []Substitution `json:"substitutions,omitempty"`
}

// VaultBinding ties the requests that Match selects to an auth rule.
type VaultBinding struct {
	Name  string       `json:"name"`
	Match BindingMatch `json:"match"`
	Auth  BindingAuth  `json:"auth"`
}

// CreateVaultRequest is the body of POST /credential-vault.
type CreateVaultRequest struct {
	Credentials []VaultCredential `json:"credentials"`
	Bindings    []VaultBinding    `json:"bindings"`
}

// CredentialChanges edits credentials in a PatchVaultRequest.
type CredentialChanges struct {
	Add     []VaultCredential `json:"add,omitempty"`
	Replace []VaultCredential `json:"replace,omitempty"`
	Delete  []string          `json:"delete,omitempty"`
}

// BindingChanges edits bindings in a PatchVaultRequest.
type BindingChanges struct {
	Add     []VaultBinding `json:"add,omitempty"`
	Replace []VaultBinding `json:"replace,omitempty"`
	Delete  []string       `json:"delete,omitempty"`
}

// PatchVaultRequest is the body of PATCH /credential-vault, applied
// atomically. A non-nil ExpectedRevision must equal the vault's revision,
// or the call fails with ErrConflict.
type PatchVaultRequest struct {
	ExpectedRevision *int64             `json:"expectedRevision,omitempty"`
	Credentials      *CredentialChanges `json:"credentials,omitempty"`
	Bindings         *BindingChanges    `json:"bindings,omitempty"`
}

// CredentialInfo describes a credential without its value.
type CredentialInfo struct {
	Name       string `json:"name"`
	SourceType string `json:"sourceType"`
	Revision   int64  `json:"revision"` // the vault revision that last wrote it
}

// AuthInfo is a binding's auth without credential names: its type and, for
// apiKey, the header name.
type AuthInfo struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
}

// BindingInfo describes a binding; Match has the defaults filled in.
type BindingInfo struct {
	Name     string        `json:"name"`
	Revision int64         `json:"revision"`
	Match    *BindingMatch `json:"match,omitempty"`
	Auth     *AuthInfo     `json:"auth,omitempty"`
}

// VaultState is the credential vault as the server describes it: never a
// secret value.
type VaultState struct {
	Revision    int64            `json:"revision"`
	Credentials []CredentialInfo `json:"credentials"`
	Bindings    []BindingInfo    `json:"bindings"`

	// Raw is the JSON object the server sent.
	Raw json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes a vault state and keeps the raw object in Raw.
func (v *VaultState) UnmarshalJSON(b []byte) error {
	type plain VaultState
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*v = VaultState(p)
	v.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// CredentialList is the body of GET /credential-vault/credentials.
type CredentialList struct {
	Revision    int64            `json:"revision"`
	Credentials []CredentialInfo `json:"credentials"`
}

// BindingList is the body of GET /credential-vault/bindings.
type BindingList struct {
	Revision int64         `json:"revision"`
	Bindings []BindingInfo `json:"bindings"`
}

func (c *Client) vaultCall(ctx context.Context, sandboxID, method, path string, body, out any) error {
	return c.egressCall(ctx, sandboxID, request{method: method, path: "/credential-vault" + path, body: body}, out)
}

// CreateCredentialVault creates the credential vault of a sandbox created
// with a credential proxy and a network policy.
//
// # Errors
// An *APIError: status 400 for invalid input (such as a binding host the
// policy denies), ErrConflict when the vault exists or the sandbox has no
// credential proxy; or a transport error.
func (c *Client) CreateCredentialVault(ctx context.Context, sandboxID string, req CreateVaultRequest) (*VaultState, error) {
	if req.Credentials == nil {
		req.Credentials = []VaultCredential{}
	}
	if req.Bindings == nil {
		req.Bindings = []VaultBinding{}
	}
	var st VaultState
	if err := c.vaultCall(ctx, sandboxID, http.MethodPost, "", req, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// GetCredentialVault returns the credential vault of a sandbox.
//
// # Errors
// An *APIError matching ErrNotFound when no vault was created, or a
// transport error.
func (c *Client) GetCredentialVault(ctx context.Context, sandboxID string) (*VaultState, error) {
	var st VaultState
	if err := c.vaultCall(ctx, sandboxID, http.MethodGet, "", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// PatchCredentialVault edits the credential vault of a sandbox.
//
// # Errors
// An *APIError: status 400 for invalid input, ErrNotFound without a vault,
// ErrConflict for a stale ExpectedRevision; or a transport error.
func (c *Client) PatchCredentialVault(ctx context.Context, sandboxID string, req PatchVaultRequest) (*VaultState, error) {
	var st VaultState
	if err := c.vaultCall(ctx, sandboxID, http.MethodPatch, "", req, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// DeleteCredentialVault removes the credential vault of a sandbox.
//
// # Errors
// An *APIError matching ErrNotFound when there is no vault, or a transport
// error.
func (c *Client) DeleteCredentialVault(ctx context.Context, sandboxID string) error {
	return c.vaultCall(ctx, sandboxID, http.MethodDelete, "", nil, nil)
}

// ListVaultCredentials lists the credentials of a sandbox's vault.
//
// # Errors
// An *APIError matching ErrNotFound when there is no vault, or a transport
// error.
func (c *Client) ListVaultCredentials(ctx context.Context, sandboxID string) (*CredentialList, error) {
	var l CredentialList
	if err := c.vaultCall(ctx, sandboxID, http.MethodGet, "/credentials", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// GetVaultCredential describes one credential of a sandbox's vault.
//
// # Errors
// An *APIError matching ErrNotFound for an unknown name, or a transport
// error.
func (c *Client) GetVaultCredential(ctx context.Context, sandboxID, name string) (*CredentialInfo, error) {
	var ci CredentialInfo
	if err := c.vaultCall(ctx, sandboxID, http.MethodGet, "/credentials/"+pathEscape(name), nil, &ci); err != nil {
		return nil, err
	}
	return &ci, nil
}

// ListVaultBindings lists the bindings of a sandbox's vault.
//
// # Errors
// An *APIError matching ErrNotFound when there is no vault, or a transport
// error.
func (c *Client) ListVaultBindings(ctx context.Context, sandboxID string) (*BindingList, error) {
	var l BindingList
	if err := c.vaultCall(ctx, sandboxID, http.MethodGet, "/bindings", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// GetVaultBinding describes one binding of a sandbox's vault.
//
// # Errors
// An *APIError matching ErrNotFound for an unknown name, or a transport
// error.
func (c *Client) GetVaultBinding(ctx context.Context, sandboxID, name string) (*BindingInfo, error) {
	var bi BindingInfo
	if err := c.vaultCall(ctx, sandboxID, http.MethodGet, "/bindings/"+pathEscape(name), nil, &bi); err != nil {
		return nil, err
	}
	return &bi, nil
}
