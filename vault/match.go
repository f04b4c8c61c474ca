package vault

import (
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"
)

// Request is what matching looks at in an outbound request. Scheme is
// "http" or "https"; Port 0 means the scheme's port (80 or 443); Path is the
// decoded path without the query.
type Request struct {
	Scheme string
	Host   string
	Method string
	Path   string
	Port   int
}

// compiled is a normalized binding prepared for matching.
type compiled struct {
	b        Binding
	revision int64
	exact    []string // exact hosts and IP addresses
	wild     []string // wildcard suffixes with their leading dot: ".example.com"
	http     bool
	https    bool
	ports    []int // listed ports, in addition to the schemes' own
	methods  []string
	paths    []pathPattern
}

type pathPattern struct {
	lit    string // the pattern without its trailing "*"
	prefix bool   // the pattern ended in "*"
}

func compile(b Binding, rev int64) *compiled {
	c := &compiled{b: b, revision: rev, ports: b.Match.Ports, methods: b.Match.Methods}
	for _, h := range b.Match.Hosts {
		if rest, ok := strings.CutPrefix(h, "*"); ok {
			c.wild = append(c.wild, rest)
		} else {
			c.exact = append(c.exact, h)
		}
	}
	for _, s := range b.Match.Schemes {
		c.http = c.http || s == SchemeHTTP
		c.https = c.https || s == SchemeHTTPS
	}
	for _, p := range b.Match.Paths {
		lit, prefix := strings.CutSuffix(p, "*")
		c.paths = append(c.paths, pathPattern{lit: lit, prefix: prefix})
	}
	return c
}

// Matching rule. A binding is a candidate for a request when all hold:
//   - the scheme is one of its schemes;
//   - the port is the scheme's own (443 for https, 80 for http) or listed in
//     its ports;
//   - the method (compared upper-case) is one of its methods;
//   - the path, cleaned like path.Clean (keeping a trailing slash, so
//     "/v1/../admin" is "/admin"), equals one of its exact path patterns or
//     starts with the part of a "*" pattern before the "*" (case-sensitive);
//   - the host (lower-case, without a trailing dot or IPv6 brackets) equals
//     one of its exact hosts, or ends in ".suffix" for one of its
//     "*.suffix" hosts and is longer than that (subdomains at any depth,
//     never the apex).
//
// Each candidate gets two scores from its best host and best path pattern:
// host score: an exact host beats every wildcard, and a longer wildcard
// suffix beats a shorter one; path score: a longer literal part beats a
// shorter one, and at equal length an exact pattern beats a prefix. The
// candidate with the highest host score wins; among equal host scores the
// highest path score wins. When two or more candidates share the top
// (host, path) scores the match is refused with ErrAmbiguous: the proxy
// must neither guess nor leak a credential to the wrong rule.

const exactHostScore = 1 << 16 // above any wildcard suffix length

func (c *compiled) hostScore(host string) int {
	if slices.Contains(c.exact, host) {
		return exactHostScore
	}
	best := -1
	for _, w := range c.wild {
		if len(host) > len(w) && strings.HasSuffix(host, w) && len(w) > best {
			best = len(w)
		}
	}
	return best
}

func (c *compiled) pathScore(p string) int {
	best := -1
	for _, pp := range c.paths {
		score := -1
		switch {
		case pp.prefix && strings.HasPrefix(p, pp.lit):
			score = 2 * len(pp.lit)
		case !pp.prefix && p == pp.lit:
			score = 2*len(pp.lit) + 1
		}
		best = max(best, score)
	}
	return best
}

func (c *compiled) portOK(scheme string, port int) bool {
	return port == defaultPort(scheme) || slices.Contains(c.ports, port)
}

func (c *compiled) schemeOK(scheme string) bool {
	return scheme == SchemeHTTPS && c.https || scheme == SchemeHTTP && c.http
}

func defaultPort(scheme string) int {
	if scheme == SchemeHTTP {
		return 80
	}
	return 443
}

// normRequestHost lower-cases host, removes one trailing dot and IPv6
// brackets, and writes IP addresses canonically.
func normRequestHost(host string) string {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	if host != "" && (strings.IndexByte(host, ':') >= 0 || host[0] >= '0' && host[0] <= '9') {
		if a, err := netip.ParseAddr(host); err == nil {
			return a.Unmap().WithZone("").String()
		}
	}
	return host
}

// cleanPath cleans p like path.Clean, keeping a trailing slash; it does
// not allocate for paths that are already clean.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	if !strings.Contains(p, "//") && !strings.Contains(p, "/.") {
		return p
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// Match returns the binding that applies to r (a copy), or nil and no
// error when none does. See the matching rule above.
//
// # Errors
//
// ErrAmbiguous when two or more bindings tie for the best match; the error
// names them.
func (v *Vault) Match(r Request) (*Binding, error) {
	cb, err := v.match(r)
	if cb == nil || err != nil {
		return nil, err
	}
	b := cloneBinding(cb.b)
	return &b, nil
}

func (v *Vault) match(r Request) (*compiled, error) {
	s := v.snap.Load()
	if s == nil || len(s.bindings) == 0 {
		return nil, nil
	}
	return s.match(r)
}

func (s *snapshot) match(r Request) (*compiled, error) {
	scheme := strings.ToLower(r.Scheme)
	if scheme != SchemeHTTP && scheme != SchemeHTTPS {
		return nil, nil
	}
	port := r.Port
	if port == 0 {
		port = defaultPort(scheme)
	}
	host := normRequestHost(r.Host)
	method := strings.ToUpper(r.Method)
	p := cleanPath(r.Path)

	var best *compiled
	bestHost, bestPath, ties := -1, -1, 0
	for _, c := range s.bindings {
		if !c.schemeOK(scheme) || !c.portOK(scheme, port) || !slices.Contains(c.methods, method) {
			continue
		}
		ps := c.pathScore(p)
		if ps < 0 {
			continue
		}
		hs := c.hostScore(host)
		if hs < 0 {
			continue
		}
		switch {
		case hs > bestHost || hs == bestHost && ps > bestPath:
			best, bestHost, bestPath, ties = c, hs, ps, 0
		case hs == bestHost && ps == bestPath:
			ties++
		}
	}
	if ties == 0 {
		return best, nil
	}
	var names []string
	for _, c := range s.bindings {
		if c.schemeOK(scheme) && c.portOK(scheme, port) && slices.Contains(c.methods, method) &&
			c.hostScore(host) == bestHost && c.pathScore(p) == bestPath {
			names = append(names, c.b.Name)
		}
	}
	return nil, fmt.Errorf("%s %s://%s%s matches bindings %s equally: %w",
		method, scheme, host, p, strings.Join(names, ", "), ErrAmbiguous)
}

// Intercepts reports whether some binding could match a request to
// host:port (over either of its schemes): the proxy terminates TLS only for
// such destinations and passes everything else through untouched.
func (v *Vault) Intercepts(host string, port int) bool {
	s := v.snap.Load()
	if s == nil {
		return false
	}
	host = normRequestHost(host)
	for _, c := range s.bindings {
		portOK := c.https && port == 443 || c.http && port == 80 || slices.Contains(c.ports, port)
		if portOK && c.hostScore(host) >= 0 {
			return true
		}
	}
	return false
}
