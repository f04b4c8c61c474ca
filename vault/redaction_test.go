package vault

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNothingPrintsASecret formats, logs and marshals every public type
// holding or near a secret and checks the secret never shows.
func TestNothingPrintsASecret(t *testing.T) {
	const secret = "SECRET-value-0123"
	key := testKey(t)
	keyHex := hex.EncodeToString(key[:])

	c := Credential{Name: "c", Source: Source{Type: SourceInline, Value: NewSecret(secret)}}
	b := Binding{Name: "b", Match: Match{Hosts: []string{"api.test"}}, Auth: Auth{Type: AuthBearer, Credential: "c"}}
	create := CreateRequest{Credentials: []Credential{c}, Bindings: []Binding{b}}
	rev := int64(1)
	patch := PatchRequest{ExpectedRevision: &rev, Credentials: &CredentialMutations{Add: []Credential{c}, Replace: []Credential{c}}}

	v := New()
	st, err := v.Create(create, allowAll)
	require.NoError(t, err)
	req, err := http.NewRequest("GET", "https://api.test/", nil)
	require.NoError(t, err)
	in, err := v.Inject(req)
	require.NoError(t, err)
	require.Equal(t, []string{secret}, in.Secrets, "the injection does carry the secret")
	matched, err := v.Match(Request{Scheme: "https", Host: "api.test", Method: "GET", Path: "/"})
	require.NoError(t, err)
	ci, err := v.Credential("c")
	require.NoError(t, err)

	values := map[string]any{
		"Secret": NewSecret(secret), "*Secret": new(NewSecret(secret)), "Source": c.Source, "Credential": c,
		"[]Credential": []Credential{c}, "CreateRequest": create, "*CreateRequest": &create,
		"PatchRequest": patch, "CredentialMutations": *patch.Credentials, "State": st,
		"CredentialList": credentialList(st), "BindingList": bindingList(st), "CredentialInfo": ci,
		"Binding": b, "*Binding": matched, "Vault": v, "Injection": in, "*Injection": &in,
		"Key": key, "*Key": &key, "map": map[string]any{"c": c, "in": in},
	}
	for name, val := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X"} {
			out := fmt.Sprintf(verb, val)
			assert.NotContains(t, out, secret, "%s formatted with %s: %s", name, verb, out)
			assert.NotContains(t, strings.ToLower(out), keyHex, "%s formatted with %s", name, verb)
			assert.NotContains(t, out, hex.EncodeToString([]byte(secret)), "%s formatted with %s", name, verb)
		}
		if name != "Vault" { // a *Vault is not a JSON document
			data, err := json.Marshal(val)
			require.NoError(t, err, name)
			assert.NotContains(t, string(data), secret, "%s as JSON: %s", name, data)
			assert.NotContains(t, strings.ToLower(string(data)), keyHex, name)
		}
		for _, json := range []bool{false, true} {
			var buf bytes.Buffer
			h := slog.Handler(slog.NewTextHandler(&buf, nil))
			if json {
				h = slog.NewJSONHandler(&buf, nil)
			}
			slog.New(h).Info("x", "v", val)
			assert.NotContains(t, buf.String(), secret, "%s logged: %s", name, buf.String())
		}
	}
	assert.Equal(t, "[REDACTED]", fmt.Sprint(NewSecret(secret)))
	assert.Equal(t, secret, NewSecret(secret).Reveal())
	assert.Equal(t, `injection(binding "b", 1 secrets)`, fmt.Sprintf("%+v", in))
	assert.Equal(t, "vault(revision 1, 1 credentials, 1 bindings)", fmt.Sprintf("%#v", v))
	assert.Equal(t, "vault(not created)", New().String())

	var decoded Credential
	require.NoError(t, json.Unmarshal([]byte(`{"name":"c","source":{"type":"inline","value":"`+secret+`"}}`), &decoded))
	assert.Equal(t, secret, decoded.Source.Value.Reveal(), "decoding keeps the value")
}

func FuzzMatch(f *testing.F) {
	f.Add("api.example.com", "https", "GET", "/v1/*", 443, "API.example.com.", "https", "get", "/v1/x/../y", 0)
	f.Add("*.example.com", "http", "POST", "/", 8080, "a.b.example.com", "http", "POST", "/", 8080)
	f.Add("10.0.0.1", "", "", "", 0, "[::ffff:10.0.0.1]", "HTTPS", "", "", -1)
	f.Add("*.", "ftp", "G ET", "*", 70000, "", "", "", "//..", 1<<40)
	f.Fuzz(func(t *testing.T, host, scheme, method, path string, port int,
		rHost, rScheme, rMethod, rPath string, rPort int) {
		m := Match{Hosts: []string{host}}
		if scheme != "" {
			m.Schemes = []string{scheme}
		}
		if method != "" {
			m.Methods = []string{method}
		}
		if path != "" {
			m.Paths = []string{path, path + "*"}
		}
		if port != 0 {
			m.Ports = []int{port}
		}
		v := New()
		_, err := v.Create(CreateRequest{
			Credentials: []Credential{cred("c", "value")},
			Bindings:    []Binding{bind("one", m), bind("two", Match{Hosts: []string{"*.example.com"}})},
		}, allowAll)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			return
		}
		r := Request{Scheme: rScheme, Host: rHost, Method: rMethod, Path: rPath, Port: rPort}
		b, err := v.Match(r)
		if err != nil {
			require.ErrorIs(t, err, ErrAmbiguous)
		}
		if b != nil {
			assert.True(t, v.Intercepts(rHost, portOr(rScheme, rPort)) || !strings.EqualFold(rScheme, "https") && !strings.EqualFold(rScheme, "http"),
				"a matching request's destination must be intercepted")
		}
		_ = v.Intercepts(rHost, rPort)
		req := &http.Request{Method: rMethod, URL: &url.URL{Scheme: rScheme, Host: rHost, Path: rPath}, Header: http.Header{}}
		_, _ = v.Inject(req)
	})
}

func portOr(scheme string, port int) int {
	if port != 0 {
		return port
	}
	return defaultPort(strings.ToLower(scheme))
}
