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
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// The wire types are generated from the protocol document (sdks/go/api);
// the vault names them for what they are here.
type (
	// Secret is a credential value: it prints, logs and marshals as
	// "[REDACTED]"; Reveal returns the value.
	Secret = api.Secret
	// Source is where a credential's value comes from. Type is "inline"
	// (an empty Type means inline).
	Source = api.VaultCredentialSource
	// Credential is a named secret value as a client sends it.
	Credential = api.VaultCredential
	// Match selects the requests a binding applies to. Empty Schemes means
	// ["https"], empty Methods means GET, POST, PUT, PATCH and DELETE, empty
	// Paths means ["/*"] (the SDK defaults); Ports add ports to the scheme's
	// own.
	Match = api.VaultMatch
	// AuthType names how a binding authenticates a request.
	AuthType = api.VaultAuthType
	// HeaderEntry is one header of a customHeaders auth: the header Name
	// gets the value of the named Credential.
	HeaderEntry = api.VaultHeaderEntry
	// Substitution replaces the literal Placeholder with the value of the
	// named Credential in the listed request surfaces (In).
	Substitution = api.VaultSubstitution
	// Auth is a binding's auth rule. Which fields apply depends on Type:
	// bearer and basic use Credential; apiKey uses Name (the header) and
	// Credential; customHeaders uses Headers; passthrough uses none. Every
	// type may carry Substitutions. Credential fields name credentials; they
	// never hold values.
	Auth = api.VaultAuth
	// Binding ties requests (Match) to an auth rule.
	Binding = api.VaultBinding
	// CreateRequest is the body of POST /credential-vault.
	CreateRequest = api.VaultCreateRequest
	// CredentialMutations edits credentials in a patch.
	CredentialMutations = api.VaultCredentialMutations
	// BindingMutations edits bindings in a patch.
	BindingMutations = api.VaultBindingMutations
	// PatchRequest is the body of PATCH /credential-vault. A non-nil
	// ExpectedRevision must equal the current revision.
	PatchRequest = api.VaultPatchRequest
	// CredentialInfo is the sanitized metadata of a credential.
	CredentialInfo = api.VaultCredentialInfo
	// AuthInfo is the sanitized auth of a binding: its type and, for
	// apiKey, the header name.
	AuthInfo = api.VaultAuthInfo
	// BindingInfo is the sanitized metadata of a binding. Match is
	// normalized (defaults filled in, hosts lower-case, methods upper-case).
	BindingInfo = api.VaultBindingInfo
	// State is the sanitized view of a vault that the egress API returns.
	// Credentials and Bindings are never nil, so they marshal as arrays.
	State = api.VaultState
	// CredentialList is the body of GET /credential-vault/credentials.
	CredentialList = api.VaultCredentialList
	// BindingList is the body of GET /credential-vault/bindings.
	BindingList = api.VaultBindingList
)

// redacted replaces secret material wherever the package prints it.
const redacted = "[REDACTED]"

// NewSecret wraps a value.
func NewSecret(value string) Secret { return api.NewSecret(value) }

// SourceInline is the only credential source type.
const SourceInline = "inline"

// Schemes a binding can match.
const (
	SchemeHTTP  = "http"
	SchemeHTTPS = "https"
)

// The auth types of the protocol.
const (
	AuthBearer        = api.VaultAuthTypeBearer
	AuthBasic         = api.VaultAuthTypeBasic
	AuthAPIKey        = api.VaultAuthTypeAPIKey
	AuthCustomHeaders = api.VaultAuthTypeCustomHeaders
	AuthPassthrough   = api.VaultAuthTypePassthrough
)

// Substitution surfaces.
const (
	InPath   = "path"
	InQuery  = "query"
	InHeader = "header"
	InBody   = "body"
)

// credentialList returns the credential list response of state s.
func credentialList(s State) CredentialList {
	return CredentialList{Revision: s.Revision, Credentials: s.Credentials}
}

// bindingList returns the binding list response of state s.
func bindingList(s State) BindingList {
	return BindingList{Revision: s.Revision, Bindings: s.Bindings}
}
