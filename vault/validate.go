package vault

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Sentinel errors. Every error the package returns matches (errors.Is) one
// of them, so the HTTP layer maps them to statuses in one place.
var (
	// ErrNotFound: no vault was created, or no credential/binding has that name.
	ErrNotFound = fmt.Errorf("credential vault: %w", errdefs.ErrNotFound)
	// ErrRevisionConflict: a patch's expectedRevision is not the current revision.
	ErrRevisionConflict = errdefs.New(api.ErrorCodeREVISIONCONFLICT, "credential vault: revision conflict")
	// ErrAmbiguous: two or more bindings match a request equally well.
	ErrAmbiguous = errors.New("credential vault: ambiguous binding match")
	// ErrInvalid: a request, a sealed blob or a key is malformed.
	ErrInvalid = fmt.Errorf("invalid credential vault request: %w", errdefs.ErrInvalid)
	// ErrNoKey: no key was configured for sealing the vault.
	ErrNoKey = errors.New("the credential vault needs a key: set a key file or a key in the environment " +
		"(32 bytes written as 64 hex characters or base64)")
)

// Limits on a vault's contents.
const (
	MaxCredentials = 256
	MaxBindings    = 256
	MaxValueLen    = 16 << 10
	maxNameLen     = 256
	maxListLen     = 64
	maxHostLen     = 253
	maxPathLen     = 2048
)

// InvalidError describes why a request was refused, naming the JSON field,
// e.g. `bindings[1].match.hosts[0] "exa mple.com": not a host name`. It
// never contains a credential value. It matches ErrInvalid; Err, when set,
// is the cause (for instance the network policy's denial).
type InvalidError struct {
	Field  string
	Value  string // quoted in the message when non-empty; never a secret
	Reason string
	Err    error
}

// Error implements error.
func (e *InvalidError) Error() string {
	var b strings.Builder
	b.WriteString(e.Field)
	if e.Value != "" {
		b.WriteString(" " + strconv.Quote(e.Value))
	}
	if e.Field != "" || e.Value != "" {
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

// Is reports whether target is ErrInvalid (or the kind it belongs to).
func (e *InvalidError) Is(target error) bool {
	return target == ErrInvalid || target == errdefs.ErrInvalid
}

// Unwrap returns the cause, if any.
func (e *InvalidError) Unwrap() error { return e.Err }

func invalid(field, reason string) error { return &InvalidError{Field: field, Reason: reason} }

func invalidValue(field, value, reason string) error {
	if len(value) > 80 {
		value = value[:80] + "..."
	}
	return &InvalidError{Field: field, Value: value, Reason: reason}
}

func idx(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

// checkName validates a credential or binding name: it appears in URLs.
func checkName(field, name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return invalid(field, "must not be blank")
	case len(name) > maxNameLen:
		return invalid(field, "longer than "+strconv.Itoa(maxNameLen)+" bytes")
	case strings.ContainsAny(name, "/\\") || hasControl(name):
		return invalidValue(field, name, "must not contain slashes or control characters")
	}
	return nil
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// normCredential validates c and returns it with its source type filled in.
// The error never mentions the value.
func normCredential(field string, c Credential) (Credential, error) {
	if err := checkName(field+".name", c.Name); err != nil {
		return c, err
	}
	switch c.Source.Type {
	case "", SourceInline:
		c.Source.Type = SourceInline
	default:
		return c, invalidValue(field+".source.type", c.Source.Type, `unsupported source type (only "inline")`)
	}
	v := c.Source.Value.Reveal()
	switch {
	case v == "":
		return c, invalid(field+".source.value", "must not be empty")
	case len(v) > MaxValueLen:
		return c, invalid(field+".source.value", "longer than "+strconv.Itoa(MaxValueLen)+" bytes")
	case strings.ContainsAny(v, "\r\n\x00"):
		return c, invalid(field+".source.value", "must not contain CR, LF or NUL (it is sent in a header)")
	}
	return c, nil
}

// defaultMethods are the methods a binding matches when it lists none.
var defaultMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}

// normBinding validates b (credential references are checked by the
// caller) and returns its normalized form: lower-case hosts without a
// trailing dot, upper-case methods, defaults filled in.
func normBinding(field string, b Binding) (Binding, error) {
	if err := checkName(field+".name", b.Name); err != nil {
		return b, err
	}
	m, err := normMatch(field+".match", b.Match)
	if err != nil {
		return b, err
	}
	a, err := normAuth(field+".auth", b.Auth)
	if err != nil {
		return b, err
	}
	return Binding{Name: b.Name, Match: m, Auth: a}, nil
}

func normMatch(field string, m Match) (Match, error) {
	var out Match
	if len(m.Hosts) == 0 {
		return out, invalid(field+".hosts", "must list at least one host")
	}
	for _, l := range []struct {
		name string
		n    int
	}{{"hosts", len(m.Hosts)}, {"schemes", len(m.Schemes)}, {"ports", len(m.Ports)},
		{"methods", len(m.Methods)}, {"paths", len(m.Paths)}} {
		if l.n > maxListLen {
			return out, invalid(field+"."+l.name, "more than "+strconv.Itoa(maxListLen)+" entries")
		}
	}
	for i, h := range m.Hosts {
		n, err := normHostPattern(h)
		if err != "" {
			return out, invalidValue(idx(field+".hosts", i), h, err)
		}
		if !slices.Contains(out.Hosts, n) {
			out.Hosts = append(out.Hosts, n)
		}
	}
	for i, s := range m.Schemes {
		l := strings.ToLower(s)
		if l != SchemeHTTP && l != SchemeHTTPS {
			return out, invalidValue(idx(field+".schemes", i), s, `must be "http" or "https"`)
		}
		if !slices.Contains(out.Schemes, l) {
			out.Schemes = append(out.Schemes, l)
		}
	}
	if len(out.Schemes) == 0 {
		out.Schemes = []string{SchemeHTTPS}
	}
	for i, p := range m.Ports {
		if p < 1 || p > 65535 {
			return out, invalidValue(idx(field+".ports", i), strconv.Itoa(p), "must be between 1 and 65535")
		}
		if !slices.Contains(out.Ports, p) {
			out.Ports = append(out.Ports, p)
		}
	}
	for i, meth := range m.Methods {
		u := strings.ToUpper(meth)
		if !isToken(u) {
			return out, invalidValue(idx(field+".methods", i), meth, "not an HTTP method")
		}
		if !slices.Contains(out.Methods, u) {
			out.Methods = append(out.Methods, u)
		}
	}
	if len(out.Methods) == 0 {
		out.Methods = slices.Clone(defaultMethods)
	}
	for i, p := range m.Paths {
		if reason := checkPathPattern(p); reason != "" {
			return out, invalidValue(idx(field+".paths", i), p, reason)
		}
		if !slices.Contains(out.Paths, p) {
			out.Paths = append(out.Paths, p)
		}
	}
	if len(out.Paths) == 0 {
		out.Paths = []string{"/*"}
	}
	return out, nil
}

// normHostPattern lower-cases a host pattern, drops one trailing dot and
// checks it is a domain name, an IP address or "*." followed by a domain.
// It returns the normalized pattern or a reason for refusing it.
func normHostPattern(h string) (string, string) {
	n := strings.ToLower(strings.TrimSpace(h))
	n = strings.TrimSuffix(n, ".")
	if n == "" {
		return "", "must not be blank"
	}
	if len(n) > maxHostLen {
		return "", "longer than 253 characters"
	}
	if strings.HasPrefix(n, "[") && strings.HasSuffix(n, "]") {
		n = n[1 : len(n)-1]
	}
	if a, err := netip.ParseAddr(n); err == nil {
		if a.Zone() != "" {
			return "", "an address with a zone cannot be matched"
		}
		return a.Unmap().String(), ""
	}
	if rest, ok := strings.CutPrefix(n, "*."); ok {
		if r := checkDomain(rest); r != "" {
			return "", r
		}
		return n, ""
	}
	if r := checkDomain(n); r != "" {
		return "", r
	}
	return n, ""
}

// checkDomain validates a lower-case domain: dot-separated labels of 1 to
// 63 letters, digits, hyphens or underscores, not all numeric.
func checkDomain(d string) string {
	numeric := true
	for label := range strings.SplitSeq(d, ".") {
		if label == "" {
			return "empty label in host name"
		}
		if len(label) > 63 {
			return "label longer than 63 characters"
		}
		for i := 0; i < len(label); i++ {
			switch c := label[i]; {
			case c >= 'a' && c <= 'z', c == '-', c == '_':
				numeric = false
			case c >= '0' && c <= '9':
			case c == '*':
				return `"*" is only allowed as a whole leading label ("*.example.com")`
			default:
				return "not a host name, IP address or wildcard (*.example.com)"
			}
		}
	}
	if numeric {
		return "not a host name or IP address"
	}
	return ""
}

// checkPathPattern: a path starts with "/" and may end in "*" (a prefix);
// "*" appears nowhere else.
func checkPathPattern(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return `must start with "/"`
	case len(p) > maxPathLen:
		return "longer than " + strconv.Itoa(maxPathLen) + " bytes"
	case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
		return `"*" is only allowed at the end (a prefix match)`
	case hasControl(p) || strings.ContainsAny(p, " ?#"):
		return "must not contain spaces, control characters, ? or #"
	}
	return ""
}

// isToken reports whether s is a non-empty RFC 9110 token (methods and
// header names).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// reservedHeaders may not be set by a binding: they frame the message or
// route it.
var reservedHeaders = []string{"host", "content-length", "transfer-encoding", "connection",
	"upgrade", "te", "trailer", "keep-alive", "proxy-connection", "expect"}

func checkHeaderName(field, name string) error {
	if !isToken(name) {
		return invalidValue(field, name, "not a valid header name")
	}
	if slices.Contains(reservedHeaders, strings.ToLower(name)) {
		return invalidValue(field, name, "this header cannot be set by a binding")
	}
	return nil
}

func normAuth(field string, a Auth) (Auth, error) {
	out := Auth{Type: a.Type}
	needCred := func() error {
		if a.Credential == "" {
			return invalid(field+".credential", "must name a credential")
		}
		out.Credential = a.Credential
		return nil
	}
	noExtra := func(name, headers bool) error {
		if name && a.Name != "" {
			return invalid(field+".name", "not used by auth type "+string(a.Type))
		}
		if headers && len(a.Headers) > 0 {
			return invalid(field+".headers", "not used by auth type "+string(a.Type))
		}
		return nil
	}
	switch a.Type {
	case AuthBearer, AuthBasic:
		if err := needCred(); err != nil {
			return out, err
		}
		if err := noExtra(true, true); err != nil {
			return out, err
		}
	case AuthAPIKey:
		if err := checkHeaderName(field+".name", a.Name); err != nil {
			return out, err
		}
		out.Name = a.Name
		if err := needCred(); err != nil {
			return out, err
		}
		if err := noExtra(false, true); err != nil {
			return out, err
		}
	case AuthCustomHeaders:
		if len(a.Headers) == 0 {
			return out, invalid(field+".headers", "must list at least one header")
		}
		if len(a.Headers) > maxListLen {
			return out, invalid(field+".headers", "more than "+strconv.Itoa(maxListLen)+" entries")
		}
		if a.Credential != "" {
			return out, invalid(field+".credential", "not used by auth type customHeaders (use headers)")
		}
		if err := noExtra(true, false); err != nil {
			return out, err
		}
		for i, h := range a.Headers {
			f := idx(field+".headers", i)
			if err := checkHeaderName(f+".name", h.Name); err != nil {
				return out, err
			}
			if h.Credential == "" {
				return out, invalid(f+".credential", "must name a credential")
			}
			for _, prev := range out.Headers {
				if strings.EqualFold(prev.Name, h.Name) {
					return out, invalidValue(f+".name", h.Name, "header listed twice")
				}
			}
			out.Headers = append(out.Headers, h)
		}
	case AuthPassthrough:
		if a.Credential != "" {
			return out, invalid(field+".credential", "not used by auth type passthrough")
		}
		if err := noExtra(true, true); err != nil {
			return out, err
		}
	case "":
		return out, invalid(field+".type", "must be set (bearer, basic, apiKey, customHeaders or passthrough)")
	default:
		return out, invalidValue(field+".type", string(a.Type), "unknown auth type (bearer, basic, apiKey, customHeaders or passthrough)")
	}
	if len(a.Substitutions) > maxListLen {
		return out, invalid(field+".substitutions", "more than "+strconv.Itoa(maxListLen)+" entries")
	}
	for i, s := range a.Substitutions {
		f := idx(field+".substitutions", i)
		if s.Credential == "" {
			return out, invalid(f+".credential", "must name a credential")
		}
		if s.Placeholder == "" {
			return out, invalid(f+".placeholder", "must not be empty")
		}
		if len(s.Placeholder) > maxNameLen || strings.ContainsAny(s.Placeholder, "\r\n\x00") {
			return out, invalid(f+".placeholder", "longer than 256 bytes or contains CR, LF or NUL")
		}
		if len(s.In) == 0 {
			return out, invalid(f+".in", "must list at least one of path, query, header, body")
		}
		var in []string
		for j, where := range s.In {
			switch where {
			case InPath, InQuery, InHeader, InBody:
			default:
				return out, invalidValue(idx(f+".in", j), where, "must be path, query, header or body")
			}
			if !slices.Contains(in, where) {
				in = append(in, where)
			}
		}
		out.Substitutions = append(out.Substitutions, Substitution{Credential: s.Credential, Placeholder: s.Placeholder, In: in})
	}
	return out, nil
}

// credentialRefs returns the credential names an auth uses, with the JSON
// field of each reference.
func credentialRefs(field string, a Auth) (fields, names []string) {
	if a.Credential != "" {
		fields, names = append(fields, field+".credential"), append(names, a.Credential)
	}
	for i, h := range a.Headers {
		fields, names = append(fields, idx(field+".headers", i)+".credential"), append(names, h.Credential)
	}
	for i, s := range a.Substitutions {
		fields, names = append(fields, idx(field+".substitutions", i)+".credential"), append(names, s.Credential)
	}
	return fields, names
}
