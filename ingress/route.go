package ingress

import (
	"fmt"
	"strings"
)

// maxIDLen bounds sandbox ids in routes (a UUID is 36 bytes).
const maxIDLen = 128

// ParseTarget parses "<id>-<port>", the form of the OpenSandbox-Ingress-To
// header and of the first label of an ingress host name. Sandbox ids contain
// hyphens (UUIDs), so the string is split on its LAST hyphen. An id is 1 to
// 128 ASCII letters, digits, '-' or '_'; a port is a decimal number from 1 to
// 65535 without sign or leading zeros.
//
// # Errors
//
// An error wrapping ErrBadTarget when s has not that form.
func ParseTarget(s string) (id string, port int, err error) {
	i := strings.LastIndexByte(s, '-')
	if i < 0 {
		return "", 0, fmt.Errorf("%w: %q is not <sandbox-id>-<port>", ErrBadTarget, clip(s))
	}
	id, ps := s[:i], s[i+1:]
	if err := checkID(id); err != nil {
		return "", 0, err
	}
	port, err = parsePort(ps)
	if err != nil {
		return "", 0, err
	}
	return id, port, nil
}

// checkID reports whether id is a well-formed sandbox id for a route.
func checkID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty sandbox id", ErrBadTarget)
	}
	if len(id) > maxIDLen {
		return fmt.Errorf("%w: sandbox id longer than %d bytes", ErrBadTarget, maxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%w: sandbox id %q has a character other than letters, digits, '-' and '_'", ErrBadTarget, clip(id))
		}
	}
	return nil
}

// parsePort parses a canonical decimal port number from 1 to 65535.
func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, fmt.Errorf("%w: port %q is not a number from 1 to 65535", ErrBadTarget, clip(s))
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: port %q is not a number from 1 to 65535", ErrBadTarget, clip(s))
		}
		n = n*10 + int(s[i]-'0')
	}
	if n > 65535 {
		return 0, fmt.Errorf("%w: port %q is not a number from 1 to 65535", ErrBadTarget, s)
	}
	return n, nil
}

// hostname returns the lower-cased host of a Host header without port and
// without a trailing dot.
func hostname(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	host = strings.TrimPrefix(host, "[")
	host = strings.TrimSuffix(host, "]")
	host = strings.TrimSuffix(host, ".")
	return strings.ToLower(host)
}

// normDomain returns domain lower-cased, without leading or trailing dots.
func normDomain(domain string) string {
	return strings.ToLower(strings.Trim(domain, "."))
}

// underDomain reports whether the Host header host names a host strictly
// below domain (already normalized by normDomain), and returns its labels
// before the domain.
func underDomain(host, domain string) (sub string, ok bool) {
	if domain == "" {
		return "", false
	}
	h := hostname(host)
	if len(h) <= len(domain)+1 || !strings.HasSuffix(h, domain) || h[len(h)-len(domain)-1] != '.' {
		return "", false
	}
	return h[:len(h)-len(domain)-1], true
}

// parseHost parses a Host header of the form <id>-<port>.<domain>[:port].
// ok is false when host is not below domain (the request is not for host
// routing); err is set when it is, but its first label is malformed. Host
// names are case-insensitive, so the id is returned lower-cased.
func parseHost(host, domain string) (id string, port int, ok bool, err error) {
	sub, ok := underDomain(host, domain)
	if !ok {
		return "", 0, false, nil
	}
	if strings.Contains(sub, ".") {
		return "", 0, true, fmt.Errorf("%w: host %q is not <sandbox-id>-<port>.%s", ErrBadTarget, clip(hostname(host)), domain)
	}
	id, port, err = ParseTarget(sub)
	return id, port, true, err
}

// parsePath parses an escaped URL path /<id>/<port>[/<rest>] and returns the
// escaped rest, always starting with "/".
func parsePath(escaped string) (id string, port int, rest string, err error) {
	p, ok := strings.CutPrefix(escaped, "/")
	if !ok || p == "" {
		return "", 0, "", fmt.Errorf("%w: name the sandbox port with the OpenSandbox-Ingress-To header, the host <sandbox-id>-<port>.<domain>, or the path /<sandbox-id>/<port>/", ErrBadTarget)
	}
	id, p, _ = strings.Cut(p, "/")
	if err := checkID(id); err != nil {
		return "", 0, "", err
	}
	ps, rest, _ := strings.Cut(p, "/")
	if port, err = parsePort(ps); err != nil {
		return "", 0, "", err
	}
	return id, port, "/" + rest, nil
}

// clip shortens s for error messages.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
