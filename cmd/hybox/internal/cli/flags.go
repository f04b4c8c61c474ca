package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// seconds is a flag holding a duration written either as a number of
// seconds ("600") or as a Go duration ("10m", "1h30m").
type seconds struct{ d time.Duration }

func (s *seconds) String() string {
	if s.d%time.Second == 0 {
		return strconv.FormatInt(int64(s.d/time.Second), 10)
	}
	return s.d.String()
}

func (s *seconds) Set(v string) error {
	d, err := parseSeconds(v)
	if err != nil {
		return err
	}
	s.d = d
	return nil
}

func (s *seconds) Type() string { return "duration" }

func parseSeconds(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("negative duration %q", v)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q is neither seconds nor a duration such as 10m", v)
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %q", v)
	}
	return d, nil
}

// parsePairs turns K=V strings into a map. An empty result is nil.
func parsePairs(what string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want KEY=VALUE", what, p)
		}
		m[k] = v
	}
	return m, nil
}

// shellJoin makes one shell command line of argv. A single argument is
// taken as a command line already (so `hybox exec ID -- 'ls | wc -l'`
// keeps its pipe); several are quoted each.
func shellJoin(argv []string) string {
	if len(argv) == 1 {
		return argv[0]
	}
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%^", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeValue prints v as indented JSON.
func writeValue(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
