package hybox

import (
	"fmt"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// The wire types of the egress API on port 18080. The protocol document
// does not describe /policy and /credential-vault yet; these types follow
// the server (vault/model.go, server/egress.go) and move to package api
// once the document has them.

// Egress policy modes of PolicyStatus.
const (
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
	Reason string            `json:"reason,omitempty"`
	Policy api.NetworkPolicy `json:"policy"`
}

// CredentialSourceInline is the only credential source type.
const CredentialSourceInline = "inline"

// CredentialSource is where a credential's value comes from. Value is
// write-only: the server never returns it, and a CredentialSource prints
// (with any fmt verb) without it.
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

// VaultCredential is a named secret as the client sends it.
type VaultCredential struct {
	Name   string           `json:"name"`
	Source CredentialSource `json:"source"`
}

// Inline returns the credential name with an inline value.
func Inline(name, value string) VaultCredential {
	return VaultCredential{Name: name, Source: CredentialSource{Type: CredentialSourceInline, Value: value}}
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

// AuthHeader is one header of a customHeaders auth: Name gets the value
// of the named Credential.
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

// VaultBinding ties the requests Match selects to an auth rule.
type VaultBinding struct {
	Name  string       `json:"name"`
	Match BindingMatch `json:"match"`
	Auth  BindingAuth  `json:"auth"`
}

// VaultRequest is the body of POST /credential-vault.
type VaultRequest struct {
	Credentials []VaultCredential `json:"credentials"`
	Bindings    []VaultBinding    `json:"bindings"`
}

// CredentialChanges edits credentials in a VaultPatch.
type CredentialChanges struct {
	Add     []VaultCredential `json:"add,omitempty"`
	Replace []VaultCredential `json:"replace,omitempty"`
	Delete  []string          `json:"delete,omitempty"`
}

// BindingChanges edits bindings in a VaultPatch.
type BindingChanges struct {
	Add     []VaultBinding `json:"add,omitempty"`
	Replace []VaultBinding `json:"replace,omitempty"`
	Delete  []string       `json:"delete,omitempty"`
}

// VaultPatch is the body of PATCH /credential-vault, applied atomically.
// A non-nil ExpectedRevision must equal the vault's revision, or the call
// fails with ErrConflict.
type VaultPatch struct {
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

// AuthInfo is a binding's auth without credential names.
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

// VaultState is the credential vault as the server describes it.
type VaultState struct {
	Revision    int64            `json:"revision"`
	Credentials []CredentialInfo `json:"credentials"`
	Bindings    []BindingInfo    `json:"bindings"`
}

// CredentialList is the answer of GET /credential-vault/credentials.
type CredentialList struct {
	Revision    int64            `json:"revision"`
	Credentials []CredentialInfo `json:"credentials"`
}

// BindingList is the answer of GET /credential-vault/bindings.
type BindingList struct {
	Revision int64         `json:"revision"`
	Bindings []BindingInfo `json:"bindings"`
}
