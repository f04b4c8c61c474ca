package ingress

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// MinKeyLen is the shortest key NewSigner accepts, in bytes.
const MinKeyLen = 32

// tokenVersion is the first byte of every token; a new format gets a new
// version so old tokens fail cleanly.
const tokenVersion = 1

// tokenLen is the decoded length of a token: version, expiry, MAC.
const tokenLen = 1 + 8 + sha256.Size

// macDomain separates route-token MACs from any other use of the key.
const macDomain = "hybox ingress route token\x00"

// Signer makes and checks route tokens: a token grants access to one port
// of one sandbox until an expiry. It is an HMAC-SHA256 over the sandbox id,
// the port and the expiry, with the expiry, as unpadded base64url (55
// characters). A Signer is safe for concurrent use; it logs and prints as
// REDACTED.
type Signer struct {
	key []byte
}

// NewSigner returns a Signer using key, which must hold at least MinKeyLen
// random bytes. Tokens of one key verify only with that key: changing it
// revokes every token made before.
//
// # Errors
//
// When key is shorter than MinKeyLen.
func NewSigner(key []byte) (*Signer, error) {
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("ingress: route token key has %d bytes, need at least %d", len(key), MinKeyLen)
	}
	return &Signer{key: append([]byte(nil), key...)}, nil
}

// LogValue keeps the key out of logs.
func (s *Signer) LogValue() slog.Value { return slog.StringValue("REDACTED") }

// String keeps the key out of formatted output.
func (s *Signer) String() string { return "ingress.Signer(REDACTED)" }

// GoString keeps the key out of %#v output.
func (s *Signer) GoString() string { return s.String() }

// Sign returns a token for port of sandbox id, valid until exp (rounded down
// to the second).
func (s *Signer) Sign(id string, port int, exp time.Time) string {
	var b [tokenLen]byte
	b[0] = tokenVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(exp.Unix()))
	copy(b[9:], s.mac(id, port, exp.Unix()))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Verify checks that token was made by Sign with this key for port of
// sandbox id and that now is before its expiry. The MAC is compared in
// constant time and checked before the expiry, so an expired forgery is
// reported as a bad token.
//
// # Errors
//
// An error wrapping ErrBadToken when token is malformed or not made for id
// and port with this key; one wrapping ErrExpired when it is genuine but
// expired.
func (s *Signer) Verify(token, id string, port int, now time.Time) error {
	if len(token) != base64.RawURLEncoding.EncodedLen(tokenLen) {
		return fmt.Errorf("%w: wrong length", ErrBadToken)
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(b) != tokenLen {
		return fmt.Errorf("%w: not base64url", ErrBadToken)
	}
	if b[0] != tokenVersion {
		return fmt.Errorf("%w: unknown version %d", ErrBadToken, b[0])
	}
	exp := int64(binary.BigEndian.Uint64(b[1:9]))
	if !hmac.Equal(b[9:], s.mac(id, port, exp)) {
		return fmt.Errorf("%w: not valid for port %d of sandbox %s", ErrBadToken, port, id)
	}
	if !now.Before(time.Unix(exp, 0)) {
		return fmt.Errorf("%w: expired at %s", ErrExpired, time.Unix(exp, 0).UTC().Format(time.RFC3339))
	}
	return nil
}

// Authorize checks the route token in r's HeaderRouteToken header against
// port of sandbox sandboxID at the current time. Its signature is that of
// Options.Authorize, so a Signer can be a Router's authorizer alone or be
// tried after other credentials.
//
// # Errors
//
// An error wrapping ErrUnauthorized when r carries no token, else the
// errors of Verify.
func (s *Signer) Authorize(r *http.Request, sandboxID string, port int) error {
	tok := r.Header.Get(HeaderRouteToken)
	if tok == "" {
		return fmt.Errorf("%w: a %s header is required", ErrUnauthorized, HeaderRouteToken)
	}
	return s.Verify(tok, sandboxID, port, time.Now())
}

// mac is the HMAC-SHA256 of the domain string, the length-prefixed id, the
// port and the expiry.
func (s *Signer) mac(id string, port int, exp int64) []byte {
	m := hmac.New(sha256.New, s.key)
	var n [8]byte
	m.Write([]byte(macDomain))
	binary.BigEndian.PutUint64(n[:], uint64(len(id)))
	m.Write(n[:])
	m.Write([]byte(id))
	binary.BigEndian.PutUint64(n[:], uint64(int64(port)))
	m.Write(n[:])
	binary.BigEndian.PutUint64(n[:], uint64(exp))
	m.Write(n[:])
	return m.Sum(nil)
}
