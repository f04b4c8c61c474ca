package hybox

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// RuntimeExtension is the extensions key that picks a sandbox's runtime
// (wasm, runc or runsc).
const RuntimeExtension = "hybox.io/runtime"

// Sandbox is a handle on one sandbox. It caches the endpoints of the
// sandbox's execd and egress APIs, so that commands and file operations
// cost one request each. It is safe for concurrent use.
type Sandbox struct {
	c  *Client
	id string

	mu    sync.Mutex
	info  api.Sandbox
	ports map[int]*transport // resolved endpoints by port
}

// Create creates a sandbox and returns its handle. The server answers
// before the sandbox runs; the first command waits for it, or call
// WaitRunning. An empty image URI means "wasm://default".
//
// # Errors
// An *APIError for a refused request (ErrInvalid for a bad image, timeout
// or runtime), or a transport error.
func (c *Client) Create(ctx context.Context, req api.CreateSandboxRequest) (*Sandbox, error) {
	if req.Image.URI == "" && req.SnapshotID == "" {
		req.Image.URI = "wasm://default"
	}
	var info api.Sandbox
	if err := c.tr.call(ctx, request{method: http.MethodPost, path: "/sandboxes", body: req}, &info); err != nil {
		return nil, err
	}
	return c.handle(info), nil
}

// Connect returns a handle on an existing sandbox, fetching its state.
//
// # Errors
// An *APIError matching ErrNotFound for an unknown id, or a transport
// error.
func (c *Client) Connect(ctx context.Context, id string) (*Sandbox, error) {
	info, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.handle(info), nil
}

// Sandbox returns a handle on the sandbox id without asking the server
// anything: the first call through it does. Its Info is empty until
// Refresh.
func (c *Client) Sandbox(id string) *Sandbox { return c.handle(api.Sandbox{ID: id}) }

func (c *Client) handle(info api.Sandbox) *Sandbox {
	return &Sandbox{c: c, id: info.ID, info: info, ports: map[int]*transport{}}
}

// Get returns a sandbox's state.
//
// # Errors
// An *APIError matching ErrNotFound for an unknown id, or a transport
// error.
func (c *Client) Get(ctx context.Context, id string) (api.Sandbox, error) {
	var info api.Sandbox
	err := c.tr.call(ctx, request{method: http.MethodGet, path: "/sandboxes/" + pathEscape(id)}, &info)
	return info, err
}

// ListOptions filters and pages List. Zero values leave the server's
// defaults (every state, page 1, 20 per page).
type ListOptions struct {
	// States selects sandboxes in any of these states.
	States []api.SandboxState
	// Metadata selects sandboxes that have all these pairs.
	Metadata map[string]string
	// Page is 1-based.
	Page int
	// PageSize is the number of sandboxes per page.
	PageSize int
}

// List returns one page of sandboxes.
//
// # Errors
// An *APIError (ErrInvalid for a bad page), or a transport error.
func (c *Client) List(ctx context.Context, opts ListOptions) (api.ListSandboxesResponse, error) {
	q := url.Values{}
	for _, s := range opts.States {
		q.Add("state", string(s))
	}
	if len(opts.Metadata) > 0 {
		q.Set("metadata", metadataFilter(opts.Metadata))
	}
	if opts.Page > 0 {
		q.Set("page", strconv.Itoa(opts.Page))
	}
	if opts.PageSize > 0 {
		q.Set("pageSize", strconv.Itoa(opts.PageSize))
	}
	var out api.ListSandboxesResponse
	err := c.tr.call(ctx, request{method: http.MethodGet, path: "/sandboxes", query: q}, &out)
	return out, err
}

// All yields every sandbox that opts select, page after page, starting at
// opts.Page.
//
// # Errors
// The iterator yields the first error of List and stops.
func (c *Client) All(ctx context.Context, opts ListOptions) iter.Seq2[api.Sandbox, error] {
	return func(yield func(api.Sandbox, error) bool) {
		if opts.Page < 1 {
			opts.Page = 1
		}
		for {
			page, err := c.List(ctx, opts)
			if err != nil {
				yield(api.Sandbox{}, err)
				return
			}
			for _, sb := range page.Items {
				if !yield(sb, nil) {
					return
				}
			}
			if !page.Pagination.HasNextPage || len(page.Items) == 0 {
				return
			}
			opts.Page++
		}
	}
}

// metadataFilter encodes pairs as the one "k=v&k2=v2" string of the
// metadata query parameter, keys sorted.
func metadataFilter(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(k) + "=" + url.QueryEscape(m[k]))
	}
	return b.String()
}

// ID returns the sandbox id.
func (s *Sandbox) ID() string { return s.id }

// Info returns the state last fetched (by Create, Connect, Refresh,
// WaitRunning or PatchMetadata).
func (s *Sandbox) Info() api.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info
}

func (s *Sandbox) setInfo(info api.Sandbox) {
	s.mu.Lock()
	s.info = info
	s.mu.Unlock()
}

func (s *Sandbox) path(suffix string) string { return "/sandboxes/" + pathEscape(s.id) + suffix }

// Refresh fetches the sandbox's state.
//
// # Errors
// An *APIError matching ErrNotFound once the sandbox is gone, or a
// transport error.
func (s *Sandbox) Refresh(ctx context.Context) (api.Sandbox, error) {
	info, err := s.c.Get(ctx, s.id)
	if err == nil {
		s.setInfo(info)
	}
	return info, err
}

// WaitRunning polls the sandbox every interval (100 ms when zero) until it
// is Running.
//
// # Errors
// A *StateError (matching ErrConflict) when the sandbox reaches Failed,
// Terminated or Stopping; errors of Refresh; ctx's error when it ends
// first.
func (s *Sandbox) WaitRunning(ctx context.Context, interval time.Duration) (api.Sandbox, error) {
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	for {
		info, err := s.Refresh(ctx)
		if err != nil {
			return info, err
		}
		switch info.Status.State {
		case api.SandboxStateRunning:
			return info, nil
		case api.SandboxStateFailed, api.SandboxStateTerminated, api.SandboxStateStopping:
			return info, &StateError{ID: s.id, Status: info.Status}
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return info, context.Cause(ctx)
		case <-t.C:
		}
	}
}

// StateError reports a sandbox that reached a state from which it cannot
// become Running.
type StateError struct {
	ID     string
	Status api.SandboxStatus
}

// Error describes the state and its reason.
func (e *StateError) Error() string {
	s := fmt.Sprintf("hybox: sandbox %s is %s", e.ID, e.Status.State)
	if e.Status.Reason != "" {
		s += ": " + e.Status.Reason
	}
	if e.Status.Message != "" {
		s += ": " + e.Status.Message
	}
	return s
}

// Unwrap returns ErrConflict.
func (e *StateError) Unwrap() error { return ErrConflict }

// Kill terminates the sandbox and removes it.
//
// # Errors
// An *APIError matching ErrNotFound when it is already gone, or a
// transport error.
func (s *Sandbox) Kill(ctx context.Context) error {
	return s.c.tr.call(ctx, request{method: http.MethodDelete, path: s.path("")}, nil)
}

// Pause asks the server to pause the sandbox (state Pausing, then Paused).
//
// # Errors
// An *APIError: ErrConflict for a state that cannot pause, ErrNotSupported
// for a runtime that cannot; or a transport error.
func (s *Sandbox) Pause(ctx context.Context) error {
	return s.c.tr.call(ctx, request{method: http.MethodPost, path: s.path("/pause")}, nil)
}

// Resume asks the server to resume a paused sandbox.
//
// # Errors
// An *APIError: ErrConflict for a sandbox that is not paused; or a
// transport error.
func (s *Sandbox) Resume(ctx context.Context) error {
	return s.c.tr.call(ctx, request{method: http.MethodPost, path: s.path("/resume")}, nil)
}

// Fork asks the server for req.Count copies of the sandbox (1 when 0):
// new sandboxes, running, each with a copy of the workspace and of every
// code context's state (ids, execution counts, variables), and the
// sandbox's metadata with req.Metadata merged over it. What a copy does is
// not seen by the sandbox or by the other copies, and the reverse. Either
// every copy is made or none is.
//
// # Errors
// An *APIError: ErrInvalid for a count outside 1..16 or a reserved
// metadata key, ErrNotSupported for a sandbox whose runtime cannot fork
// (only wasm can today), ErrConflict for a sandbox neither running nor
// paused; or a transport error.
func (s *Sandbox) Fork(ctx context.Context, req api.ForkSandboxRequest) ([]*Sandbox, error) {
	var out api.ForkSandboxResponse
	if err := s.c.tr.call(ctx, request{method: http.MethodPost, path: s.path("/fork"), body: req}, &out); err != nil {
		return nil, err
	}
	sbs := make([]*Sandbox, len(out.Sandboxes))
	for i, info := range out.Sandboxes {
		sbs[i] = s.c.handle(info)
	}
	return sbs, nil
}

// Renew sets the time the sandbox expires at and returns the time the
// server recorded.
//
// # Errors
// An *APIError: ErrInvalid for a time in the past; or a transport error.
func (s *Sandbox) Renew(ctx context.Context, expiresAt time.Time) (time.Time, error) {
	var out api.RenewExpirationResponse
	body := api.RenewExpirationRequest{ExpiresAt: expiresAt.UTC()}
	err := s.c.tr.call(ctx, request{method: http.MethodPost, path: s.path("/renew-expiration"), body: body}, &out)
	return out.ExpiresAt, err
}

// SetTimeout makes the sandbox expire d from now.
//
// # Errors
// Those of Renew.
func (s *Sandbox) SetTimeout(ctx context.Context, d time.Duration) (time.Time, error) {
	return s.Renew(ctx, time.Now().Add(d))
}

// PatchMetadata applies a JSON merge patch to the sandbox's metadata: a nil
// value deletes its key.
//
// # Errors
// An *APIError: ErrInvalid for a reserved or empty key; or a transport
// error.
func (s *Sandbox) PatchMetadata(ctx context.Context, patch api.MetadataPatch) (api.Sandbox, error) {
	var info api.Sandbox
	err := s.c.tr.call(ctx, request{method: http.MethodPatch, path: s.path("/metadata"), body: patch}, &info)
	if err == nil {
		s.setInfo(info)
	}
	return info, err
}

// Endpoint returns how to reach a port of the sandbox: an address without
// scheme and headers to send with every request to it.
//
// # Errors
// An *APIError (ErrNotFound for an unknown sandbox, ErrInvalid for a bad
// port), or a transport error.
func (s *Sandbox) Endpoint(ctx context.Context, port int) (api.Endpoint, error) {
	var ep api.Endpoint
	err := s.c.tr.call(ctx, request{method: http.MethodGet, path: s.path("/endpoints/" + strconv.Itoa(port))}, &ep)
	return ep, err
}

// SignedEndpoint returns an endpoint of a port whose headers carry a route
// token valid until expires: whoever holds it reaches the port without the
// API key (to hand a sandbox's web server to a browser or another
// program). The token cannot outlive the sandbox's own expiry.
//
// # Errors
// Those of Endpoint; ErrInvalid for a time in the past.
func (s *Sandbox) SignedEndpoint(ctx context.Context, port int, expires time.Time) (api.Endpoint, error) {
	var ep api.Endpoint
	q := url.Values{"expires": {strconv.FormatInt(expires.Unix(), 10)}}
	err := s.c.tr.call(ctx, request{method: http.MethodGet, path: s.path("/endpoints/" + strconv.Itoa(port)), query: q}, &ep)
	return ep, err
}

// URL returns the http(s) URL of a port of the sandbox and the headers to
// send with every request to it (for a web server the sandbox runs).
//
// # Errors
// Those of Endpoint; ErrInvalid for an endpoint that is not an address.
func (s *Sandbox) URL(ctx context.Context, port int) (string, http.Header, error) {
	t, err := s.transport(ctx, port)
	if err != nil {
		return "", nil, err
	}
	return t.base.String(), t.headers.Clone(), nil
}

// transport returns the cached transport to a port, resolving it once.
func (s *Sandbox) transport(ctx context.Context, port int) (*transport, error) {
	s.mu.Lock()
	t := s.ports[port]
	s.mu.Unlock()
	if t != nil {
		return t, nil
	}
	ep, err := s.Endpoint(ctx, port)
	if err != nil {
		return nil, err
	}
	t, err = s.c.endpointTransport(ep)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if old := s.ports[port]; old != nil {
		t = old
	} else {
		s.ports[port] = t
	}
	s.mu.Unlock()
	return t, nil
}

// endpointTransport returns a transport to the sandbox port at ep: the
// client's scheme unless ep has one, ep.Headers on every request, and the
// API key only when ep is on the lifecycle server's own origin, so that it
// never leaks to another host.
func (c *Client) endpointTransport(ep api.Endpoint) (*transport, error) {
	addr := strings.TrimSpace(ep.Endpoint)
	if addr == "" {
		return nil, fmt.Errorf("%w: empty endpoint", ErrInvalid)
	}
	if !strings.Contains(addr, "://") {
		addr = c.base.Scheme + "://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%w: endpoint %q is not an address", ErrInvalid, ep.Endpoint)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = strings.TrimRight(u.RawPath, "/")
	t := c.tr
	t.base = u
	t.headers = http.Header{}
	if ua := c.tr.headers.Get("User-Agent"); ua != "" {
		t.headers.Set("User-Agent", ua)
	}
	if c.apiKey != "" && sameOrigin(u, c.base) {
		t.headers.Set(APIKeyHeader, c.apiKey)
	}
	for k, v := range ep.Headers {
		t.headers.Set(k, v)
	}
	return &t, nil
}

func sameOrigin(a, b *url.URL) bool {
	return a.Scheme == b.Scheme && strings.EqualFold(hostPort(a), hostPort(b))
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return u.Hostname() + ":" + port
}

// execdCall performs r on the sandbox's execd API.
func (s *Sandbox) execdCall(ctx context.Context, r request, out any) error {
	t, err := s.transport(ctx, ExecdPort)
	if err != nil {
		return err
	}
	return t.call(ctx, r, out)
}

// Ping checks that the sandbox's execd API answers.
//
// # Errors
// An *APIError or a transport error.
func (s *Sandbox) Ping(ctx context.Context) error {
	return s.execdCall(ctx, request{method: http.MethodGet, path: "/ping"}, nil)
}

// Metrics returns the sandbox's resource usage.
//
// # Errors
// An *APIError or a transport error.
func (s *Sandbox) Metrics(ctx context.Context) (api.Metrics, error) {
	var m api.Metrics
	err := s.execdCall(ctx, request{method: http.MethodGet, path: "/metrics"}, &m)
	return m, err
}
