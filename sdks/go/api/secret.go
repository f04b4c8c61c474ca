package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
)

// redacted replaces a secret wherever it would be printed.
const redacted = "[REDACTED]"

// Secret is a credential value (the VaultSecret schema). It formats (fmt,
// any verb, even through fmt's error paths, which skip Format methods: the
// value sits behind a pointer, so they print an address), logs (slog) and
// marshals to JSON as "[REDACTED]"; it unmarshals from a JSON string, so a
// request body decodes into it. Reveal returns the value itself. The zero
// Secret is empty.
//
// This is the one hand-written type of the package: the generated wire
// types use it for every credential value.
type Secret struct {
	p    *string
	wire bool
}

// NewSecret wraps a value.
func NewSecret(value string) Secret { return Secret{p: &value} }

// ForWire returns a copy of s whose MarshalJSON writes the value itself. A
// client calls it on the values of a request it is about to send; nothing
// else should.
func (s Secret) ForWire() Secret { return Secret{p: s.p, wire: true} }

// Reveal returns the secret value. Call it only to put the value on the wire.
func (s Secret) Reveal() string {
	if s.p == nil {
		return ""
	}
	return *s.p
}

// IsZero reports whether no value was set.
func (s Secret) IsZero() bool { return s.p == nil }

// String returns "[REDACTED]".
func (Secret) String() string { return redacted }

// GoString returns "[REDACTED]".
func (Secret) GoString() string { return redacted }

// Format writes "[REDACTED]" for every verb.
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON writes "[REDACTED]": values are write-only. Only a copy made
// by ForWire marshals the value.
func (s Secret) MarshalJSON() ([]byte, error) {
	if s.wire {
		return json.Marshal(s.Reveal())
	}
	return []byte(`"` + redacted + `"`), nil
}

// MarshalText writes "[REDACTED]".
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// ErrSecretNotString is returned when a credential value is not a JSON string.
var ErrSecretNotString = errors.New("credential value must be a string")

// UnmarshalJSON reads a JSON string.
func (s *Secret) UnmarshalJSON(data []byte) error {
	var v string
	if err := json.Unmarshal(data, &v); err != nil {
		return ErrSecretNotString
	}
	*s = NewSecret(v)
	return nil
}
