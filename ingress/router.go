package ingress

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

const (
	// HeaderIngressTo names the sandbox port of a request in header
	// routing: "OpenSandbox-Ingress-To: <sandbox-id>-<port>".
	HeaderIngressTo = "OpenSandbox-Ingress-To"
	// HeaderRouteToken carries a route token made by a Signer.
	HeaderRouteToken = "Hybox-Route-Token"
)

// Options configures a Router.
type Options struct {
	// Domain enables host routing: a request for <id>-<port>.<Domain>
	// (any Host port) goes to that sandbox port. Empty disables it.
	Domain string
	// Resolver finds where a sandbox port is served. Required.
	Resolver Resolver
	// Authorize decides whether r may reach port of sandbox sandboxID; it
	// runs before the Resolver, so refused callers learn nothing about
	// which sandboxes exist. Return nil to allow, or an error wrapping
	// ErrUnauthorized, ErrBadToken, ErrExpired, ErrForbidden or ErrNoRoute;
	// any other error is logged and answered 403. Required: a Router that
	// lets everyone in must say so with a function returning nil.
	Authorize func(r *http.Request, sandboxID string, port int) error
	// StripHeaders are request headers removed before a request reaches a
	// sandbox, in addition to HeaderIngressTo and HeaderRouteToken: list
	// every credential meant for hybox (such as the API key header) so
	// code in the sandbox never sees it.
	StripHeaders []string
	// Logger; nil = slog.Default().
	Logger *slog.Logger
}

// Validate reports whether o can make a Router.
//
// # Errors
//
// When Resolver or Authorize is nil, or Domain is not a DNS name.
func (o Options) Validate() error {
	if o.Resolver == nil {
		return errors.New("ingress: Options.Resolver is required")
	}
	if o.Authorize == nil {
		return errors.New("ingress: Options.Authorize is required")
	}
	if o.Domain != "" {
		d := normDomain(o.Domain)
		if d == "" || len(d) > 253 {
			return fmt.Errorf("ingress: domain %q is not a DNS name", o.Domain)
		}
		for _, label := range strings.Split(d, ".") {
			if label == "" || len(label) > 63 || strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
				return fmt.Errorf("ingress: domain %q is not a DNS name", o.Domain)
			}
		}
	}
	return nil
}

// Router is an http.Handler that routes each request to a sandbox port. It
// finds the port, in this order, from the HeaderIngressTo header, from a
// Host <id>-<port>.<domain>, or from a path /<id>/<port>/<rest> (then only
// /<rest> is forwarded, and X-Forwarded-Prefix is /<id>/<port>). Since
// sandbox ids are UUIDs, "<id>-<port>" is split on its last hyphen; ids from
// host names are lower-cased. It then calls Authorize, the Resolver, and
// Proxy. Every refusal is a JSON {"code","message"} body (see WriteError).
// A Router is safe for concurrent use.
type Router struct {
	domain    string
	resolver  Resolver
	authorize func(r *http.Request, sandboxID string, port int) error
	strip     []string
	log       *slog.Logger
}

// NewRouter returns a Router configured by opts.
//
// # Errors
//
// The errors of Options.Validate.
func NewRouter(opts Options) (*Router, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	strip := append([]string{HeaderIngressTo, HeaderRouteToken}, opts.StripHeaders...)
	return &Router{
		domain:    normDomain(opts.Domain),
		resolver:  opts.Resolver,
		authorize: opts.Authorize,
		strip:     strip,
		log:       log.With("component", "ingress"),
	}, nil
}

// Claims reports whether r is meant for the Router by its header or its
// host, so that a server can put the Router in front of its own routes on
// one listener: if rt.Claims(r) { rt.ServeHTTP(w, r) } else { api(w, r) }.
// Path routing is not considered: serve the Router on its own listener or
// under http.StripPrefix for that.
func (rt *Router) Claims(r *http.Request) bool {
	if len(r.Header.Values(HeaderIngressTo)) > 0 {
		return true
	}
	_, ok := underDomain(r.Host, rt.domain)
	return ok
}

// Sandbox returns the id of the sandbox a request the Router claims is
// for, "" when its route does not parse.
func (rt *Router) Sandbox(r *http.Request) string {
	id, _, _, err := rt.route(r)
	if err != nil {
		return ""
	}
	return id
}

// ServeHTTP routes r to its sandbox port.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, port, path, err := rt.route(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	if err := rt.authorize(r, id, port); err != nil {
		if status, _ := errdefs.HTTP(err); status >= 500 || status == http.StatusBadRequest {
			rt.log.Warn("authorizer failed", "sandbox", id, "port", port, "err", err)
			err = fmt.Errorf("%w: access to port %d of sandbox %s is denied", ErrForbidden, port, id)
		}
		WriteError(w, err)
		return
	}
	t, err := rt.resolver.Resolve(r.Context(), id, port)
	if err != nil {
		if errdefs.Internal(err) {
			rt.log.Error("resolving a sandbox port failed", "sandbox", id, "port", port, "err", err)
		}
		WriteError(w, err)
		return
	}
	out := r.Clone(r.Context())
	for _, h := range rt.strip {
		out.Header.Del(h)
	}
	proxy(w, out, t, path, rt.log.With("sandbox", id, "port", port))
}

// route returns the sandbox port r is for and the escaped path to ask it.
func (rt *Router) route(r *http.Request) (id string, port int, path string, err error) {
	if v := r.Header.Values(HeaderIngressTo); len(v) > 0 {
		if len(v) > 1 {
			return "", 0, "", fmt.Errorf("%w: more than one %s header", ErrBadTarget, HeaderIngressTo)
		}
		id, port, err = ParseTarget(strings.TrimSpace(v[0]))
		return id, port, r.URL.EscapedPath(), err
	}
	if id, port, ok, err := parseHost(r.Host, rt.domain); ok {
		return id, port, r.URL.EscapedPath(), err
	}
	return parsePath(r.URL.EscapedPath())
}
