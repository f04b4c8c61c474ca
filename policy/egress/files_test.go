package egress

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
)

func TestFilesAndEnv(t *testing.T) {
	e := newEnv(t)

	s := e.sandbox(t, Config{})
	f := s.Files()
	assert.Equal(t, []string{"/etc/resolv.conf"}, keys(f))
	assert.Contains(t, string(f["/etc/resolv.conf"]), "\nnameserver 127.0.0.53\n")
	assert.Nil(t, s.Env())
	assert.Nil(t, s.CA())
	assert.Nil(t, s.Vault())

	ca, err := tproxy.NewCA("hybox egress test sandbox")
	require.NoError(t, err)
	s = e.sandbox(t, Config{CA: ca})
	f = s.Files()
	assert.ElementsMatch(t, []string{"/etc/resolv.conf", "/etc/ssl/certs/ca-certificates.crt", "/etc/hybox/ca.crt"}, keys(f))
	assert.Equal(t, "# system bundle\n\n"+string(ca.CertPEM()), string(f["/etc/ssl/certs/ca-certificates.crt"]),
		"the host's bundle, then the sandbox's CA")
	assert.Equal(t, ca.CertPEM(), f["/etc/hybox/ca.crt"])
	assert.Equal(t, map[string]string{
		"SSL_CERT_FILE":       "/etc/ssl/certs/ca-certificates.crt",
		"REQUESTS_CA_BUNDLE":  "/etc/ssl/certs/ca-certificates.crt",
		"CURL_CA_BUNDLE":      "/etc/ssl/certs/ca-certificates.crt",
		"PIP_CERT":            "/etc/ssl/certs/ca-certificates.crt",
		"AWS_CA_BUNDLE":       "/etc/ssl/certs/ca-certificates.crt",
		"NODE_EXTRA_CA_CERTS": "/etc/hybox/ca.crt",
	}, s.Env())
	assert.Same(t, ca, s.CA())
	for _, p := range s.Env() {
		assert.Contains(t, f, p, "the environment points at a file the sandbox gets")
	}

	// The files are copies: changing one does not change the next.
	f["/etc/hybox/ca.crt"][0] = 'X'
	assert.Equal(t, ca.CertPEM(), s.Files()["/etc/hybox/ca.crt"])
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestNewChecks(t *testing.T) {
	e := newEnv(t)
	_, err := e.m.New("x", Config{Vault: vault.New()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a vault needs the sandbox's CA")

	_, err = e.m.New("x", Config{Policy: pol("", "allow exa mple.test")})
	require.Error(t, err)

	_, err = NewManager(Options{DNSUpstreams: []string{"127.0.0.1"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `dns upstream "127.0.0.1": want host:port`)
}

func TestHostResolvers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	got, err := hostResolvers(write("ok", "# comment\nsearch example\nnameserver 10.0.0.2\nnameserver ::1\nnameserver bogus\noptions edns0\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.2:53", "[::1]:53"}, got)

	_, err = hostResolvers(write("none", "search example\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "names no nameserver")

	_, err = hostResolvers(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
