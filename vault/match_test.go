package vault

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustCreate(t testing.TB, bindings ...Binding) *Vault {
	t.Helper()
	v := New()
	_, err := v.Create(CreateRequest{
		Credentials: []Credential{cred("c", "value-c"), cred("d", "value-d")},
		Bindings:    bindings,
	}, allowAll)
	require.NoError(t, err)
	return v
}

func bind(name string, m Match) Binding {
	return Binding{Name: name, Match: m, Auth: Auth{Type: AuthBearer, Credential: "c"}}
}

func TestMatchPrecedence(t *testing.T) {
	v := mustCreate(t,
		bind("exact", Match{Hosts: []string{"api.example.com"}}),
		bind("wild", Match{Hosts: []string{"*.example.com"}}),
		bind("deepwild", Match{Hosts: []string{"*.eu.example.com"}}),
		bind("exact-v1", Match{Hosts: []string{"api.example.com"}, Paths: []string{"/v1/*"}}),
		bind("exact-v1-users", Match{Hosts: []string{"api.example.com"}, Paths: []string{"/v1/users"}}),
		bind("exact-v1-users-prefix", Match{Hosts: []string{"api.example.com"}, Paths: []string{"/v1/users*"}}),
		bind("wild-long-path", Match{Hosts: []string{"*.example.com"}, Paths: []string{"/v1/users/deep/*"}}),
		bind("http-only", Match{Hosts: []string{"plain.test"}, Schemes: []string{"http"}, Methods: []string{"get"}}),
		bind("port", Match{Hosts: []string{"port.test"}, Ports: []int{8443}}),
		bind("ip", Match{Hosts: []string{"10.0.0.1", "::1"}}),
		bind("tie-a", Match{Hosts: []string{"tie.test"}, Paths: []string{"/a/*"}}),
		bind("tie-b", Match{Hosts: []string{"tie.test"}, Paths: []string{"/a/*", "/b"}, Methods: []string{"GET"}}),
	)
	tests := []struct {
		name string
		req  Request
		want string // binding name; "" none; "!" ambiguous
	}{
		{"exact host, default path", Request{"https", "api.example.com", "GET", "/x", 0}, "exact"},
		{"exact host case and dot", Request{"HTTPS", "API.Example.com.", "get", "/x", 443}, "exact"},
		{"longer prefix wins", Request{"https", "api.example.com", "GET", "/v1/orders", 0}, "exact-v1"},
		{"exact path beats equal prefix", Request{"https", "api.example.com", "GET", "/v1/users", 0}, "exact-v1-users"},
		{"prefix without slash", Request{"https", "api.example.com", "GET", "/v1/users2", 0}, "exact-v1-users-prefix"},
		{"exact host beats longer wildcard path", Request{"https", "api.example.com", "GET", "/v1/users/deep/x", 0}, "exact-v1-users-prefix"},
		{"cleaned path", Request{"https", "api.example.com", "GET", "/v1/../admin", 0}, "exact"},
		{"wildcard subdomain", Request{"https", "web.example.com", "POST", "/", 0}, "wild"},
		{"wildcard any depth", Request{"https", "a.b.example.com", "POST", "/", 0}, "wild"},
		{"longer wildcard wins", Request{"https", "x.eu.example.com", "GET", "/", 0}, "deepwild"},
		{"wildcard path", Request{"https", "web.example.com", "GET", "/v1/users/deep/1", 0}, "wild-long-path"},
		{"wildcard not apex", Request{"https", "example.com", "GET", "/", 0}, ""},
		{"suffix is not a subdomain", Request{"https", "badexample.com", "GET", "/", 0}, ""},
		{"scheme filters", Request{"http", "api.example.com", "GET", "/", 0}, ""},
		{"https default port only", Request{"https", "api.example.com", "GET", "/", 8443}, ""},
		{"http binding", Request{"http", "plain.test", "GET", "/", 80}, "http-only"},
		{"http binding wrong method", Request{"http", "plain.test", "POST", "/", 80}, ""},
		{"default methods exclude HEAD", Request{"https", "api.example.com", "HEAD", "/", 0}, ""},
		{"listed port", Request{"https", "port.test", "GET", "/", 8443}, "port"},
		{"scheme port still matches", Request{"https", "port.test", "GET", "/", 443}, "port"},
		{"other port", Request{"https", "port.test", "GET", "/", 9000}, ""},
		{"ipv4", Request{"https", "10.0.0.1", "GET", "/", 0}, "ip"},
		{"ipv6 brackets", Request{"https", "[0:0::1]", "GET", "/", 0}, "ip"},
		{"unknown scheme", Request{"ftp", "api.example.com", "GET", "/", 0}, ""},
		{"tie", Request{"https", "tie.test", "GET", "/a/x", 0}, "!"},
		{"tie broken by method", Request{"https", "tie.test", "POST", "/a/x", 0}, "tie-a"},
		{"no binding", Request{"https", "other.test", "GET", "/", 0}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := v.Match(tt.req)
			switch tt.want {
			case "!":
				require.ErrorIs(t, err, ErrAmbiguous)
				assert.Contains(t, err.Error(), "tie-a, tie-b")
				assert.Nil(t, b)
			case "":
				require.NoError(t, err)
				assert.Nil(t, b)
			default:
				require.NoError(t, err)
				require.NotNil(t, b)
				assert.Equal(t, tt.want, b.Name)
			}
		})
	}
}

func TestMatchEmptyVault(t *testing.T) {
	b, err := New().Match(Request{"https", "a.com", "GET", "/", 0})
	assert.NoError(t, err)
	assert.Nil(t, b)
	assert.False(t, New().Intercepts("a.com", 443))
}

func TestMatchReturnsCopy(t *testing.T) {
	v := mustCreate(t, bind("a", Match{Hosts: []string{"a.com"}}))
	b, err := v.Match(Request{"https", "a.com", "GET", "/", 0})
	require.NoError(t, err)
	b.Match.Hosts[0] = "evil.com"
	b2, err := v.Match(Request{"https", "a.com", "GET", "/", 0})
	require.NoError(t, err)
	assert.Equal(t, "a", b2.Name)
}

func TestIntercepts(t *testing.T) {
	v := mustCreate(t,
		bind("a", Match{Hosts: []string{"api.example.com"}}),
		bind("w", Match{Hosts: []string{"*.wild.test"}, Schemes: []string{"http"}, Ports: []int{8080}}),
	)
	tests := []struct {
		host string
		port int
		want bool
	}{
		{"api.example.com", 443, true},
		{"API.example.com.", 443, true},
		{"api.example.com", 80, false},
		{"x.wild.test", 80, true},
		{"x.wild.test", 8080, true},
		{"x.wild.test", 443, false},
		{"wild.test", 80, false},
		{"other.test", 443, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, v.Intercepts(tt.host, tt.port), "%s:%d", tt.host, tt.port)
	}
}

func TestConcurrentUse(t *testing.T) {
	v := mustCreate(t, bind("a", Match{Hosts: []string{"a.com"}}))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				if i%2 == 0 {
					_, _ = v.Patch(PatchRequest{Credentials: &CredentialMutations{Replace: []Credential{cred("c", "v")}}}, allowAll)
					continue
				}
				req, _ := http.NewRequest("GET", "https://a.com/", nil)
				in, err := v.Inject(req)
				if assert.NoError(t, err) {
					assert.Equal(t, "a", in.Binding, "iteration %d", j)
				}
				_, _ = v.Get()
			}
		}()
	}
	wg.Wait()
	st, err := v.Get()
	require.NoError(t, err)
	assert.Equal(t, int64(1+4*200), st.Revision)
}
