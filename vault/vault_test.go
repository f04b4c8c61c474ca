package vault

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

func allowAll(string) error { return nil }

var errDenied = errors.New("denied by rule 0 (deny evil.example)")

func denyHost(bad string) func(string) error {
	return func(h string) error {
		if h == bad {
			return errDenied
		}
		return nil
	}
}

func cred(name, value string) Credential {
	return Credential{Name: name, Source: Source{Type: SourceInline, Value: NewSecret(value)}}
}

func bearer(name, credName string, hosts ...string) Binding {
	return Binding{Name: name, Match: Match{Hosts: hosts}, Auth: Auth{Type: AuthBearer, Credential: credName}}
}

func basicReq() CreateRequest {
	return CreateRequest{
		Credentials: []Credential{cred("gh", "ghp_secret_one"), cred("other", "s3cr3t-two")},
		Bindings:    []Binding{bearer("github", "gh", "api.github.com")},
	}
}

func TestCreateValidation(t *testing.T) {
	withBinding := func(b Binding) CreateRequest {
		r := basicReq()
		r.Bindings = []Binding{b}
		return r
	}
	withMatch := func(m Match) CreateRequest {
		return withBinding(Binding{Name: "b", Match: m, Auth: Auth{Type: AuthBearer, Credential: "gh"}})
	}
	withAuth := func(a Auth) CreateRequest {
		return withBinding(Binding{Name: "b", Match: Match{Hosts: []string{"x.com"}}, Auth: a})
	}
	tests := []struct {
		name    string
		req     CreateRequest
		allowed func(string) error
		want    string // substring of the error
	}{
		{"blank credential name", CreateRequest{Credentials: []Credential{cred(" ", "v")}}, nil, "credentials[0].name: must not be blank"},
		{"slash in name", CreateRequest{Credentials: []Credential{cred("a/b", "v")}}, nil, `credentials[0].name "a/b": must not contain slashes`},
		{"duplicate credential", CreateRequest{Credentials: []Credential{cred("a", "v"), cred("a", "w")}}, nil, `credentials[1].name "a": duplicate credential name`},
		{"empty value", CreateRequest{Credentials: []Credential{cred("a", "")}}, nil, "credentials[0].source.value: must not be empty"},
		{"newline in value", CreateRequest{Credentials: []Credential{cred("a", "x\ny")}}, nil, "credentials[0].source.value: must not contain CR, LF or NUL"},
		{"bad source type", CreateRequest{Credentials: []Credential{{Name: "a", Source: Source{Type: "vault", Value: NewSecret("v")}}}}, nil, `credentials[0].source.type "vault": unsupported source type`},
		{"duplicate binding", CreateRequest{Credentials: basicReq().Credentials, Bindings: []Binding{bearer("b", "gh", "a.com"), bearer("b", "gh", "b.com")}}, allowAll, `bindings[1].name "b": duplicate binding name`},
		{"unknown credential", withBinding(bearer("b", "nope", "a.com")), allowAll, `bindings[0].auth.credential "nope": no such credential`},
		{"no hosts", withMatch(Match{}), allowAll, "bindings[0].match.hosts: must list at least one host"},
		{"bad host", withMatch(Match{Hosts: []string{"exa mple.com"}}), allowAll, `bindings[0].match.hosts[0] "exa mple.com": not a host name`},
		{"star inside host", withMatch(Match{Hosts: []string{"a.*.com"}}), allowAll, `bindings[0].match.hosts[0] "a.*.com": "*" is only allowed`},
		{"bare star", withMatch(Match{Hosts: []string{"*"}}), allowAll, `bindings[0].match.hosts[0] "*"`},
		{"bad scheme", withMatch(Match{Hosts: []string{"a.com"}, Schemes: []string{"ftp"}}), allowAll, `bindings[0].match.schemes[0] "ftp": must be "http" or "https"`},
		{"port zero", withMatch(Match{Hosts: []string{"a.com"}, Ports: []int{0}}), allowAll, `bindings[0].match.ports[0] "0": must be between 1 and 65535`},
		{"port too big", withMatch(Match{Hosts: []string{"a.com"}, Ports: []int{65536}}), allowAll, `bindings[0].match.ports[0] "65536"`},
		{"bad method", withMatch(Match{Hosts: []string{"a.com"}, Methods: []string{"GE T"}}), allowAll, `bindings[0].match.methods[0] "GE T": not an HTTP method`},
		{"relative path", withMatch(Match{Hosts: []string{"a.com"}, Paths: []string{"v1/*"}}), allowAll, `bindings[0].match.paths[0] "v1/*": must start with "/"`},
		{"star inside path", withMatch(Match{Hosts: []string{"a.com"}, Paths: []string{"/a/*/b"}}), allowAll, `"*" is only allowed at the end`},
		{"host denied by policy", withMatch(Match{Hosts: []string{"ok.com", "Evil.Example."}}), denyHost("evil.example"), `bindings[0].match.hosts[1] "evil.example": not allowed by the network policy: denied by rule 0`},
		{"no policy", withMatch(Match{Hosts: []string{"a.com"}}), nil, "not allowed by the network policy: no network policy is set"},
		{"missing auth type", withAuth(Auth{Credential: "gh"}), allowAll, "bindings[0].auth.type: must be set"},
		{"unknown auth type", withAuth(Auth{Type: "oauth", Credential: "gh"}), allowAll, `bindings[0].auth.type "oauth": unknown auth type`},
		{"bearer without credential", withAuth(Auth{Type: AuthBearer}), allowAll, "bindings[0].auth.credential: must name a credential"},
		{"bearer with name", withAuth(Auth{Type: AuthBearer, Credential: "gh", Name: "X"}), allowAll, "bindings[0].auth.name: not used by auth type bearer"},
		{"apiKey bad header", withAuth(Auth{Type: AuthAPIKey, Name: "X Key", Credential: "gh"}), allowAll, `bindings[0].auth.name "X Key": not a valid header name`},
		{"apiKey reserved header", withAuth(Auth{Type: AuthAPIKey, Name: "Host", Credential: "gh"}), allowAll, `bindings[0].auth.name "Host": this header cannot be set`},
		{"customHeaders empty", withAuth(Auth{Type: AuthCustomHeaders}), allowAll, "bindings[0].auth.headers: must list at least one header"},
		{"customHeaders duplicate", withAuth(Auth{Type: AuthCustomHeaders, Headers: []HeaderEntry{{Name: "X-A", Credential: "gh"}, {Name: "x-a", Credential: "other"}}}), allowAll, `bindings[0].auth.headers[1].name "x-a": header listed twice`},
		{"customHeaders unknown credential", withAuth(Auth{Type: AuthCustomHeaders, Headers: []HeaderEntry{{Name: "X-A", Credential: "gh"}, {Name: "X-B", Credential: "zz"}}}), allowAll, `bindings[0].auth.headers[1].credential "zz": no such credential`},
		{"substitution bad surface", withAuth(Auth{Type: AuthPassthrough, Substitutions: []Substitution{{Credential: "gh", Placeholder: "P", In: []string{"cookie"}}}}), allowAll, `bindings[0].auth.substitutions[0].in[0] "cookie"`},
		{"substitution unknown credential", withAuth(Auth{Type: AuthPassthrough, Substitutions: []Substitution{{Credential: "zz", Placeholder: "P", In: []string{"header"}}}}), allowAll, `bindings[0].auth.substitutions[0].credential "zz": no such credential`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := New()
			_, err := v.Create(tt.req, tt.allowed)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tt.want)
			_, err = v.Get()
			assert.ErrorIs(t, err, ErrNotFound, "a refused create leaves no vault")
		})
	}
	t.Run("policy error is wrapped", func(t *testing.T) {
		r := basicReq()
		r.Bindings[0].Match.Hosts = []string{"evil.example"}
		_, err := New().Create(r, denyHost("evil.example"))
		assert.ErrorIs(t, err, errDenied)
	})
}

func TestCreateNormalizesAndReturnsSanitizedState(t *testing.T) {
	v := New()
	req := basicReq()
	req.Credentials[1].Source.Type = "" // defaults to inline
	req.Bindings = append(req.Bindings, Binding{Name: "key",
		Match: Match{Hosts: []string{"*.Example.COM."}, Schemes: []string{"HTTP", "https"}, Methods: []string{"get", "Get"}, Paths: []string{"/v1/*"}, Ports: []int{8080}},
		Auth:  Auth{Type: AuthAPIKey, Name: "X-Api-Key", Credential: "other"}})
	st, err := v.Create(req, allowAll)
	require.NoError(t, err)
	assert.Equal(t, State{
		Revision: 1,
		Credentials: []CredentialInfo{
			{Name: "gh", SourceType: "inline", Revision: 1},
			{Name: "other", SourceType: "inline", Revision: 1},
		},
		Bindings: []BindingInfo{
			{Name: "github", Revision: 1, Match: &Match{Schemes: []string{"https"}, Hosts: []string{"api.github.com"},
				Methods: []string{"GET", "POST", "PUT", "PATCH", "DELETE"}, Paths: []string{"/*"}}, Auth: &AuthInfo{Type: "bearer"}},
			{Name: "key", Revision: 1, Match: &Match{Schemes: []string{"http", "https"}, Ports: []int{8080}, Hosts: []string{"*.example.com"},
				Methods: []string{"GET"}, Paths: []string{"/v1/*"}}, Auth: &AuthInfo{Type: "apiKey", Name: "X-Api-Key"}},
		},
	}, st)
	got, err := v.Get()
	require.NoError(t, err)
	assert.Equal(t, st, got)

	data, err := json.Marshal(st)
	require.NoError(t, err)
	assert.NotContains(t, string(data), "ghp_secret_one")
	assert.NotContains(t, string(data), `"credential"`, "the state never names the credential a binding uses")
	assert.Contains(t, string(data), `"sourceType":"inline"`)

	empty, err := New().Create(CreateRequest{}, nil)
	require.NoError(t, err)
	data, err = json.Marshal(empty)
	require.NoError(t, err)
	assert.JSONEq(t, `{"revision":1,"credentials":[],"bindings":[]}`, string(data))
}

func TestCreateDecodesSDKBody(t *testing.T) {
	body := `{"credentials":[{"name":"gh","source":{"type":"inline","value":"tok"}},{"name":"b","source":{"value":"dTpw"}}],
	"bindings":[{"name":"github","match":{"schemes":["https"],"ports":[443],"hosts":["api.github.com"],"methods":["GET","POST"],"paths":["/*"]},"auth":{"type":"bearer","credential":"gh"}},
	{"name":"h","match":{"hosts":["h.example"]},"auth":{"type":"customHeaders","headers":[{"name":"X-A","credential":"gh"}],"substitutions":[{"credential":"b","placeholder":"{{B}}","in":["header","query"]}]}}]}`
	var req CreateRequest
	require.NoError(t, json.Unmarshal([]byte(body), &req))
	st, err := New().Create(req, allowAll)
	require.NoError(t, err)
	assert.Len(t, st.Bindings, 2)

	patch := `{"expectedRevision":1,"credentials":{"replace":[{"name":"gh","source":{"type":"inline","value":"t2"}}]},"bindings":{"delete":["h"]}}`
	var p PatchRequest
	require.NoError(t, json.Unmarshal([]byte(patch), &p))
	require.NotNil(t, p.ExpectedRevision)
	assert.Equal(t, int64(1), *p.ExpectedRevision)
	assert.Equal(t, "t2", p.Credentials.Replace[0].Source.Value.Reveal())
}

func TestRevisions(t *testing.T) {
	v := New()
	st, err := v.Create(basicReq(), allowAll)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.Revision)

	// Replace one credential: the vault and that credential move to 2.
	st, err = v.Patch(PatchRequest{Credentials: &CredentialMutations{Replace: []Credential{cred("gh", "new")}}}, allowAll)
	require.NoError(t, err)
	assert.Equal(t, int64(2), st.Revision)
	assert.Equal(t, []CredentialInfo{{Name: "gh", SourceType: "inline", Revision: 2}, {Name: "other", SourceType: "inline", Revision: 1}}, st.Credentials)
	assert.Equal(t, int64(1), st.Bindings[0].Revision)

	// An empty patch still counts.
	st, err = v.Patch(PatchRequest{}, allowAll)
	require.NoError(t, err)
	assert.Equal(t, int64(3), st.Revision)

	// Add a binding, replace the first: both take revision 4.
	st, err = v.Patch(PatchRequest{Bindings: &BindingMutations{
		Add:     []Binding{bearer("more", "other", "more.example")},
		Replace: []Binding{bearer("github", "other", "api.github.com")},
	}}, allowAll)
	require.NoError(t, err)
	assert.Equal(t, int64(4), st.Revision)
	require.Len(t, st.Bindings, 2)
	assert.Equal(t, "github", st.Bindings[0].Name, "replace keeps the position")
	assert.Equal(t, int64(4), st.Bindings[0].Revision)
	assert.Equal(t, int64(4), st.Bindings[1].Revision)
	assert.Equal(t, int64(2), st.Credentials[0].Revision)

	ci, err := v.Credential("gh")
	require.NoError(t, err)
	assert.Equal(t, CredentialInfo{Name: "gh", SourceType: "inline", Revision: 2}, ci)
	_, err = v.Credential("nope")
	assert.ErrorIs(t, err, ErrNotFound)
	bi, err := v.Binding("more")
	require.NoError(t, err)
	assert.Equal(t, "bearer", bi.Auth.Type)
	_, err = v.Binding("nope")
	assert.ErrorIs(t, err, ErrNotFound)
	cl, err := v.Credentials()
	require.NoError(t, err)
	assert.Len(t, cl, 2)
	bl, err := v.Bindings()
	require.NoError(t, err)
	assert.Len(t, bl, 2)
	rule, err := v.Rule("more")
	require.NoError(t, err)
	assert.Equal(t, "other", rule.Auth.Credential)

	// Recreating continues the count.
	st, err = v.Create(basicReq(), allowAll)
	require.NoError(t, err)
	assert.Equal(t, int64(5), st.Revision)
	assert.Equal(t, int64(5), st.Credentials[0].Revision)

	require.NoError(t, v.Delete())
	assert.ErrorIs(t, v.Delete(), ErrNotFound)
	_, err = v.Get()
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = v.Credentials()
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = v.Bindings()
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = v.Credential("gh")
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = v.Patch(PatchRequest{}, allowAll)
	assert.ErrorIs(t, err, ErrNotFound)
	st, err = v.Create(basicReq(), allowAll)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.Revision, "a deleted vault starts over")
}

func TestPatchExpectedRevision(t *testing.T) {
	v := New()
	_, err := v.Create(basicReq(), allowAll)
	require.NoError(t, err)
	one, two := int64(1), int64(2)
	_, err = v.Patch(PatchRequest{ExpectedRevision: &two}, allowAll)
	require.ErrorIs(t, err, ErrRevisionConflict)
	assert.Contains(t, err.Error(), "expectedRevision 2, current revision 1")
	st, err := v.Patch(PatchRequest{ExpectedRevision: &one}, allowAll)
	require.NoError(t, err)
	assert.Equal(t, int64(2), st.Revision)
	_, err = v.Patch(PatchRequest{ExpectedRevision: &one}, allowAll)
	assert.ErrorIs(t, err, ErrRevisionConflict, "the same guard fails the second time")
}

func TestPatchAllOrNothing(t *testing.T) {
	tests := []struct {
		name string
		req  PatchRequest
		want string
	}{
		{"add existing credential", PatchRequest{Credentials: &CredentialMutations{Add: []Credential{cred("gh", "x")}}}, `credentials.add[0].name "gh": credential exists (use replace)`},
		{"replace missing credential", PatchRequest{Credentials: &CredentialMutations{Replace: []Credential{cred("zz", "x")}}}, `credentials.replace[0].name "zz": no such credential (use add)`},
		{"delete missing credential", PatchRequest{Credentials: &CredentialMutations{Delete: []string{"zz"}}}, `credentials.delete[0] "zz": no such credential`},
		{"delete used credential", PatchRequest{Credentials: &CredentialMutations{Delete: []string{"gh"}}}, `bindings[0].auth.credential "gh": no such credential`},
		{"name in two lists", PatchRequest{Credentials: &CredentialMutations{Delete: []string{"other"}, Add: []Credential{cred("other", "x")}}}, `credentials.add[0] "other": also listed at credentials.delete[0]`},
		{"bad new binding", PatchRequest{
			Credentials: &CredentialMutations{Replace: []Credential{cred("gh", "changed")}},
			Bindings:    &BindingMutations{Add: []Binding{bearer("x", "gh", "evil.example")}}}, `bindings.add[0].match.hosts[0] "evil.example": not allowed`},
		{"add existing binding", PatchRequest{Bindings: &BindingMutations{Add: []Binding{bearer("github", "gh", "a.com")}}}, `bindings.add[0].name "github": binding exists`},
		{"replace missing binding", PatchRequest{Bindings: &BindingMutations{Replace: []Binding{bearer("zz", "gh", "a.com")}}}, `bindings.replace[0].name "zz": no such binding`},
		{"delete missing binding", PatchRequest{Bindings: &BindingMutations{Delete: []string{"zz"}}}, `bindings.delete[0] "zz": no such binding`},
		{"bad credential value", PatchRequest{Credentials: &CredentialMutations{Add: []Credential{cred("n", "")}}}, "credentials.add[0].source.value: must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := New()
			before, err := v.Create(basicReq(), allowAll)
			require.NoError(t, err)
			_, err = v.Patch(tt.req, denyHost("evil.example"))
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tt.want)
			after, err := v.Get()
			require.NoError(t, err)
			assert.Equal(t, before, after, "a refused patch changes nothing")
			in := injectFor(t, v, "GET", "https://api.github.com/x")
			assert.Equal(t, []string{"ghp_secret_one"}, in.Secrets, "the old value is still in use")
		})
	}
	t.Run("delete credential with its binding", func(t *testing.T) {
		v := New()
		_, err := v.Create(basicReq(), allowAll)
		require.NoError(t, err)
		st, err := v.Patch(PatchRequest{Credentials: &CredentialMutations{Delete: []string{"gh"}},
			Bindings: &BindingMutations{Delete: []string{"github"}}}, allowAll)
		require.NoError(t, err)
		assert.Equal(t, []CredentialInfo{{Name: "other", SourceType: "inline", Revision: 1}}, st.Credentials)
		assert.Empty(t, st.Bindings)
		assert.NotNil(t, st.Bindings)
	})
}

func TestErrorsNeverContainValues(t *testing.T) {
	const value = "sup3r-s3cret-value"
	v := New()
	reqs := []CreateRequest{
		{Credentials: []Credential{cred("a", value+"\n")}},
		{Credentials: []Credential{{Name: "a", Source: Source{Type: "x", Value: NewSecret(value)}}}},
		{Credentials: []Credential{cred("a", value), cred("a", value)}},
		{Credentials: []Credential{cred("a", strings.Repeat(value, MaxValueLen))}},
	}
	for _, r := range reqs {
		_, err := v.Create(r, allowAll)
		require.Error(t, err)
		assert.NotContains(t, err.Error(), value)
	}
	var s Secret
	err := json.Unmarshal([]byte(`123`), &s)
	assert.ErrorIs(t, err, api.ErrSecretNotString)
}
