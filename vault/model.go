// Package vault is the credential vault of one sandbox: named secret values
// (credentials) and the rules (bindings) that say which outbound HTTP
// requests receive which credential and in which header. The egress proxy
// asks the vault which requests to intercept (Intercepts), which binding a
// request falls under (Match), and lets it set the headers (Inject); the
// egress API edits it (Create, Patch, Delete) and reads its sanitized state
// (Get). Secret values live in memory only, never leave the package in an
// error, a formatted string or a JSON document, and are persisted only
// sealed with AES-256-GCM (MarshalSealed).
package vault

// The wire protocol, as the official OpenSandbox SDKs (Python package
// "opensandbox", npm "@alibaba-group/opensandbox") model it. hybox follows
// these shapes; where it deliberately differs, the note says so.
//
// Routes (egress API, sandbox port 18080, header OPENSANDBOX-EGRESS-AUTH):
//   - POST   /credential-vault                    create; 201 with the state; 400 invalid,
//     409 conflict, 412 when the proxy prerequisites (policy, TLS interception) are missing.
//   - GET    /credential-vault                    200 state; 404 when none was created.
//   - PATCH  /credential-vault                    200 state; 400, 404, 409 (revision), 412.
//   - DELETE /credential-vault                    204; 404 when none exists.
//   - GET    /credential-vault/credentials        200 {"revision", "credentials":[metadata]}.
//   - GET    /credential-vault/credentials/{name} 200 credential metadata; 404.
//   - GET    /credential-vault/bindings           200 {"revision", "bindings":[metadata]}.
//   - GET    /credential-vault/bindings/{name}    200 binding metadata; 404.
//
// Error bodies are plain text. The JS client insists that "credentials" and
// "bindings" of a state or list are arrays (never null) and that every
// revision is an integer.
//
// Create body: {"credentials":[Credential], "bindings":[Binding]}, both
// required.
//   - Credential: {"name", "source":{"type":"inline","value"}}. "inline" is the
//     only source type; clients may omit it. The Python client refuses an empty
//     value and a blank name. The value is write-only.
//   - Binding: {"name", "match", "auth"}.
//   - match: {"hosts":[...] (required, non-empty: exact names or leftmost
//     wildcards "*.example.com"), "schemes" (["https"] by default; "http" and
//     "https" only), "methods" (default GET POST PUT PATCH DELETE), "paths"
//     (default ["/*"]), "ports" (deprecated: the port follows from the scheme,
//     443 or 80; upstream rejects other values and ignores 80/443)}.
//   - auth, discriminated by "type":
//     {"type":"bearer","credential"}        → Authorization: Bearer <value>
//     {"type":"basic","credential"}         → Authorization: Basic <value>; the
//     SDKs document the value as already base64("user:password")
//     {"type":"apiKey","name","credential"} → header <name>: <value>
//     {"type":"customHeaders","headers":[{"name","credential"}]} → each header
//     {"type":"passthrough"}                → no header; substitutions only
//     Every type may carry "substitutions": [{"credential", "placeholder",
//     "in":["path"|"query"|"header"|"body"]}]: a literal, case-sensitive
//     placeholder the client put in the request is replaced by the value
//     (URL-encoded in path and query); the placeholder joins the redaction set.
//     "credential" always names a credential of the vault, never a value.
//
// Patch body: {"expectedRevision"? (optional optimistic guard),
// "credentials"?: {"add":[Credential], "replace":[Credential], "delete":[name]},
// "bindings"?: {"add":[Binding], "replace":[Binding], "delete":[name]}}. It is
// applied atomically.
//
// State (every response that is not a list): {"revision", "credentials":
// [{"name", "sourceType", "revision"}], "bindings": [{"name", "revision",
// "match"?, "auth"?: {"type", "name"?}}]}. Values and even the names of the
// credentials a binding uses are never returned; auth.name is the public
// header name of an apiKey binding.
//
// Revisions (the SDKs only say they are integers; this is hybox's rule): a
// created vault has revision 1; every successful patch adds 1. Each credential
// and binding carries the vault revision at which it was last written (added
// or replaced), so replacing one raises its revision and leaves the others
// alone. Recreating over an existing vault continues the count.
//
// Where hybox differs: "ports" may list any port 1-65535; the scheme's own
// port (443 or 80) always matches and listed ports are added to it, so every
// binding upstream accepts behaves the same. For basic auth a value
// containing ":" is taken as "user:password" and base64-encoded; any other
// value is sent as given (the SDK form).

import (
	"encoding/json"
	"fmt"
	"log/slog"
)

// redacted replaces secret material wherever the package prints it.
const redacted = "[REDACTED]"

// Secret is a credential value. It formats (fmt, any verb, even through
// fmt's error paths, which skip Format methods: the value sits behind a
// pointer, so they print an address), logs (slog) and marshals to JSON as
// "[REDACTED]"; it unmarshals from a JSON string, so a request body decodes
// into it. Reveal returns the value itself. The zero Secret is empty.
type Secret struct{ p *string }

// NewSecret wraps a value.
func NewSecret(value string) Secret { return Secret{p: &value} }

// Reveal returns the secret value. Call it only to put the value on the wire.
func (s Secret) Reveal() string {
	if s.p == nil {
		return ""
	}
	return *s.p
}

// String returns "[REDACTED]".
func (Secret) String() string { return redacted }

// GoString returns "[REDACTED]".
func (Secret) GoString() string { return redacted }

// Format writes "[REDACTED]" for every verb.
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON writes "[REDACTED]": values are write-only.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText writes "[REDACTED]".
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// UnmarshalJSON reads a JSON string.
func (s *Secret) UnmarshalJSON(data []byte) error {
	var v string
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("credential value must be a string: %w", ErrInvalid)
	}
	*s = NewSecret(v)
	return nil
}

// SourceInline is the only credential source type.
const SourceInline = "inline"

// Source is where a credential's value comes from. Type is "inline" (an
// empty Type means inline).
type Source struct {
	Type  string `json:"type,omitempty"`
	Value Secret `json:"value"`
}

// Credential is a named secret value as a client sends it.
type Credential struct {
	Name   string `json:"name"`
	Source Source `json:"source"`
}

// Schemes a binding can match.
const (
	SchemeHTTP  = "http"
	SchemeHTTPS = "https"
)

// Match selects the requests a binding applies to. Empty Schemes means
// ["https"], empty Methods means GET, POST, PUT, PATCH and DELETE, empty
// Paths means ["/*"] (the SDK defaults); Ports add ports to the scheme's own.
type Match struct {
	Schemes []string `json:"schemes,omitempty"`
	Ports   []int    `json:"ports,omitempty"`
	Hosts   []string `json:"hosts"`
	Methods []string `json:"methods,omitempty"`
	Paths   []string `json:"paths,omitempty"`
}

// AuthType names how a binding authenticates a request.
type AuthType string

// The auth types of the protocol.
const (
	AuthBearer        AuthType = "bearer"
	AuthBasic         AuthType = "basic"
	AuthAPIKey        AuthType = "apiKey"
	AuthCustomHeaders AuthType = "customHeaders"
	AuthPassthrough   AuthType = "passthrough"
)

// HeaderEntry is one header of a customHeaders auth: the header Name gets
// the value of the named Credential.
type HeaderEntry struct {
	Name       string `json:"name"`
	Credential string `json:"credential"`
}

// Substitution surfaces.
const (
	InPath   = "path"
	InQuery  = "query"
	InHeader = "header"
	InBody   = "body"
)

// Substitution replaces the literal Placeholder with the value of the named
// Credential in the listed request surfaces (In).
type Substitution struct {
	Credential  string   `json:"credential"`
	Placeholder string   `json:"placeholder"`
	In          []string `json:"in"`
}

// Auth is a binding's auth rule. Which fields apply depends on Type:
// bearer and basic use Credential; apiKey uses Name (the header) and
// Credential; customHeaders uses Headers; passthrough uses none. Every type
// may carry Substitutions. Credential fields name credentials; they never
// hold values.
type Auth struct {
	Type          AuthType       `json:"type"`
	Name          string         `json:"name,omitempty"`
	Credential    string         `json:"credential,omitempty"`
	Headers       []HeaderEntry  `json:"headers,omitempty"`
	Substitutions []Substitution `json:"substitutions,omitempty"`
}

// Binding ties requests (Match) to an auth rule.
type Binding struct {
	Name  string `json:"name"`
	Match Match  `json:"match"`
	Auth  Auth   `json:"auth"`
}

// CreateRequest is the body of POST /credential-vault.
type CreateRequest struct {
	Credentials []Credential `json:"credentials"`
	Bindings    []Binding    `json:"bindings"`
}

// CredentialMutations edits credentials in a patch.
type CredentialMutations struct {
	Add     []Credential `json:"add,omitempty"`
	Replace []Credential `json:"replace,omitempty"`
	Delete  []string     `json:"delete,omitempty"`
}

// BindingMutations edits bindings in a patch.
type BindingMutations struct {
	Add     []Binding `json:"add,omitempty"`
	Replace []Binding `json:"replace,omitempty"`
	Delete  []string  `json:"delete,omitempty"`
}

// PatchRequest is the body of PATCH /credential-vault. A non-nil
// ExpectedRevision must equal the current revision.
type PatchRequest struct {
	ExpectedRevision *int64               `json:"expectedRevision,omitempty"`
	Credentials      *CredentialMutations `json:"credentials,omitempty"`
	Bindings         *BindingMutations    `json:"bindings,omitempty"`
}

// CredentialInfo is the sanitized metadata of a credential.
type CredentialInfo struct {
	Name       string `json:"name"`
	SourceType string `json:"sourceType"`
	Revision   int64  `json:"revision"`
}

// AuthInfo is the sanitized auth of a binding: its type and, for apiKey,
// the header name.
type AuthInfo struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
}

// BindingInfo is the sanitized metadata of a binding. Match is normalized
// (defaults filled in, hosts lower-case, methods upper-case).
type BindingInfo struct {
	Name     string    `json:"name"`
	Revision int64     `json:"revision"`
	Match    *Match    `json:"match,omitempty"`
	Auth     *AuthInfo `json:"auth,omitempty"`
}

// State is the sanitized view of a vault that the egress API returns.
// Credentials and Bindings are never nil, so they marshal as arrays.
type State struct {
	Revision    int64            `json:"revision"`
	Credentials []CredentialInfo `json:"credentials"`
	Bindings    []BindingInfo    `json:"bindings"`
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

// CredentialList returns the credential list response of this state.
func (s State) CredentialList() CredentialList {
	return CredentialList{Revision: s.Revision, Credentials: s.Credentials}
}

// BindingList returns the binding list response of this state.
func (s State) BindingList() BindingList {
	return BindingList{Revision: s.Revision, Bindings: s.Bindings}
}
