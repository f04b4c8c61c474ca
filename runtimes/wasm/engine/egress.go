package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Egress performs outbound HTTP requests for guests, which have no sockets of
// their own. runtimes.Egress satisfies it: the sandbox's policy decides each
// request and its vault injects credentials. A nil Egress means the sandbox
// has no network.
type Egress interface {
	Do(req *http.Request) (*http.Response, error)
}

// ErrNoNetwork is the error of a guest request in a sandbox without Egress.
var ErrNoNetwork = errors.New("this sandbox has no network access")

// Limits of guest HTTP requests.
const (
	// MaxHTTPBody caps a request or response body.
	MaxHTTPBody = 64 << 20
	// maxRedirects is how many redirects a request follows (like fetch).
	maxRedirects = 20
)

// Redirect modes of HTTPRequest (those of fetch).
const (
	RedirectFollow = "follow" // follow redirects (the default)
	RedirectManual = "manual" // return a redirect response as it is
	RedirectError  = "error"  // fail on a redirect response
)

// HTTPRequest is an outbound request as a guest describes it.
type HTTPRequest struct {
	Method   string      `json:"method"`   // "" = GET
	URL      string      `json:"url"`      // absolute http or https URL
	Headers  [][2]string `json:"headers"`  // in order; names may repeat
	Redirect string      `json:"redirect"` // a Redirect* mode; "" = follow
	// Timeout bounds the whole request, redirects and body included, in
	// seconds (0 = only the caller's context).
	Timeout float64 `json:"timeout,omitempty"`
	Body    []byte  `json:"-"`
}

// HTTPResponse is the response handed back to a guest. Its body is read
// completely.
type HTTPResponse struct {
	Status     int         `json:"status"`
	StatusText string      `json:"reason"`     // "Not Found"
	URL        string      `json:"url"`        // the final URL, after redirects
	Redirected bool        `json:"redirected"` // a redirect was followed
	Headers    [][2]string `json:"headers"`    // sorted by name, values in received order
	Body       []byte      `json:"-"`
}

// HTTPError is why a guest request failed. Its message is meant for the
// guest's user: for a denied request it is the policy's text naming the rule.
type HTTPError struct {
	Msg     string
	Timeout bool // the request's own Timeout expired
	Err     error
}

func (e *HTTPError) Error() string { return e.Msg }
func (e *HTTPError) Unwrap() error { return e.Err }

// DoHTTP performs r through eg under ctx, which may cancel it at any time.
// Redirects are followed (unless r.Redirect says otherwise) one hop at a
// time, each hop through eg, so the policy sees every host. The response
// body is read completely, up to MaxHTTPBody.
//
// # Errors
// An *HTTPError: ErrNoNetwork when eg is nil; an invalid request; eg's
// refusal or failure; a body over MaxHTTPBody; too many redirects; a redirect
// under RedirectError; the end of ctx or of r.Timeout.
func DoHTTP(ctx context.Context, eg Egress, r HTTPRequest) (*HTTPResponse, error) {
	if eg == nil {
		return nil, &HTTPError{Msg: ErrNoNetwork.Error(), Err: ErrNoNetwork}
	}
	method := strings.ToUpper(r.Method)
	if method == "" {
		method = http.MethodGet
	}
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil, &HTTPError{Msg: fmt.Sprintf("invalid URL %q: %v", r.URL, err), Err: err}
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, &HTTPError{Msg: fmt.Sprintf("invalid URL %q: only absolute http and https URLs are supported", r.URL)}
	}
	switch r.Redirect {
	case "", RedirectFollow, RedirectManual, RedirectError:
	default:
		return nil, &HTTPError{Msg: fmt.Sprintf("invalid redirect mode %q", r.Redirect)}
	}
	if len(r.Body) > MaxHTTPBody {
		return nil, &HTTPError{Msg: fmt.Sprintf("request body of %d bytes exceeds the %d MiB limit", len(r.Body), MaxHTTPBody>>20)}
	}
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, time.Duration(r.Timeout*float64(time.Second)), errRequestTimeout)
		defer cancel()
	}
	body := r.Body
	headers := r.Headers
	redirected := false
	for hop := 0; ; hop++ {
		resp, err := send(ctx, eg, method, u, headers, body)
		if err != nil {
			return nil, err
		}
		loc := resp.Header.Get("Location")
		if !isRedirect(resp.StatusCode) || loc == "" || r.Redirect == RedirectManual {
			return readResponse(ctx, resp, u, redirected)
		}
		resp.Body.Close()
		if r.Redirect == RedirectError {
			return nil, &HTTPError{Msg: fmt.Sprintf("redirect from %s refused: redirect mode is \"error\"", u.Redacted())}
		}
		if hop >= maxRedirects {
			return nil, &HTTPError{Msg: fmt.Sprintf("too many redirects (more than %d)", maxRedirects)}
		}
		next, err := u.Parse(loc)
		if err != nil || next.Scheme != "http" && next.Scheme != "https" {
			return nil, &HTTPError{Msg: fmt.Sprintf("invalid redirect location %q", loc)}
		}
		if resp.StatusCode == http.StatusSeeOther && method != http.MethodHead ||
			(resp.StatusCode == http.StatusMovedPermanently || resp.StatusCode == http.StatusFound) && method == http.MethodPost {
			method, body = http.MethodGet, nil
			headers = dropHeaders(headers, "content-type", "content-length", "content-encoding", "content-language", "content-location")
		}
		if next.Scheme != u.Scheme || next.Host != u.Host {
			// Credentials the guest set are for the origin it named.
			headers = dropHeaders(headers, "authorization", "cookie", "proxy-authorization")
		}
		u, redirected = next, true
	}
}

// errRequestTimeout is the cancellation cause of a request's own timeout.
var errRequestTimeout = errors.New("request timed out")

// send makes one request through eg.
func send(ctx context.Context, eg Egress, method string, u *url.URL, headers [][2]string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, &HTTPError{Msg: fmt.Sprintf("invalid request: %v", err), Err: err}
	}
	for _, h := range headers {
		if strings.EqualFold(h[0], "host") {
			req.Host = h[1]
			continue
		}
		req.Header.Add(h[0], h[1])
	}
	resp, err := eg.Do(req)
	if err != nil {
		return nil, failure(ctx, err)
	}
	return resp, nil
}

// failure describes err of a request made under ctx.
func failure(ctx context.Context, err error) *HTTPError {
	if ctx.Err() != nil {
		if errors.Is(context.Cause(ctx), errRequestTimeout) {
			return &HTTPError{Msg: "timed out", Timeout: true, Err: err}
		}
		return &HTTPError{Msg: "request cancelled: " + context.Cause(ctx).Error(), Err: err}
	}
	return &HTTPError{Msg: err.Error(), Err: err}
}

// readResponse reads resp completely and closes it.
func readResponse(ctx context.Context, resp *http.Response, u *url.URL, redirected bool) (*HTTPResponse, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxHTTPBody+1))
	if err != nil {
		return nil, failure(ctx, err)
	}
	if len(b) > MaxHTTPBody {
		return nil, &HTTPError{Msg: fmt.Sprintf("response body exceeds the %d MiB limit", MaxHTTPBody>>20)}
	}
	final := u
	if resp.Request != nil && resp.Request.URL != nil && resp.Request.URL.String() != u.String() {
		// eg followed redirects itself.
		final, redirected = resp.Request.URL, true
	}
	out := &HTTPResponse{
		Status:     resp.StatusCode,
		StatusText: strings.TrimSpace(strings.TrimPrefix(resp.Status, fmt.Sprint(resp.StatusCode))),
		URL:        final.String(),
		Redirected: redirected,
		Headers:    [][2]string{},
		Body:       b,
	}
	if out.StatusText == "" {
		out.StatusText = http.StatusText(resp.StatusCode)
	}
	for _, k := range slices.Sorted(maps.Keys(resp.Header)) {
		for _, v := range resp.Header[k] {
			out.Headers = append(out.Headers, [2]string{k, v})
		}
	}
	return out, nil
}

func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// dropHeaders returns headers without those named (lower case) in names.
func dropHeaders(headers [][2]string, names ...string) [][2]string {
	out := make([][2]string, 0, len(headers))
	for _, h := range headers {
		if !slices.Contains(names, strings.ToLower(h[0])) {
			out = append(out, h)
		}
	}
	return out
}
