// Package client is a typed Go client of the hybox (OpenSandbox) API: the
// lifecycle server (create, list, renew and delete sandboxes) and the execd
// API of each sandbox (commands, code, files), which it reaches through the
// endpoint the lifecycle server returns for sandbox port 44772, and the
// egress API (network policy, credential vault) behind port 18080. It uses only
// net/http; it reads no environment variables: the caller passes the domain
// and the API key.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// APIKeyHeader is the header that carries the lifecycle API key.
const APIKeyHeader = "OPEN-SANDBOX-API-KEY"

// ExecdPort is the sandbox port of the execd API.
const ExecdPort = 44772

// Sentinel errors. An *APIError matches ErrNotFound, ErrUnauthorized and
// ErrConflict through errors.Is according to its HTTP status.
var (
	// ErrInvalidOptions is returned by New for a bad domain.
	ErrInvalidOptions = errors.New("client: invalid options")
	// ErrNotFound matches an API error with status 404.
	ErrNotFound = errors.New("not found")
	// ErrUnauthorized matches an API error with status 401 or 403.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrConflict matches an API error with status 409.
	ErrConflict = errors.New("conflict")
	// ErrMalformedEvent is wrapped by stream parse errors.
	ErrMalformedEvent = errors.New("malformed stream event")
	// ErrIncomplete is returned when a stream ends before its execution
	// completed or failed.
	ErrIncomplete = errors.New("stream ended before the execution finished")
)

// APIError is an error response of the lifecycle or execd API: the body
// {"code","message"} and the HTTP status.
type APIError struct {
	StatusCode int    // HTTP status
	Code       string // the body's code, or HTTP_<status> when the body had none
	Message    string // the body's message, or the start of the raw body
	RequestID  string // X-Request-ID of the response, if any
}

// Error returns "CODE: message".
func (e *APIError) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Is reports whether target is the sentinel for e's status.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
	case ErrConflict:
		return e.StatusCode == http.StatusConflict
	}
	return false
}

// Options configures a Client.
type Options struct {
	// Domain is the lifecycle server, such as "http://127.0.0.1:8080" or
	// "sandbox.example.com" (no scheme means http). A trailing "/v1" is
	// accepted and not doubled.
	Domain string
	// APIKey is sent in the OPEN-SANDBOX-API-KEY header when non-empty.
	APIKey string
	// HTTPClient is used for every request; nil means a client without a
	// global timeout (streams can be long; use contexts to bound calls).
	HTTPClient *http.Client
	// UserAgent is sent when non-empty.
	UserAgent string
}

// Client talks to one lifecycle server. It is safe for concurrent use.
type Client struct {
	base   *url.URL // scheme://host[/path]/v1
	apiKey string
	hc     *http.Client
	ua     string
}

// NormalizeDomain returns domain with a scheme ("http://" when it had
// none) and without trailing slashes.
//
// # Errors
// ErrInvalidOptions when domain is empty or not a URL with a host.
func NormalizeDomain(domain string) (*url.URL, error) {
	d := strings.TrimSpace(domain)
	if d == "" {
		return nil, fmt.Errorf("%w: empty domain", ErrInvalidOptions)
	}
	if !strings.Contains(d, "://") {
		d = "http://" + d
	}
	u, err := url.Parse(d)
	if err != nil {
		return nil, fmt.Errorf("%w: domain %q: %v", ErrInvalidOptions, domain, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: domain %q: scheme must be http or https", ErrInvalidOptions, domain)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: domain %q has no host", ErrInvalidOptions, domain)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment, u.RawPath = "", "", ""
	return u, nil
}

// New returns a client of the lifecycle server at opts.Domain.
//
// # Errors
// ErrInvalidOptions when the domain is empty or malformed.
func New(opts Options) (*Client, error) {
	u, err := NormalizeDomain(opts.Domain)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(u.Path, "/v1") {
		u.Path += "/v1"
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: u, apiKey: opts.APIKey, hc: hc, ua: opts.UserAgent}, nil
}

// BaseURL returns the URL that lifecycle paths are appended to (ending in
// /v1).
func (c *Client) BaseURL() string { return c.base.String() }

// transport is what lifecycle and execd requests share: a base URL, headers
// for every request and the HTTP client.
type transport struct {
	base    *url.URL
	headers http.Header
	hc      *http.Client
}

// request describes one call.
type request struct {
	method string
	path   string // appended to base; already escaped (see pathEscape)
	query  url.Values
	body   any // JSON-encoded when non-nil and raw is nil
	raw    io.Reader
	ctype  string // content type of raw
	accept string
	header http.Header
}

func (t *transport) newRequest(ctx context.Context, r request) (*http.Request, error) {
	u := *t.base
	escaped := strings.TrimRight(t.base.EscapedPath(), "/") + r.path
	p, err := url.PathUnescape(escaped)
	if err != nil {
		return nil, fmt.Errorf("bad path %q: %w", escaped, err)
	}
	u.Path, u.RawPath = p, escaped
	if len(r.query) > 0 {
		u.RawQuery = r.query.Encode()
	}
	var body io.Reader
	ctype := r.ctype
	if r.raw != nil {
		body = r.raw
	} else if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
		ctype = "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, err
	}
	for k, vs := range t.headers {
		req.Header[k] = append([]string(nil), vs...)
	}
	for k, vs := range r.header {
		req.Header[k] = append([]string(nil), vs...)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if r.accept != "" {
		req.Header.Set("Accept", r.accept)
	} else if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	return req, nil
}

// send performs r and returns the response when its status is 2xx; any
// other status becomes an *APIError and the body is closed.
func (t *transport) send(ctx context.Context, r request) (*http.Response, error) {
	req, err := t.newRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", r.method, req.URL.Redacted(), err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// call performs r and decodes a JSON response into out (unless out is nil).
func (t *transport) call(ctx context.Context, r request, out any) error {
	resp, err := t.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONBody))
	if err != nil {
		return fmt.Errorf("%s %s: read response: %w", r.method, r.path, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", r.method, r.path, err)
	}
	return nil
}

// maxJSONBody bounds a JSON response.
const maxJSONBody = 64 << 20

// decodeError turns a non-2xx response into an *APIError.
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &APIError{StatusCode: resp.StatusCode, RequestID: resp.Header.Get("X-Request-ID")}
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &body) == nil && (body.Code != "" || body.Message != "") {
		e.Code, e.Message = body.Code, body.Message
	} else {
		msg := strings.TrimSpace(string(b))
		if len(msg) > 512 {
			msg = msg[:512] + "…"
		}
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		e.Message = msg
	}
	if e.Code == "" {
		e.Code = fmt.Sprintf("HTTP_%d", resp.StatusCode)
	}
	return e
}

func (c *Client) transport() *transport {
	h := http.Header{}
	if c.apiKey != "" {
		h.Set(APIKeyHeader, c.apiKey)
	}
	if c.ua != "" {
		h.Set("User-Agent", c.ua)
	}
	return &transport{base: c.base, headers: h, hc: c.hc}
}

// pathEscape escapes one path segment.
func pathEscape(s string) string { return url.PathEscape(s) }
