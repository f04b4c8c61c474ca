package vault

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// Key is a 256-bit AES key for sealing vaults. It formats, logs and
// marshals as "[REDACTED]".
type Key [32]byte

// String returns "vault.Key([REDACTED])".
func (Key) String() string { return "vault.Key(" + redacted + ")" }

// Format writes String for every verb.
func (k Key) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// LogValue implements slog.LogValuer.
func (Key) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON writes "[REDACTED]".
func (Key) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// GenerateKey returns a random key.
//
// # Errors
//
// Only if the system's random source fails.
func GenerateKey() (Key, error) {
	var k Key
	if _, err := rand.Read(k[:]); err != nil {
		return Key{}, fmt.Errorf("generate vault key: %w", err)
	}
	return k, nil
}

// LoadKey reads a key from the file at path when path is not empty, else
// from env (the value of an environment variable, read by the caller). The
// text, with surrounding whitespace removed, must be 64 hexadecimal
// characters or the standard base64 (padded or not) of 32 bytes. A key
// file must not be accessible by group or others.
//
// # Errors
//
// ErrNoKey when the source is empty; ErrInvalid when the text is not a
// 32-byte key or the file's mode is too open; the os error when the file
// cannot be read. Messages never contain key material.
func LoadKey(path, env string) (Key, error) {
	text, src := env, "key from the environment"
	if path != "" {
		src = "key file " + path
		fi, err := os.Stat(path)
		if err != nil {
			return Key{}, fmt.Errorf("vault %s: %w", src, err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			return Key{}, fmt.Errorf("vault %s has mode %#o, accessible by group or others; run chmod 600 on it: %w",
				src, perm, ErrInvalid)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return Key{}, fmt.Errorf("vault %s: %w", src, err)
		}
		text = string(data)
	}
	text = strings.TrimSpace(text)
	if text == "" {
		return Key{}, fmt.Errorf("vault %s is empty: %w", src, ErrNoKey)
	}
	var k Key
	if len(text) == 2*len(k) {
		if n, err := hex.Decode(k[:], []byte(text)); err == nil && n == len(k) {
			return k, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
		if b, err := enc.DecodeString(text); err == nil && len(b) == len(k) {
			copy(k[:], b)
			clear(b)
			return k, nil
		}
	}
	return Key{}, fmt.Errorf("vault %s is not a 32-byte key (64 hex characters or base64 of 32 bytes; %d characters given): %w",
		src, len(text), ErrInvalid)
}

// Envelope: magic, version byte, 12-byte random nonce, AES-256-GCM
// ciphertext and tag. The magic, the version and the caller's additional
// data are authenticated.
const (
	sealMagic   = "hyboxvault" // a sealed vault (MarshalSealed)
	blobMagic   = "hyboxseal"  // any other sealed blob (Seal)
	sealVersion = 1
)

// Seal encrypts plaintext with key (AES-256-GCM, random nonce) in the same
// versioned envelope as a sealed vault, binding it to aad (for instance the
// sandbox id), which Open must be given again.
//
// # Errors
//
// Only on a failure of the random source.
func Seal(key Key, plaintext, aad []byte) ([]byte, error) {
	return sealEnvelope(key, blobMagic, plaintext, aad)
}

// Open decrypts what Seal produced with the same key and aad.
//
// # Errors
//
// ErrInvalid when data is not a sealed blob of a known version, was
// tampered with, or was sealed with another key or aad.
func Open(key Key, data, aad []byte) ([]byte, error) {
	return openEnvelope(key, blobMagic, "sealed blob", data, aad)
}

func sealEnvelope(key Key, magic string, plain, aad []byte) ([]byte, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	header := append([]byte(magic), sealVersion)
	out := make([]byte, len(header)+aead.NonceSize(), len(header)+aead.NonceSize()+len(plain)+aead.Overhead())
	copy(out, header)
	nonce := out[len(header):]
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal: nonce: %w", err)
	}
	return aead.Seal(out, nonce, plain, append(header, aad...)), nil
}

func openEnvelope(key Key, magic, what string, data, aad []byte) ([]byte, error) {
	if len(data) < len(magic)+1 || !bytes.Equal(data[:len(magic)], []byte(magic)) {
		return nil, fmt.Errorf("not a %s: %w", what, ErrInvalid)
	}
	if ver := data[len(magic)]; ver != sealVersion {
		return nil, fmt.Errorf("%s has unknown version %d: %w", what, ver, ErrInvalid)
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	header := data[:len(magic)+1]
	rest := data[len(header):]
	if len(rest) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%s is truncated: %w", what, ErrInvalid)
	}
	plain, err := aead.Open(nil, rest[:aead.NonceSize()], rest[aead.NonceSize():],
		append(bytes.Clone(header), aad...))
	if err != nil {
		return nil, fmt.Errorf("%s: wrong key or corrupted data: %w", what, ErrInvalid)
	}
	return plain, nil
}

// sealed is the plaintext of a sealed vault. Values are plain strings here
// (Secret would marshal redacted); it never leaves this file unencrypted.
type sealed struct {
	Created     bool            `json:"created"`
	Revision    int64           `json:"revision"`
	Credentials []sealedCred    `json:"credentials"`
	Bindings    []sealedBinding `json:"bindings"`
}

type sealedCred struct {
	Name       string `json:"name"`
	SourceType string `json:"sourceType"`
	Value      string `json:"value"`
	Revision   int64  `json:"revision"`
}

type sealedBinding struct {
	Binding  Binding `json:"binding"`
	Revision int64   `json:"revision"`
}

func newAEAD(key Key) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, fmt.Errorf("vault seal: %w", err)
	}
	return cipher.NewGCM(block)
}

// MarshalSealed encrypts the whole vault, values included, with key
// (AES-256-GCM, random nonce) for storage. A vault that was never created
// seals too and opens as such.
//
// # Errors
//
// Only on a failure of the random source or the JSON encoder.
func (v *Vault) MarshalSealed(key Key) ([]byte, error) {
	s := v.snap.Load()
	var p sealed
	if s != nil {
		p = sealed{Created: true, Revision: s.revision}
		for _, c := range s.creds {
			p.Credentials = append(p.Credentials, sealedCred{Name: c.name, SourceType: c.sourceType,
				Value: c.value.Reveal(), Revision: c.revision})
		}
		for _, b := range s.bindings {
			p.Bindings = append(p.Bindings, sealedBinding{Binding: b.b, Revision: b.revision})
		}
	}
	plain, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("vault seal: encode: %w", err)
	}
	defer clear(plain)
	return sealEnvelope(key, sealMagic, plain, nil)
}

// UnmarshalSealed replaces the vault's content with the one sealed in
// data. The opened content is validated again (without the network policy,
// which the caller checks when it applies); on any error the vault is
// unchanged.
//
// # Errors
//
// ErrInvalid when data is not a sealed vault of a known version, was
// tampered with, was sealed with another key, or holds an invalid vault.
func (v *Vault) UnmarshalSealed(key Key, data []byte) error {
	plain, err := openEnvelope(key, sealMagic, "sealed credential vault", data, nil)
	if err != nil {
		return err
	}
	defer clear(plain)
	var p sealed
	if err := json.Unmarshal(plain, &p); err != nil {
		return fmt.Errorf("sealed credential vault: malformed content: %w", ErrInvalid)
	}
	next, err := restore(p)
	if err != nil {
		return fmt.Errorf("sealed credential vault: %w", err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.snap.Store(next)
	return nil
}

// restore rebuilds and re-validates a snapshot from its sealed form.
func restore(p sealed) (*snapshot, error) {
	if !p.Created {
		return nil, nil
	}
	if p.Revision < 1 || len(p.Credentials) > MaxCredentials || len(p.Bindings) > MaxBindings {
		return nil, invalid("", "revision or sizes out of range")
	}
	s := &snapshot{revision: p.Revision, byName: map[string]*credential{}}
	for i, c := range p.Credentials {
		n, err := normCredential(idx("credentials", i), Credential{Name: c.Name,
			Source: Source{Type: c.SourceType, Value: NewSecret(c.Value)}})
		if err != nil {
			return nil, err
		}
		if s.byName[n.Name] != nil || c.Revision < 1 || c.Revision > p.Revision {
			return nil, invalidValue(idx("credentials", i), n.Name, "duplicate or bad revision")
		}
		cr := &credential{name: n.Name, sourceType: n.Source.Type, value: n.Source.Value, revision: c.Revision}
		s.creds = append(s.creds, cr)
		s.byName[cr.name] = cr
	}
	for i, b := range p.Bindings {
		n, err := normBinding(idx("bindings", i), b.Binding)
		if err != nil {
			return nil, err
		}
		if s.binding(n.Name) != nil || b.Revision < 1 || b.Revision > p.Revision {
			return nil, invalidValue(idx("bindings", i), n.Name, "duplicate or bad revision")
		}
		s.bindings = append(s.bindings, compile(n, b.Revision))
	}
	if err := s.checkRefs(); err != nil {
		return nil, err
	}
	return s, nil
}
