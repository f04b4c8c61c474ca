package ingress

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantID   string
		wantPort int
		wantErr  bool
	}{
		{name: "uuid", in: "7f3a9c2e-1b4d-4e8f-9a6b-0c1d2e3f4a5b-8080", wantID: "7f3a9c2e-1b4d-4e8f-9a6b-0c1d2e3f4a5b", wantPort: 8080},
		{name: "plain", in: "abc-1", wantID: "abc", wantPort: 1},
		{name: "max port", in: "a_b-65535", wantID: "a_b", wantPort: 65535},
		{name: "id ending in hyphen", in: "abc--80", wantID: "abc-", wantPort: 80},
		{name: "lone hyphen", in: "-", wantErr: true},
		{name: "no port", in: "abc-", wantErr: true},
		{name: "no id", in: "-80", wantErr: true},
		{name: "port too big", in: "x-99999", wantErr: true},
		{name: "port 65536", in: "x-65536", wantErr: true},
		{name: "port zero", in: "x-0", wantErr: true},
		{name: "leading zero", in: "x-080", wantErr: true},
		{name: "plus sign", in: "x-+80", wantErr: true},
		{name: "six digits", in: "x-000080", wantErr: true},
		{name: "no hyphen", in: "x80", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "dot in id", in: "a.b-80", wantErr: true},
		{name: "slash in id", in: "a/b-80", wantErr: true},
		{name: "space", in: "a b-80", wantErr: true},
		{name: "unicode", in: "é-80", wantErr: true},
		{name: "long id", in: strings.Repeat("a", maxIDLen+1) + "-80", wantErr: true},
		{name: "longest id", in: strings.Repeat("a", maxIDLen) + "-80", wantID: strings.Repeat("a", maxIDLen), wantPort: 80},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, port, err := ParseTarget(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrBadTarget) {
					t.Fatalf("ParseTarget(%q) = %q %d %v, want ErrBadTarget", tc.in, id, port, err)
				}
				return
			}
			if err != nil || id != tc.wantID || port != tc.wantPort {
				t.Fatalf("ParseTarget(%q) = %q %d %v, want %q %d", tc.in, id, port, err, tc.wantID, tc.wantPort)
			}
		})
	}
}

func TestParseHost(t *testing.T) {
	const d = "sbx.example.test"
	tests := []struct {
		name     string
		host     string
		wantOK   bool
		wantErr  bool
		wantID   string
		wantPort int
	}{
		{name: "plain", host: "ab-cd-80." + d, wantOK: true, wantID: "ab-cd", wantPort: 80},
		{name: "with port", host: "ab-80." + d + ":8443", wantOK: true, wantID: "ab", wantPort: 80},
		{name: "upper case", host: "AB-80.SBX.EXAMPLE.TEST", wantOK: true, wantID: "ab", wantPort: 80},
		{name: "trailing dot", host: "ab-80." + d + ".", wantOK: true, wantID: "ab", wantPort: 80},
		{name: "trailing dot and port", host: "ab-80." + d + ".:80", wantOK: true, wantID: "ab", wantPort: 80},
		{name: "domain itself", host: d},
		{name: "other domain", host: "ab-80.example.test"},
		{name: "suffix without dot", host: "ab-80x" + d},
		{name: "ipv6", host: "[::1]:8080"},
		{name: "empty", host: ""},
		{name: "bad label", host: "ab." + d, wantOK: true, wantErr: true},
		{name: "deep", host: "x.ab-80." + d, wantOK: true, wantErr: true},
		{name: "empty label", host: "." + d},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, port, ok, err := parseHost(tc.host, d)
			if ok != tc.wantOK || (err != nil) != tc.wantErr {
				t.Fatalf("parseHost(%q) = %q %d %v %v", tc.host, id, port, ok, err)
			}
			if err == nil && ok && (id != tc.wantID || port != tc.wantPort) {
				t.Fatalf("parseHost(%q) = %q %d, want %q %d", tc.host, id, port, tc.wantID, tc.wantPort)
			}
		})
	}
	if _, _, ok, _ := parseHost("ab-80.x", ""); ok {
		t.Error("host routing without a domain")
	}
}

func TestParsePath(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantID   string
		wantPort int
		wantRest string
		wantErr  bool
	}{
		{name: "rest", in: "/a-b/80/x/y", wantID: "a-b", wantPort: 80, wantRest: "/x/y"},
		{name: "slash", in: "/a/80/", wantID: "a", wantPort: 80, wantRest: "/"},
		{name: "bare", in: "/a/80", wantID: "a", wantPort: 80, wantRest: "/"},
		{name: "escapes kept", in: "/a/80/%2F%25", wantID: "a", wantPort: 80, wantRest: "/%2F%25"},
		{name: "double slash kept", in: "/a/80//x", wantID: "a", wantPort: 80, wantRest: "//x"},
		{name: "root", in: "/", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "star", in: "*", wantErr: true},
		{name: "no port", in: "/a", wantErr: true},
		{name: "empty port", in: "/a//x", wantErr: true},
		{name: "empty id", in: "//80/x", wantErr: true},
		{name: "dotdot id", in: "/../80/x", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, port, rest, err := parsePath(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrBadTarget) {
					t.Fatalf("parsePath(%q) = %q %d %q %v, want ErrBadTarget", tc.in, id, port, rest, err)
				}
				return
			}
			if err != nil || id != tc.wantID || port != tc.wantPort || rest != tc.wantRest {
				t.Fatalf("parsePath(%q) = %q %d %q %v", tc.in, id, port, rest, err)
			}
		})
	}
}

func TestForwardedPrefix(t *testing.T) {
	tests := []struct{ name, in, path, want string }{
		{name: "nothing stripped", in: "/a/b", path: "/a/b", want: ""},
		{name: "stripped", in: "/id/80/a", path: "/a", want: "/id/80"},
		{name: "bare", in: "/id/80", path: "/", want: "/id/80"},
		{name: "slash", in: "/id/80/", path: "/", want: "/id/80"},
		{name: "unrelated", in: "/x", path: "/y", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := forwardedPrefix(tc.in, tc.path); got != tc.want {
				t.Errorf("forwardedPrefix(%q, %q) = %q, want %q", tc.in, tc.path, got, tc.want)
			}
		})
	}
}

// FuzzParseTarget checks that ParseTarget accepts exactly the canonical
// "<id>-<port>" strings and refuses the rest with ErrBadTarget.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"-", "abc-", "x-99999", "7f3a9c2e-1b4d-4e8f-9a6b-0c1d2e3f4a5b-8080", "a--1", "a-065535", "é-1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, port, err := ParseTarget(s)
		if err != nil {
			if !errors.Is(err, ErrBadTarget) {
				t.Fatalf("ParseTarget(%q): error %v does not wrap ErrBadTarget", s, err)
			}
			return
		}
		if port < 1 || port > 65535 || checkID(id) != nil {
			t.Fatalf("ParseTarget(%q) = %q %d", s, id, port)
		}
		if canon := id + "-" + strconv.Itoa(port); canon != s {
			t.Fatalf("ParseTarget(%q) accepted a non-canonical form of %q", s, canon)
		}
	})
}

// FuzzParseHost checks that host routing only claims hosts strictly below
// the domain and yields ids that parse back.
func FuzzParseHost(f *testing.F) {
	const d = "sbx.example.test"
	for _, s := range []string{"ab-80." + d, "AB-80." + d + ".:1", d, "[::1]:80", "x.ab-80." + d, "-." + d, ":" + d} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		id, port, ok, err := parseHost(host, d)
		if !ok {
			if err != nil || id != "" {
				t.Fatalf("parseHost(%q) not claimed but returned %q %v", host, id, err)
			}
			return
		}
		if !strings.HasSuffix(hostname(host), "."+d) {
			t.Fatalf("parseHost(%q) claimed a host outside the domain", host)
		}
		if err != nil {
			if !errors.Is(err, ErrBadTarget) {
				t.Fatalf("parseHost(%q): %v", host, err)
			}
			return
		}
		if id != strings.ToLower(id) {
			t.Fatalf("parseHost(%q) id %q not lower-cased", host, id)
		}
		if id2, port2, err := ParseTarget(id + "-" + strconv.Itoa(port)); err != nil || id2 != id || port2 != port {
			t.Fatalf("parseHost(%q) = %q %d does not round-trip: %v", host, id, port, err)
		}
	})
}

// FuzzParsePath checks that path routing yields valid ids, ports and a
// rest that is a suffix of the path.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/a/80/x", "/", "//80", "/a/80", "/a/080/", "/a/80/%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		id, port, rest, err := parsePath(p)
		if err != nil {
			if !errors.Is(err, ErrBadTarget) {
				t.Fatalf("parsePath(%q): %v", p, err)
			}
			return
		}
		if checkID(id) != nil || port < 1 || port > 65535 || !strings.HasPrefix(rest, "/") {
			t.Fatalf("parsePath(%q) = %q %d %q", p, id, port, rest)
		}
		if want := "/" + id + "/" + strconv.Itoa(port) + rest; want != p && want != p+"/" {
			t.Fatalf("parsePath(%q) = %q %d %q loses bytes", p, id, port, rest)
		}
	})
}
