package ingress_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/ingress"
)

func TestSigner(t *testing.T) {
	key := bytes.Repeat([]byte{7}, ingress.MinKeyLen)
	s, err := ingress.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ingress.NewSigner(bytes.Repeat([]byte{8}, ingress.MinKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	exp := now.Add(time.Hour)
	good := s.Sign(sbID, sbPort, exp)

	// flip changes the character at i to another base64url character.
	flip := func(tok string, i int) string {
		b := []byte(tok)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	// forge rewrites the decoded token with f and re-encodes it.
	forge := func(f func(b []byte)) string {
		b, err := base64.RawURLEncoding.DecodeString(good)
		if err != nil {
			t.Fatal(err)
		}
		f(b)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	tests := []struct {
		name    string
		token   string
		id      string
		port    int
		now     time.Time
		wantErr error
	}{
		{name: "valid", token: good, id: sbID, port: sbPort, now: now},
		{name: "valid one second before expiry", token: good, id: sbID, port: sbPort, now: exp.Add(-time.Second)},
		{name: "expired at expiry", token: good, id: sbID, port: sbPort, now: exp, wantErr: ingress.ErrExpired},
		{name: "expired after", token: good, id: sbID, port: sbPort, now: exp.Add(time.Minute), wantErr: ingress.ErrExpired},
		{name: "sub-second expiry rounds down", token: s.Sign(sbID, sbPort, now.Add(1500*time.Millisecond)), id: sbID, port: sbPort, now: now.Add(time.Second), wantErr: ingress.ErrExpired},
		{name: "other sandbox", token: good, id: "7f3a9c2e-1b4d-4e8f-9a6b-0c1d2e3f4a5c", port: sbPort, now: now, wantErr: ingress.ErrBadToken},
		{name: "other port", token: good, id: sbID, port: 8081, now: now, wantErr: ingress.ErrBadToken},
		{name: "port plus 65536", token: good, id: sbID, port: sbPort + 65536, now: now, wantErr: ingress.ErrBadToken},
		{name: "other key", token: other.Sign(sbID, sbPort, exp), id: sbID, port: sbPort, now: now, wantErr: ingress.ErrBadToken},
		{name: "id and port shifted", token: s.Sign(sbID+"-8", 80, exp), id: sbID, port: 880, now: now, wantErr: ingress.ErrBadToken},
		{name: "empty", token: "", id: sbID, port: sbPort, now: now, wantErr: ingress.ErrBadToken},
		{name: "truncated", token: good[:len(good)-1], id: sbID, port: sbPort, now: now, wantErr: ingress.ErrBadToken},
		{name: "extended", token: good + "A", id: sbID, port: sbPort, now: now, wantErr: ingress.ErrBadToken},
		{name: "padded", token: good + "=", id: sbID, port: sbPort, now: now, wantErr: ingress.ErrBadToken},
		{name: "standard base64 alphabet", token: "+" + good[1:], id: sbID, port: sbPort, now: now, wantErr: ingress.ErrBadToken},
		{name: "not base64", token: strings.Repeat("*", len(good)), id: sbID, port: sbPort, now: now, wantErr: ingress.ErrBadToken},
		{name: "later expiry forged", token: forge(func(b []byte) { b[8]++ }), id: sbID, port: sbPort, now: exp.Add(time.Hour), wantErr: ingress.ErrBadToken},
		{name: "other version", token: forge(func(b []byte) { b[0] = 2 }), id: sbID, port: sbPort, now: now, wantErr: ingress.ErrBadToken},
		{name: "MAC bit flipped", token: forge(func(b []byte) { b[len(b)-1] ^= 1 }), id: sbID, port: sbPort, now: now, wantErr: ingress.ErrBadToken},
	}
	for i := range len(good) - 1 { // the last character carries padding bits too
		tests = append(tests, struct {
			name    string
			token   string
			id      string
			port    int
			now     time.Time
			wantErr error
		}{name: fmt.Sprintf("tampered at %d", i), token: flip(good, i), id: sbID, port: sbPort, now: now, wantErr: ingress.ErrBadToken})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Verify(tc.token, tc.id, tc.port, tc.now)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Verify = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == ingress.ErrBadToken && errors.Is(err, ingress.ErrExpired) {
				t.Fatalf("a forged token is reported as expired: %v", err)
			}
		})
	}
}

func TestSignerKey(t *testing.T) {
	if _, err := ingress.NewSigner(make([]byte, ingress.MinKeyLen-1)); err == nil {
		t.Fatal("NewSigner accepted a short key")
	}
	if _, err := ingress.NewSigner(nil); err == nil {
		t.Fatal("NewSigner accepted no key")
	}
	key := []byte("super-secret-key-material-0123456789")
	s, err := ingress.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	tok := s.Sign("a", 1, time.Now().Add(time.Hour))
	key[0] = 'X' // the Signer keeps its own copy
	if err := s.Verify(tok, "a", 1, time.Now()); err != nil {
		t.Fatalf("Verify after the caller changed its key slice: %v", err)
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("signer", "s", s)
	out := buf.String() + fmt.Sprintf("%v %+v %#v %s", s, s, s, s)
	if strings.Contains(out, "secret") || strings.Contains(out, "115 117 112") || !strings.Contains(out, "REDACTED") {
		t.Fatalf("signer printed as %q", out)
	}
}
