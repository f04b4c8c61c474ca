package hybox

import (
	"context"
	"net/http"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// EgressAuthHeader is the per-sandbox token header of the egress API; the
// endpoint of EgressPort returns it among its headers.
const EgressAuthHeader = "OPENSANDBOX-EGRESS-AUTH"

// Allow returns the rule allowing target (an exact name, "*.example.com",
// an IP or a CIDR).
func Allow(target string) api.EgressRule {
	return api.EgressRule{Action: api.PolicyActionAllow, Target: target}
}

// Deny returns the rule denying target.
func Deny(target string) api.EgressRule {
	return api.EgressRule{Action: api.PolicyActionDeny, Target: target}
}

// Inline returns the credential name with an inline value. The value
// prints, logs and marshals as "[REDACTED]"; the SDK puts it on the wire
// only in the request that sends it.
func Inline(name, value string) api.VaultCredential {
	return api.VaultCredential{Name: name, Source: api.VaultCredentialSource{Type: "inline", Value: api.NewSecret(value)}}
}

// forWire returns copies of creds whose values marshal as themselves.
func forWire(creds []api.VaultCredential) []api.VaultCredential {
	if creds == nil {
		return nil
	}
	out := make([]api.VaultCredential, len(creds))
	for i, c := range creds {
		c.Source.Value = c.Source.Value.ForWire()
		out[i] = c
	}
	return out
}

func (s *Sandbox) egressCall(ctx context.Context, r request, out any) error {
	t, err := s.transport(ctx, EgressPort)
	if err != nil {
		return err
	}
	return t.call(ctx, r, out)
}

func (s *Sandbox) policyCall(ctx context.Context, method string, body any) (api.PolicyStatus, error) {
	var st api.PolicyStatus
	err := s.egressCall(ctx, request{method: method, path: "/policy", body: body}, &st)
	return st, err
}

// EgressPolicy returns the sandbox's network policy and how it is
// enforced. A sandbox created without one reports mode allow_all.
//
// # Errors
// An *APIError (ErrNotFound for an unknown sandbox, ErrConflict for one
// that is not running), or a transport error.
func (s *Sandbox) EgressPolicy(ctx context.Context) (api.PolicyStatus, error) {
	return s.policyCall(ctx, http.MethodGet, nil)
}

// SetEgressPolicy replaces the sandbox's network policy. An empty
// DefaultAction means deny. Connections the new policy denies are cut.
//
// # Errors
// An *APIError (ErrInvalid for a bad target or action), or a transport
// error.
func (s *Sandbox) SetEgressPolicy(ctx context.Context, p api.NetworkPolicy) (api.PolicyStatus, error) {
	if p.Egress == nil {
		p.Egress = []api.EgressRule{}
	}
	return s.policyCall(ctx, http.MethodPut, p)
}

// PatchEgressRules puts rules in front of the sandbox's policy: they take
// priority over the existing rules, and a rule replaces an existing rule
// with the same target.
//
// # Errors
// An *APIError (ErrInvalid for a bad target or action), or a transport
// error.
func (s *Sandbox) PatchEgressRules(ctx context.Context, rules ...api.EgressRule) (api.PolicyStatus, error) {
	if rules == nil {
		rules = []api.EgressRule{}
	}
	return s.policyCall(ctx, http.MethodPatch, rules)
}

// RemoveEgressRules removes the rules with these targets from the
// sandbox's policy.
//
// # Errors
// An *APIError or a transport error.
func (s *Sandbox) RemoveEgressRules(ctx context.Context, targets ...string) (api.PolicyStatus, error) {
	if targets == nil {
		targets = []string{}
	}
	return s.policyCall(ctx, http.MethodDelete, targets)
}

func (s *Sandbox) vaultCall(ctx context.Context, method, path string, body, out any) error {
	return s.egressCall(ctx, request{method: method, path: "/credential-vault" + path, body: body}, out)
}

// CreateVault creates the sandbox's credential vault: secrets the server
// injects into the sandbox's matching outbound requests, which the sandbox
// itself never sees. The sandbox must have been created with
// credentialProxy enabled and a network policy.
//
// # Errors
// An *APIError: ErrInvalid for invalid input (such as a binding host the
// policy denies), ErrConflict when the vault exists or the sandbox has no
// credential proxy; or a transport error.
func (s *Sandbox) CreateVault(ctx context.Context, req api.VaultCreateRequest) (api.VaultState, error) {
	req.Credentials = forWire(req.Credentials)
	if req.Credentials == nil {
		req.Credentials = []api.VaultCredential{}
	}
	if req.Bindings == nil {
		req.Bindings = []api.VaultBinding{}
	}
	var st api.VaultState
	err := s.vaultCall(ctx, http.MethodPost, "", req, &st)
	return st, err
}

// Vault returns the sandbox's credential vault (never a secret value).
//
// # Errors
// An *APIError matching ErrNotFound when no vault was created, or a
// transport error.
func (s *Sandbox) Vault(ctx context.Context) (api.VaultState, error) {
	var st api.VaultState
	err := s.vaultCall(ctx, http.MethodGet, "", nil, &st)
	return st, err
}

// PatchVault edits the sandbox's credential vault atomically.
//
// # Errors
// An *APIError: ErrInvalid for invalid input, ErrNotFound without a vault,
// ErrConflict for a stale ExpectedRevision; or a transport error.
func (s *Sandbox) PatchVault(ctx context.Context, req api.VaultPatchRequest) (api.VaultState, error) {
	if c := req.Credentials; c != nil {
		req.Credentials = &api.VaultCredentialMutations{Add: forWire(c.Add), Replace: forWire(c.Replace), Delete: c.Delete}
	}
	var st api.VaultState
	err := s.vaultCall(ctx, http.MethodPatch, "", req, &st)
	return st, err
}

// DeleteVault removes the sandbox's credential vault.
//
// # Errors
// An *APIError matching ErrNotFound when there is no vault, or a transport
// error.
func (s *Sandbox) DeleteVault(ctx context.Context) error {
	return s.vaultCall(ctx, http.MethodDelete, "", nil, nil)
}

// VaultCredentials lists the credentials of the sandbox's vault.
//
// # Errors
// An *APIError matching ErrNotFound when there is no vault, or a
// transport error.
func (s *Sandbox) VaultCredentials(ctx context.Context) (api.VaultCredentialList, error) {
	var l api.VaultCredentialList
	err := s.vaultCall(ctx, http.MethodGet, "/credentials", nil, &l)
	return l, err
}

// VaultCredential describes one credential of the sandbox's vault.
//
// # Errors
// An *APIError matching ErrNotFound for an unknown name, or a transport
// error.
func (s *Sandbox) VaultCredential(ctx context.Context, name string) (api.VaultCredentialInfo, error) {
	var ci api.VaultCredentialInfo
	err := s.vaultCall(ctx, http.MethodGet, "/credentials/"+pathEscape(name), nil, &ci)
	return ci, err
}

// VaultBindings lists the bindings of the sandbox's vault.
//
// # Errors
// An *APIError matching ErrNotFound when there is no vault, or a
// transport error.
func (s *Sandbox) VaultBindings(ctx context.Context) (api.VaultBindingList, error) {
	var l api.VaultBindingList
	err := s.vaultCall(ctx, http.MethodGet, "/bindings", nil, &l)
	return l, err
}

// VaultBinding describes one binding of the sandbox's vault.
//
// # Errors
// An *APIError matching ErrNotFound for an unknown name, or a transport
// error.
func (s *Sandbox) VaultBinding(ctx context.Context, name string) (api.VaultBindingInfo, error) {
	var bi api.VaultBindingInfo
	err := s.vaultCall(ctx, http.MethodGet, "/bindings/"+pathEscape(name), nil, &bi)
	return bi, err
}
