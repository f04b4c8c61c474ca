package tproxy_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/vault/tproxy"
)

func TestNewCA(t *testing.T) {
	ca, err := tproxy.NewCA("sandbox 42")
	require.NoError(t, err)
	cert := ca.Certificate()
	assert.True(t, cert.IsCA)
	assert.Equal(t, "sandbox 42", cert.Subject.CommonName)
	assert.Equal(t, x509.ECDSA, cert.PublicKeyAlgorithm)
	assert.Equal(t, elliptic.P256(), cert.PublicKey.(*ecdsa.PublicKey).Curve)
	assert.True(t, cert.MaxPathLenZero)
	assert.WithinDuration(t, time.Now().Add(10*365*24*time.Hour), cert.NotAfter, time.Minute)
	assert.NotEmpty(t, cert.SubjectKeyId)

	_, err = tproxy.NewCA("  ")
	require.Error(t, err)
}

func TestLoadCA(t *testing.T) {
	ca, err := tproxy.NewCA("sandbox")
	require.NoError(t, err)
	other, err := tproxy.NewCA("other")
	require.NoError(t, err)
	ecKey, _ := pem.Decode(ca.KeyPEM())
	k, err := x509.ParsePKCS8PrivateKey(ecKey.Bytes)
	require.NoError(t, err)
	sec1, err := x509.MarshalECPrivateKey(k.(*ecdsa.PrivateKey))
	require.NoError(t, err)
	sec1PEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})
	// A leaf of another CA is not a CA.
	leaf, err := other.Leaf("x.test")
	require.NoError(t, err)
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]})
	leafKey, err := x509.MarshalPKCS8PrivateKey(leaf.PrivateKey)
	require.NoError(t, err)
	leafKeyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: leafKey})

	tests := []struct {
		name         string
		certPEM, key []byte
		wantErr      string
	}{
		{name: "PKCS8 round trip", certPEM: ca.CertPEM(), key: ca.KeyPEM()},
		{name: "SEC1 key", certPEM: ca.CertPEM(), key: sec1PEM},
		{name: "mismatched key", certPEM: ca.CertPEM(), key: other.KeyPEM(), wantErr: "does not match"},
		{name: "not a CA", certPEM: leafPEM, key: leafKeyPEM, wantErr: "not a signing CA"},
		{name: "garbage cert", certPEM: []byte("nope"), key: ca.KeyPEM(), wantErr: "no CERTIFICATE"},
		{name: "garbage key", certPEM: ca.CertPEM(), key: []byte("nope"), wantErr: "no private key"},
		{name: "key in cert slot", certPEM: ca.KeyPEM(), key: ca.KeyPEM(), wantErr: "no CERTIFICATE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tproxy.LoadCA(tt.certPEM, tt.key)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, ca.CertPEM(), got.CertPEM())
			// Leaves of the loaded CA verify against the original.
			l, err := got.Leaf("api.example.test")
			require.NoError(t, err)
			_, err = l.Leaf.Verify(x509VerifyOptions(poolOf(t, ca), "api.example.test"))
			require.NoError(t, err)
		})
	}
}

func TestLeaf(t *testing.T) {
	ca, err := tproxy.NewCA("sandbox")
	require.NoError(t, err)
	pool := poolOf(t, ca)

	a, err := ca.Leaf("api.example.test")
	require.NoError(t, err)
	b, err := ca.Leaf("API.Example.Test.")
	require.NoError(t, err)
	assert.Same(t, a, b, "cached, case- and dot-insensitive")
	c, err := ca.Leaf("other.example.test")
	require.NoError(t, err)
	assert.NotSame(t, a, c)
	assert.EqualValues(t, 2, tproxy.LeavesGenerated(ca))

	assert.Equal(t, []string{"api.example.test"}, a.Leaf.DNSNames)
	assert.Empty(t, a.Leaf.IPAddresses)
	assert.False(t, a.Leaf.IsCA)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, a.Leaf.ExtKeyUsage)
	assert.WithinDuration(t, time.Now().Add(7*24*time.Hour), a.Leaf.NotAfter, time.Minute)
	_, err = a.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "api.example.test"})
	require.NoError(t, err)
	_, err = a.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "evil.example.test"})
	require.Error(t, err)

	for _, host := range []string{"192.0.2.7", "2001:db8::1", "[2001:db8::2]"} {
		l, err := ca.Leaf(host)
		require.NoError(t, err, host)
		require.Len(t, l.Leaf.IPAddresses, 1)
		assert.Empty(t, l.Leaf.DNSNames)
		ip := net.ParseIP(l.Leaf.IPAddresses[0].String())
		_, err = l.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: ip.String()})
		require.NoError(t, err, host)
	}

	for _, bad := range []string{"", ".", "a..b", "bad host", "x/y", "\x00", "a.-b?"} {
		_, err := ca.Leaf(bad)
		require.ErrorIs(t, err, tproxy.ErrInvalidHost, "%q", bad)
	}
}

func TestLeafConcurrentGeneratesOnce(t *testing.T) {
	ca, err := tproxy.NewCA("sandbox")
	require.NoError(t, err)
	const n = 64
	certs := make([]any, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			host := "api.example.test"
			if i%2 == 1 {
				host = "other.example.test"
			}
			c, err := ca.Leaf(host)
			assert.NoError(t, err)
			certs[i] = c
		})
	}
	close(start)
	wg.Wait()
	for i := 2; i < n; i++ {
		assert.Same(t, certs[i%2], certs[i])
	}
	assert.EqualValues(t, 2, tproxy.LeavesGenerated(ca), "one certificate per host")
}

func BenchmarkLeafCached(b *testing.B) {
	ca, err := tproxy.NewCA("sandbox")
	require.NoError(b, err)
	_, err = ca.Leaf("api.example.test")
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ca.Leaf("api.example.test"); err != nil {
			b.Fatal(err)
		}
	}
}
