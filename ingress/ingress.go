// Package ingress routes inbound HTTP and WebSocket traffic to ports inside
// sandboxes. A Router finds the sandbox and port a request is for (by the
// OpenSandbox-Ingress-To header, by a host name <id>-<port>.<domain>, or by a
// path /<id>/<port>/...), asks an authorizer whether the caller may reach it,
// asks a Resolver where that port is served, and streams the request there
// with Proxy: in-process handlers, TCP addresses and unix sockets alike,
// Upgrade requests (WebSocket) and server-sent events included. Signer makes
// and checks signed, expiring route tokens that grant access to one port of
// one sandbox.
package ingress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"

	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Sentinel errors. Functions of this package wrap them with context, and
// Resolver and authorizer implementations should wrap them too. Each
// carries its wire code, so errdefs.HTTP (through WriteError) turns it
// into its status.
var (
	// ErrBadTarget: the request names no sandbox port, or names one in a
	// malformed way (400 INVALID_ROUTE).
	ErrBadTarget = errdefs.New(api.ErrorCodeINVALIDROUTE, "invalid route")
	// ErrUnauthorized: the caller presented no valid credentials (401
	// UNAUTHORIZED).
	ErrUnauthorized = errdefs.New(api.ErrorCodeUNAUTHORIZED, "unauthorized")
	// ErrBadToken: a route token is malformed, or was not made by this key
	// for this sandbox and port (401 INVALID_ROUTE_TOKEN).
	ErrBadToken = errdefs.New(api.ErrorCodeINVALIDROUTETOKEN, "invalid route token")
	// ErrExpired: a route token is genuine but past its expiry (401
	// ROUTE_TOKEN_EXPIRED).
	ErrExpired = errdefs.New(api.ErrorCodeROUTETOKENEXPIRED, "route token expired")
	// ErrForbidden: the caller is known but may not reach this sandbox port
	// (403 FORBIDDEN).
	ErrForbidden = errdefs.New(api.ErrorCodeFORBIDDEN, "forbidden")
	// ErrNoRoute: no such sandbox, or the sandbox serves nothing on that
	// port (404 SANDBOX_NOT_FOUND).
	ErrNoRoute = errdefs.New(api.ErrorCodeSANDBOXNOTFOUND, "no route to sandbox port")
	// ErrUnavailable: the sandbox exists but cannot take traffic now, for
	// example while it is paused (503 UNAVAILABLE).
	ErrUnavailable = errdefs.New(api.ErrorCodeUNAVAILABLE, "sandbox unavailable")
	// ErrUnreachable: the sandbox port did not answer (502
	// SANDBOX_UNREACHABLE). Its message never carries the address tried.
	ErrUnreachable = errdefs.New(api.ErrorCodeSANDBOXUNREACHABLE, "the sandbox port is not reachable")
)

// PortUnreachableError is a sandbox port that did not answer; it wraps
// ErrUnreachable, and its text names only the sandbox and the port, so
// WriteError shows it (where it hides other 502 texts).
type PortUnreachableError struct {
	Sandbox string
	Port    int
}

func (e *PortUnreachableError) Error() string {
	return fmt.Sprintf("sandbox %s: nothing answers on port %d (a server in the sandbox must listen on 0.0.0.0:%d)", e.Sandbox, e.Port, e.Port)
}

// Unwrap returns ErrUnreachable.
func (e *PortUnreachableError) Unwrap() error { return ErrUnreachable }

// Target says where a sandbox port is served. Exactly one way is used:
//
//   - Handler: served in this process (for example a wasm sandbox's execd).
//     The handler gets the request itself, so it may hijack the connection
//     for WebSocket.
//   - URL, Dial, Transport: served over the network. URL is the base
//     (http or https scheme, host, optional path prefix); when nil it is
//     "http://localhost". Connections are made by Transport when set (use
//     NewTransport and keep it, to reuse connections), else by Dial when set
//     (for example to a unix socket), else to URL's host. Without a
//     Transport every request opens its own connection.
type Target struct {
	Handler   http.Handler
	URL       *url.URL
	Dial      func(ctx context.Context) (net.Conn, error)
	Transport http.RoundTripper
}

// Resolver finds where a sandbox port is served.
type Resolver interface {
	// Resolve returns the Target serving port of sandbox sandboxID.
	//
	// # Errors
	//
	// Errors wrapping ErrNoRoute (unknown sandbox or port) or ErrUnavailable
	// (sandbox not running) are shown to the caller with their text; any
	// other error is logged and answered with a generic 500.
	Resolve(ctx context.Context, sandboxID string, port int) (Target, error)
}

// ResolverFunc adapts a function to the Resolver interface.
type ResolverFunc func(ctx context.Context, sandboxID string, port int) (Target, error)

// Resolve calls f(ctx, sandboxID, port).
func (f ResolverFunc) Resolve(ctx context.Context, sandboxID string, port int) (Target, error) {
	return f(ctx, sandboxID, port)
}

// Error codes of the JSON error bodies written by WriteError.
const (
	CodeInvalidRoute      = api.ErrorCodeINVALIDROUTE
	CodeUnauthorized      = api.ErrorCodeUNAUTHORIZED
	CodeInvalidRouteToken = api.ErrorCodeINVALIDROUTETOKEN
	CodeRouteTokenExpired = api.ErrorCodeROUTETOKENEXPIRED
	CodeForbidden         = api.ErrorCodeFORBIDDEN
	CodeNotFound          = api.ErrorCodeSANDBOXNOTFOUND
	CodeUnavailable       = api.ErrorCodeUNAVAILABLE
	CodeUnreachable       = api.ErrorCodeSANDBOXUNREACHABLE
	CodeInternal          = api.ErrorCodeINTERNALERROR
)

// WriteError answers with err through errdefs: its status and a JSON body
// {"code","message"}. A 500 gets a fixed text, and so does a bare
// ErrUnreachable, so internal details (addresses, paths) never reach the
// caller; a *PortUnreachableError names only the sandbox and the port.
func WriteError(w http.ResponseWriter, err error) { errdefs.Write(w, err) }
