package vault

import (
	"crypto/tls"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func injectFor(t testing.TB, v *Vault, method, target string) Injection {
	t.Helper()
	req, err := http.NewRequest(method, target, nil)
	require.NoError(t, err)
	in, err := v.Inject(req)
	require.NoError(t, err)
	return in
}

func authVault(t *testing.T, a Auth) *Vault {
	t.Helper()
	v := New()
	_, err := v.Create(CreateRequest{
		Credentials: []Credential{cred("tok", "t0k-value"), cred("userpass", "alice:pa55"),
			cred("pre", base64.StdEncoding.EncodeToString([]byte("bob:hunter2"))), cred("k2", "second-value")},
		Bindings: []Binding{{Name: "b", Match: Match{Hosts: []string{"api.test"}, Schemes: []string{"https", "http"}}, Auth: a}},
	}, allowAll)
	require.NoError(t, err)
	return v
}

func TestInjectAuthTypes(t *testing.T) {
	tests := []struct {
		name        string
		auth        Auth
		wantHeaders map[string]string
		wantSecrets []string
	}{
		{"bearer", Auth{Type: AuthBearer, Credential: "tok"},
			map[string]string{"Authorization": "Bearer t0k-value"}, []string{"t0k-value"}},
		{"basic user:password", Auth{Type: AuthBasic, Credential: "userpass"},
			map[string]string{"Authorization": "Basic YWxpY2U6cGE1NQ=="}, []string{"YWxpY2U6cGE1NQ==", "alice:pa55"}},
		{"basic pre-encoded (SDK form)", Auth{Type: AuthBasic, Credential: "pre"},
			map[string]string{"Authorization": "Basic Ym9iOmh1bnRlcjI="}, []string{"Ym9iOmh1bnRlcjI=", "bob:hunter2"}},
		{"apiKey", Auth{Type: AuthAPIKey, Name: "x-api-key", Credential: "tok"},
			map[string]string{"X-Api-Key": "t0k-value", "Authorization": "Bearer client-sent"}, []string{"t0k-value"}},
		{"customHeaders", Auth{Type: AuthCustomHeaders, Headers: []HeaderEntry{{Name: "X-One", Credential: "tok"}, {Name: "Authorization", Credential: "k2"}}},
			map[string]string{"X-One": "t0k-value", "Authorization": "second-value"}, []string{"second-value", "t0k-value"}},
		{"passthrough", Auth{Type: AuthPassthrough},
			map[string]string{"Authorization": "Bearer client-sent"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := authVault(t, tt.auth)
			req, err := http.NewRequest("POST", "https://api.test/v1", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer client-sent")
			req.Header.Add("X-Api-Key", "client-key")
			req.Header.Add("X-Api-Key", "client-key-2")
			req.Header["authorization"] = []string{"Bearer lower-case-sent"}
			in, err := v.Inject(req)
			require.NoError(t, err)
			assert.Equal(t, "b", in.Binding)
			for k, want := range tt.wantHeaders {
				assert.Equal(t, []string{want}, req.Header.Values(k), "header %s", k)
			}
			assert.ElementsMatch(t, tt.wantSecrets, in.Secrets)
			if tt.auth.Type == AuthBearer || tt.auth.Type == AuthBasic {
				assert.NotContains(t, req.Header, "authorization", "a non-canonical client header is removed too")
			}
		})
	}
}

func TestInjectRequestForms(t *testing.T) {
	v := authVault(t, Auth{Type: AuthBearer, Credential: "tok"})

	// Host from req.Host, scheme from TLS, explicit default port.
	req := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, Host: "API.test:443", Header: http.Header{}, TLS: &tls.ConnectionState{}}
	in, err := v.Inject(req)
	require.NoError(t, err)
	assert.Equal(t, "b", in.Binding)

	// Plain http on port 80.
	assert.Equal(t, "b", injectFor(t, v, "GET", "http://api.test/").Binding)
	// Wrong port: untouched.
	req, err = http.NewRequest("GET", "https://api.test:8443/", nil)
	require.NoError(t, err)
	in, err = v.Inject(req)
	require.NoError(t, err)
	assert.Equal(t, Injection{}, in)
	assert.Empty(t, req.Header.Get("Authorization"))

	// No host at all.
	_, err = v.Inject(&http.Request{Method: "GET", URL: &url.URL{Path: "/"}, Header: http.Header{}})
	assert.ErrorIs(t, err, ErrInvalid)
	// Bad port.
	_, err = v.Inject(&http.Request{Method: "GET", URL: &url.URL{Host: "api.test:99999", Path: "/"}, Header: http.Header{}})
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestInjectAmbiguous(t *testing.T) {
	v := mustCreate(t, bind("x", Match{Hosts: []string{"a.com"}}), bind("y", Match{Hosts: []string{"a.com"}}))
	req, err := http.NewRequest("GET", "https://a.com/", nil)
	require.NoError(t, err)
	_, err = v.Inject(req)
	require.ErrorIs(t, err, ErrAmbiguous)
	assert.Empty(t, req.Header.Get("Authorization"), "nothing is injected on a tie")
}

func TestInjectSubstitutions(t *testing.T) {
	v := authVault(t, Auth{Type: AuthBearer, Credential: "tok", Substitutions: []Substitution{
		{Credential: "k2", Placeholder: "{{K2}}", In: []string{InHeader, InPath, InQuery, InBody}},
	}})
	body := `{"key":"{{K2}}","n":1}`
	req, err := http.NewRequest("POST", "https://api.test/items/%7B%7BK2%7D%7D/x?k={{K2}}&a=1", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Secret", "pre {{K2}} post")
	in, err := v.Inject(req)
	require.NoError(t, err)
	assert.Equal(t, "pre second-value post", req.Header.Get("X-Secret"))
	assert.Equal(t, "/items/second-value/x", req.URL.Path)
	assert.Equal(t, "k=second-value&a=1", req.URL.RawQuery)
	got, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	assert.Equal(t, `{"key":"second-value","n":1}`, string(got))
	assert.Equal(t, int64(len(got)), req.ContentLength)
	assert.Equal(t, "Bearer t0k-value", req.Header.Get("Authorization"))
	assert.Contains(t, in.Secrets, "{{K2}}")
	assert.Contains(t, in.Secrets, "second-value")

	// Compressed bodies are left alone.
	req, err = http.NewRequest("POST", "https://api.test/", strings.NewReader("{{K2}}"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Content-Encoding", "gzip")
	_, err = v.Inject(req)
	require.NoError(t, err)
	got, err = io.ReadAll(req.Body)
	require.NoError(t, err)
	assert.Equal(t, "{{K2}}", string(got))

	// Form bodies are form-encoded.
	v2 := authVault(t, Auth{Type: AuthPassthrough, Substitutions: []Substitution{{Credential: "userpass", Placeholder: "PH", In: []string{InBody}}}})
	req, err = http.NewRequest("POST", "https://api.test/", strings.NewReader("a=PH"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	_, err = v2.Inject(req)
	require.NoError(t, err)
	got, err = io.ReadAll(req.Body)
	require.NoError(t, err)
	assert.Equal(t, "a=alice%3Apa55", string(got))
}

func TestRedact(t *testing.T) {
	tests := []struct {
		name    string
		in      http.Header
		secrets []string
		want    http.Header
	}{
		{"plain", http.Header{"X-Echo": {"token t0k here", "t0kt0k"}}, []string{"t0k"},
			http.Header{"X-Echo": {"token [REDACTED] here", "[REDACTED][REDACTED]"}}},
		{"base64 form", http.Header{"Www-Authenticate": {"Basic YWxpY2U6cGE1NQ== rejected"}}, []string{"alice:pa55"},
			http.Header{"Www-Authenticate": {"Basic [REDACTED] rejected"}}},
		{"longest first", http.Header{"X": {"abcdef"}}, []string{"abc", "abcdef"},
			http.Header{"X": {"[REDACTED]"}}},
		{"empty secret ignored", http.Header{"X": {"abc"}}, []string{""}, http.Header{"X": {"abc"}}},
		{"untouched", http.Header{"X": {"abc"}}, []string{"zzz"}, http.Header{"X": {"abc"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			Redact(tt.in, tt.secrets)
			assert.Equal(t, tt.want, tt.in)
		})
	}
}

func BenchmarkInject(b *testing.B) {
	var bindings []Binding
	for _, h := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		bindings = append(bindings, bind(h, Match{Hosts: []string{h + ".example.com"}, Paths: []string{"/v1/*"}}))
	}
	bindings = append(bindings, bind("wild", Match{Hosts: []string{"*.example.com"}}))
	v := mustCreate(b, bindings...)
	req, err := http.NewRequest("GET", "https://h.example.com/v1/items", nil)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		in, err := v.Inject(req)
		if err != nil || in.Binding != "h" {
			b.Fatalf("binding %q, %v", in.Binding, err)
		}
	}
}
