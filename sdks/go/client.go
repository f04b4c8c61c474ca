package hybox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Environment variables read by FromEnv, hybox's first and the
// OpenSandbox names as fallbacks.
const (
	EnvAPIKey            = "HYBOX_API_KEY"
	EnvDomain            = "HYBOX_DOMAIN"
	EnvOpenSandboxKey    = "OPEN_SANDBOX_API_KEY"
	EnvOpenSandboxDomain = "OPEN_SANDBOX_DOMAIN"
)

// DefaultDomain is the server a Client talks to when no domain is given.
const DefaultDomain = "http://127.0.0.1:8080"

// Protocol constants.
const (
	// APIKeyHeader carries the lifecycle API key.
	APIKeyHeader = "OPEN-SANDBOX-API-KEY"
	// ExecdPort is the sandbox port of the execd API (commands, code,
	// files, terminals).
	ExecdPort = 44772
	// EgressPort is the sandbox port of the egress API (network policy,
	// credential vault).
	EgressPort = 18080
)

// Option configures a Client.
type Option func(*config)

type config struct {
	domain     string
	apiKey     string
	hc         *http.Client
	userAgent  string
	maxRetries int
	maxWait    time.Duration
}

// WithDomain sets the lifecycle server: "host[:port]" (http is assumed) or
// a URL such as "https://sandbox.example.com/prefix". A trailing "/v1" is
// accepted and not doubled.
func WithDomain(domain string) Option { return func(c *config) { c.domain = domain } }

// WithBaseURL is WithDomain under the name used for URLs.
func WithBaseURL(u string) Option { return WithDomain(u) }

// WithAPIKey sets the API key sent in the OPEN-SANDBOX-API-KEY header.
func WithAPIKey(key string) Option { return func(c *config) { c.apiKey = key } }

// WithHTTPClient sets the HTTP client of every request. The default has no
// overall timeout, since streams may last long: bound calls with their
// contexts.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.hc = hc } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *config) { c.userAgent = ua } }

// WithRetry sets how often a call answered with a retryable status is
// retried (3 by default; 0 turns retries off) and the longest wait between
// two tries (10 s by default). A 429 is retried for every call, since the
// server did no work; a 502 or 503 only for idempotent ones (GET, HEAD,
// PUT, DELETE). The wait is the answer's Retry-After when it has one, else
// an exponential backoff from 100 ms.
func WithRetry(maxRetries int, maxWait time.Duration) Option {
	return func(c *config) {
		c.maxRetries = max(maxRetries, 0)
		if maxWait > 0 {
			c.maxWait = maxWait
		}
	}
}

// Client is a client of one hybox (or OpenSandbox) server. It is safe for
// concurrent use.
type Client struct {
	base   *url.URL // scheme://host[/prefix]/v1
	apiKey string
	tr     transport
}

// New returns a client configured by opts.
//
// # Errors
// ErrInvalid when the domain is not a valid http(s) address.
func New(opts ...Option) (*Client, error) {
	cfg := config{domain: DefaultDomain, maxRetries: 3, maxWait: 10 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	u, err := parseDomain(cfg.domain)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(u.Path, "/v1") {
		u.Path += "/v1"
	}
	hc := cfg.hc
	if hc == nil {
		hc = &http.Client{}
	}
	h := http.Header{}
	if cfg.apiKey != "" {
		h.Set(APIKeyHeader, cfg.apiKey)
	}
	if cfg.userAgent != "" {
		h.Set("User-Agent", cfg.userAgent)
	}
	c := &Client{base: u, apiKey: cfg.apiKey}
	c.tr = transport{base: u, headers: h, hc: hc, maxRetries: cfg.maxRetries, maxWait: cfg.maxWait}
	return c, nil
}

// FromEnv returns a client of the server named by HYBOX_DOMAIN (else
// OPEN_SANDBOX_DOMAIN, else DefaultDomain) with the API key of
// HYBOX_API_KEY (else OPEN_SANDBOX_API_KEY). opts are applied after the
// environment, so they override it. It is the only function of the
// package that reads the environment.
//
// # Errors
// Those of New.
func FromEnv(opts ...Option) (*Client, error) {
	var env []Option
	if d := firstEnv(EnvDomain, EnvOpenSandboxDomain); d != "" {
		env = append(env, WithDomain(d))
	}
	if k := firstEnv(EnvAPIKey, EnvOpenSandboxKey); k != "" {
		env = append(env, WithAPIKey(k))
	}
	return New(append(env, opts...)...)
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// BaseURL returns the URL lifecycle paths are appended to (it ends in
// /v1).
func (c *Client) BaseURL() string { return c.base.String() }

// parseDomain returns domain as a URL with a scheme (http when it had
// none) and no trailing slash.
func parseDomain(domain string) (*url.URL, error) {
	d := strings.TrimSpace(domain)
	if d == "" {
		return nil, fmt.Errorf("%w: empty domain", ErrInvalid)
	}
	if !strings.Contains(d, "://") {
		d = "http://" + d
	}
	u, err := url.Parse(d)
	if err != nil {
		return nil, fmt.Errorf("%w: domain %q: %v", ErrInvalid, domain, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: domain %q: the scheme must be http or https", ErrInvalid, domain)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: domain %q has no host", ErrInvalid, domain)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment, u.RawPath = "", "", ""
	return u, nil
}

// Health checks the server's GET /health.
//
// # Errors
// An *APIError when the server answers with an error, or a transport
// error.
func (c *Client) Health(ctx context.Context) error {
	t := c.tr
	b := *c.base
	b.Path = strings.TrimSuffix(b.Path, "/v1")
	t.base = &b
	return t.call(ctx, request{method: http.MethodGet, path: "/health"}, nil)
}

// transport is what requests to one base URL share: the URL, headers of
// every request, the HTTP client and the retry policy.
type transport struct {
	base       *url.URL
	headers    http.Header
	hc         *http.Client
	maxRetries int
	maxWait    time.Duration
}

// request describes one call.
type request struct {
	method string
	path   string // appended to base, already escaped
	query  url.Values
	body   any       // JSON-encoded when not nil and raw is nil
	raw    io.Reader // a streamed body: never retried
	ctype  string    // content type of raw
	accept string
}

// maxJSONBody bounds a JSON answer.
const maxJSONBody = 64 << 20

func (t *transport) newRequest(ctx context.Context, r request, body []byte) (*http.Request, error) {
	u := *t.base
	escaped := strings.TrimRight(t.base.EscapedPath(), "/") + r.path
	p, err := url.PathUnescape(escaped)
	if err != nil {
		return nil, fmt.Errorf("%w: bad path %q", ErrInvalid, escaped)
	}
	u.Path, u.RawPath = p, escaped
	if len(r.query) > 0 {
		u.RawQuery = r.query.Encode()
	}
	var rd io.Reader
	ctype := r.ctype
	switch {
	case r.raw != nil:
		rd = r.raw
	case body != nil:
		rd = bytes.NewReader(body)
		ctype = "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range t.headers {
		req.Header[k] = vs
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	accept := r.accept
	if accept == "" {
		accept = "application/json"
	}
	req.Header.Set("Accept", accept)
	return req, nil
}

// send performs r, retrying retryable answers, and returns the response
// when its status is 2xx; any other status becomes an *APIError.
func (t *transport) send(ctx context.Context, r request) (*http.Response, error) {
	var body []byte
	if r.raw == nil && r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, fmt.Errorf("hybox: encode request: %w", err)
		}
		body = b
	}
	for attempt := 0; ; attempt++ {
		req, err := t.newRequest(ctx, r, body)
		if err != nil {
			return nil, err
		}
		resp, err := t.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("hybox: %s %s: %w", r.method, r.path, context.Cause(ctx))
			}
			return nil, fmt.Errorf("hybox: %s %s: %w", r.method, r.path, err)
		}
		if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
			return resp, nil
		}
		apiErr := errorFromResponse(resp, time.Now())
		_ = resp.Body.Close()
		if r.raw != nil || attempt >= t.maxRetries || !retryable(r.method, resp.StatusCode) {
			return nil, apiErr
		}
		wait := apiErr.RetryAfter
		if wait <= 0 {
			wait = 100 * time.Millisecond << attempt
		}
		wait = min(wait, t.maxWait)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, apiErr
		case <-timer.C:
		}
	}
}

// retryable reports whether an answer with status to a method may be
// retried: 429 always (the server did nothing), 502 and 503 for idempotent
// methods.
func retryable(method string, status int) bool {
	switch status {
	case http.StatusTooManyRequests:
		return true
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		switch method {
		case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
			return true
		}
	}
	return false
}

// call performs r and decodes a JSON answer into out (unless out is nil).
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
		return fmt.Errorf("hybox: %s %s: read answer: %w", r.method, r.path, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("hybox: %s %s: decode answer: %w", r.method, r.path, err)
	}
	return nil
}

// pathEscape escapes one path segment.
func pathEscape(s string) string { return url.PathEscape(s) }
