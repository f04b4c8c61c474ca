package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
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

// ModeOf returns the wire form of m's permission bits, setuid, setgid and
// sticky included: 0o4755 becomes 4755.
func ModeOf(m fs.FileMode) Mode {
	v := uint64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	n, _ := strconv.Atoi(strconv.FormatUint(v, 8))
	return Mode(n)
}

// FileMode converts m to an fs.FileMode with the setuid, setgid and sticky
// bits. A zero m is the zero FileMode (the API's "not given").
//
// # Errors
// When m is negative, has a digit above 7, or exceeds 7777; the message
// names the value.
func (m Mode) FileMode() (fs.FileMode, error) {
	if m == 0 {
		return 0, nil
	}
	v, err := strconv.ParseUint(strconv.Itoa(int(m)), 8, 32)
	if err != nil || m < 0 || v > 0o7777 {
		return 0, fmt.Errorf("mode %d is not an octal permission like 644 or 755", int(m))
	}
	mode := fs.FileMode(v & 0o777)
	if v&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if v&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if v&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode, nil
}
