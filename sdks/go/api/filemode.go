package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Mode is a file mode as the wire carries it (the FileMode schema, whose
// generated name FileMode is an alias of Mode): the
// octal digits written as a decimal integer, so 755 means 0o755. It
// unmarshals from a JSON number, a string of digits, or null (0: not
// given), and marshals as a number.
//
// It is written by hand because the schema's union of types has no
// generated form; the generated types use it.
type Mode int

// UnmarshalJSON implements json.Unmarshaler.
func (m *Mode) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*m = 0
		return nil
	}
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("mode %s is not an integer", b)
	}
	*m = Mode(n)
	return nil
}
