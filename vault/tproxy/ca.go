package tproxy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// caLifetime is how long a sandbox CA made by NewCA is valid.
	caLifetime = 10 * 365 * 24 * time.Hour
	// leafLifetime is how long a leaf certificate is valid (never past the
	// CA's own expiry).
	leafLifetime = 7 * 24 * time.Hour
	// clockSkew backdates certificates so that a client whose clock is a
	// little behind still accepts them.
	clockSkew = time.Hour
	// maxLeaves bounds the leaf cache; past it, finished entries are dropped
	// and made again on demand.
	maxLeaves = 4096
)

// ErrInvalidHost is returned (wrapped) by CA.Leaf for a host that is neither
// an IP address nor a syntactically valid DNS name.
var ErrInvalidHost = errors.New("invalid host name")

// CA is one sandbox's certificate authority: an ECDSA P-256 root that the
// sandbox trusts and that signs the short-lived leaf certificates the proxy
// presents for intercepted hosts. A CA is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte

	mu     sync.Mutex
	leaves map[string]*leafEntry
	// generated counts leaf certificates made, for tests.
	generated atomic.Int64
}

// leafEntry is one host's cached leaf. ready is closed once cert and err are
// set; concurrent callers for the same host wait on it instead of making a
// second certificate.
type leafEntry struct {
	ready   chan struct{}
	cert    *tls.Certificate
	err     error
	renewAt time.Time
}

// NewCA makes a new root CA for one sandbox: an ECDSA P-256 key and a
// self-signed certificate named commonName, valid for ten years, that may
// sign end-entity certificates only.
//
// # Errors
//
// An empty commonName, or a failure of the system's random source.
func NewCA(commonName string) (*CA, error) {
	if strings.TrimSpace(commonName) == "" {
		return nil, errors.New("tproxy: new CA: empty common name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tproxy: new CA: generate key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("tproxy: new CA: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"hybox"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("tproxy: new CA: sign certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tproxy: new CA: parse certificate: %w", err)
	}
	return newCA(cert, key)
}

// LoadCA restores a CA from the PEM encodings that CertPEM and KeyPEM
// returned. The key may be PKCS #8 ("PRIVATE KEY") or SEC 1 ("EC PRIVATE
// KEY").
//
// # Errors
//
// Malformed PEM or DER, a certificate that is not a CA able to sign
// certificates, a key that is not ECDSA or does not match the certificate,
// or a certificate that has expired.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("tproxy: load CA: no CERTIFICATE PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tproxy: load CA: parse certificate: %w", err)
	}
	if !cert.BasicConstraintsValid || !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errors.New("tproxy: load CA: certificate is not a signing CA")
	}
	if time.Now().After(cert.NotAfter) {
		return nil, fmt.Errorf("tproxy: load CA: certificate expired at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("tproxy: load CA: no private key PEM block")
	}
	var key *ecdsa.PrivateKey
	switch kb.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tproxy: load CA: parse key: %w", err)
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("tproxy: load CA: key is %T, want ECDSA", k)
		}
		key = ek
	case "EC PRIVATE KEY":
		if key, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
			return nil, fmt.Errorf("tproxy: load CA: parse key: %w", err)
		}
	default:
		return nil, fmt.Errorf("tproxy: load CA: unexpected key PEM block %q", kb.Type)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("tproxy: load CA: key does not match certificate")
	}
	return newCA(cert, key)
}

func newCA(cert *x509.Certificate, key *ecdsa.PrivateKey) (*CA, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("tproxy: encode CA key: %w", err)
	}
	return &CA{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		leaves:  make(map[string]*leafEntry),
	}, nil
}

// CertPEM returns the CA certificate in PEM form: what the sandbox installs
// in its trust store.
func (c *CA) CertPEM() []byte { return bytes.Clone(c.certPEM) }

// KeyPEM returns the CA private key in PKCS #8 PEM form. It is secret: the
// caller persists it only encrypted.
func (c *CA) KeyPEM() []byte { return bytes.Clone(c.keyPEM) }

// Certificate returns the parsed CA certificate. The caller must not modify
// it.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// Leaf returns a certificate for host signed by the CA: a DNS name SAN for a
// name, an IP SAN for an IP address (bracketed IPv6 literals are accepted).
// Names are matched case-insensitively and without a trailing dot. The leaf
// is valid for seven days at most and is cached per host; it is made again
// once it is past six sevenths of its lifetime. Concurrent calls for the
// same host make one certificate and all return it.
//
// # Errors
//
// ErrInvalidHost (wrapped) for a malformed host; a signing failure, or a CA
// that has expired.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	name, ip, err := leafName(host)
	if err != nil {
		return nil, err
	}
	for {
		c.mu.Lock()
		e := c.leaves[name]
		if e == nil {
			break // c.mu still held
		}
		c.mu.Unlock()
		<-e.ready
		if e.err != nil {
			return nil, e.err
		}
		if time.Now().Before(e.renewAt) {
			return e.cert, nil
		}
		// Stale: drop it (unless someone already replaced it) and retry.
		c.mu.Lock()
		if c.leaves[name] == e {
			delete(c.leaves, name)
		}
		c.mu.Unlock()
	}
	if len(c.leaves) >= maxLeaves {
		for k, old := range c.leaves {
			select {
			case <-old.ready:
				delete(c.leaves, k)
			default:
			}
		}
	}
	e := &leafEntry{ready: make(chan struct{})}
	c.leaves[name] = e
	c.mu.Unlock()

	e.cert, e.renewAt, e.err = c.newLeaf(name, ip)
	if e.err != nil {
		c.mu.Lock()
		if c.leaves[name] == e {
			delete(c.leaves, name)
		}
		c.mu.Unlock()
	}
	close(e.ready)
	return e.cert, e.err
}

// newLeaf signs a fresh leaf for name (or ip, when valid) and says when it
// should be replaced.
func (c *CA) newLeaf(name string, ip netip.Addr) (*tls.Certificate, time.Time, error) {
	now := time.Now()
	notAfter := now.Add(leafLifetime)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, time.Time{}, fmt.Errorf("tproxy: leaf for %q: CA expired at %s", name, c.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("tproxy: leaf for %q: generate key: %w", name, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("tproxy: leaf for %q: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if ip.IsValid() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("tproxy: leaf for %q: sign: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("tproxy: leaf for %q: parse: %w", name, err)
	}
	c.generated.Add(1)
	renewAt := now.Add(notAfter.Sub(now) * 6 / 7)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, renewAt, nil
}

// leafName normalizes a host for the leaf cache: an IP address in canonical
// form (with ip set), or a lower-case DNS name without a trailing dot.
func leafName(host string) (string, netip.Addr, error) {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	// Only what could be an address is parsed as one: a failed parse
	// allocates, and names are the common case.
	if strings.IndexByte(h, ':') >= 0 || strings.Trim(h, "0123456789.") == "" {
		if ip, err := netip.ParseAddr(h); err == nil && ip.Zone() == "" {
			ip = ip.Unmap()
			return ip.String(), ip, nil
		}
	}
	name := normalizeName(host)
	if !validDNSName(name) {
		return "", netip.Addr{}, fmt.Errorf("tproxy: leaf for %q: %w", host, ErrInvalidHost)
	}
	return name, netip.Addr{}, nil
}

// normalizeName lower-cases a DNS name and drops one trailing dot.
func normalizeName(s string) string {
	return strings.ToLower(strings.TrimSuffix(s, "."))
}

// validDNSName reports whether s is a plausible host name: 1 to 253 bytes of
// dot-separated labels of 1 to 63 letters, digits, hyphens or underscores.
func validDNSName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	label := 0
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '.':
			if label == 0 {
				return false
			}
			label = 0
			continue
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '-', ch == '_':
		default:
			return false
		}
		label++
		if label > 63 {
			return false
		}
	}
	return label > 0
}

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("random serial number: %w", err)
	}
	return serial, nil
}
