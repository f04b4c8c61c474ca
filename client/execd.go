package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ExecdTokenHeader is the optional access-token header of execd.
const ExecdTokenHeader = "X-EXECD-ACCESS-TOKEN"

// Execd is a client of the execd API of one sandbox. It is safe for
// concurrent use.
type Execd struct {
	t *transport
}

// Execd resolves the execd endpoint of a sandbox (GET
// /sandboxes/{id}/endpoints/44772) and returns a client of it.
//
// # Errors
// Those of GetEndpoint and ExecdAt.
func (c *Client) Execd(ctx context.Context, sandboxID string) (*Execd, error) {
	ep, err := c.GetEndpoint(ctx, sandboxID, ExecdPort)
	if err != nil {
		return nil, err
	}
	return c.ExecdAt(*ep)
}

// ExecdAt returns a client of the execd API at ep. The endpoint gets the
// scheme of the client's domain unless it has one; ep.Headers are sent with
// every request. The API key is sent too, but only when the endpoint is on
// the lifecycle server's own host and port, so that it never leaks to
// another host.
//
// # Errors
// ErrInvalidOptions when ep.Endpoint is empty or not a valid address.
func (c *Client) ExecdAt(ep Endpoint) (*Execd, error) {
	t, err := c.endpointTransport(ep)
	if err != nil {
		return nil, err
	}
	return &Execd{t: t}, nil
}

// endpointTransport returns a transport to the sandbox port at ep: the
// scheme of the client's domain unless ep has one, ep.Headers on every
// request, and the API key only when ep is on the lifecycle server's own
// origin.
func (c *Client) endpointTransport(ep Endpoint) (*transport, error) {
	addr := strings.TrimSpace(ep.Endpoint)
	if addr == "" {
		return nil, fmt.Errorf("%w: empty endpoint", ErrInvalidOptions)
	}
	if !strings.Contains(addr, "://") {
		addr = c.base.Scheme + "://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%w: endpoint %q is not a valid address", ErrInvalidOptions, ep.Endpoint)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = strings.TrimRight(u.RawPath, "/")
	h := http.Header{}
	if c.apiKey != "" && sameOrigin(u, c.base) {
		h.Set(APIKeyHeader, c.apiKey)
	}
	if c.ua != "" {
		h.Set("User-Agent", c.ua)
	}
	for k, v := range ep.Headers {
		h.Set(k, v)
	}
	return &transport{base: u, headers: h, hc: c.hc}, nil
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

// BaseURL returns the URL execd paths are appended to.
func (e *Execd) BaseURL() string { return e.t.base.String() }

// Ping checks that execd answers.
//
// # Errors
// An *APIError or a transport error.
func (e *Execd) Ping(ctx context.Context) error {
	return e.t.call(ctx, request{method: http.MethodGet, path: "/ping"}, nil)
}

// CommandRequest is the body of POST /command.
type CommandRequest struct {
	Command    string            `json:"command"`
	Cwd        string            `json:"cwd,omitempty"`
	Background bool              `json:"background,omitempty"`
	Timeout    int64             `json:"timeout,omitempty"` // ms; 0 = the server's default
	UID        *int              `json:"uid,omitempty"`
	GID        *int              `json:"gid,omitempty"`
	Envs       map[string]string `json:"envs,omitempty"`
}

// RunCommand starts a shell command and returns its event stream. For a
// background command the stream ends at once after init; poll
// CommandStatus and CommandLogs.
//
// # Errors
// An *APIError (bad request, overloaded) or a transport error.
func (e *Execd) RunCommand(ctx context.Context, req CommandRequest) (*Stream, error) {
	return e.stream(ctx, request{method: http.MethodPost, path: "/command", body: req})
}

// InterruptCommand kills a running command's process group.
//
// # Errors
// An *APIError (unknown id) or a transport error.
func (e *Execd) InterruptCommand(ctx context.Context, id string) error {
	return e.t.call(ctx, request{method: http.MethodDelete, path: "/command", query: url.Values{"id": {id}}}, nil)
}

// CommandStatus is the state of a command.
type CommandStatus struct {
	ID         string     `json:"id"`
	Content    string     `json:"content,omitempty"`
	Running    bool       `json:"running"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Error      string     `json:"error,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// CommandStatus returns the state of a command.
//
// # Errors
// An *APIError (unknown id) or a transport error.
func (e *Execd) CommandStatus(ctx context.Context, id string) (*CommandStatus, error) {
	var st CommandStatus
	if err := e.t.call(ctx, request{method: http.MethodGet, path: "/command/status/" + pathEscape(id)}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// CommandLogs returns a command's output from cursor on and the cursor to
// pass next time.
//
// # Errors
// An *APIError (unknown id) or a transport error.
func (e *Execd) CommandLogs(ctx context.Context, id string, cursor int64) (string, int64, error) {
	r := request{
		method: http.MethodGet, path: "/command/" + pathEscape(id) + "/logs",
		query: url.Values{"cursor": {strconv.FormatInt(cursor, 10)}}, accept: "text/plain",
	}
	resp, err := e.t.send(ctx, r)
	if err != nil {
		return "", cursor, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONBody))
	if err != nil {
		return "", cursor, fmt.Errorf("read logs: %w", err)
	}
	next := cursor + int64(len(b))
	if h := resp.Header.Get("EXECD-COMMANDS-TAIL-CURSOR"); h != "" {
		if n, err := strconv.ParseInt(h, 10, 64); err == nil {
			next = n
		}
	}
	return string(b), next, nil
}

// CodeContext is a persistent interpreter of one language.
type CodeContext struct {
	ID       string `json:"id,omitempty"`
	Language string `json:"language"`
	Cwd      string `json:"cwd,omitempty"`
}

// CreateContext starts a code context.
//
// # Errors
// An *APIError (unknown language) or a transport error.
func (e *Execd) CreateContext(ctx context.Context, language, cwd string) (*CodeContext, error) {
	var out CodeContext
	body := CodeContext{Language: language, Cwd: cwd}
	if err := e.t.call(ctx, request{method: http.MethodPost, path: "/code/context", body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListContexts lists code contexts, of one language when language is not
// empty.
//
// # Errors
// An *APIError or a transport error.
func (e *Execd) ListContexts(ctx context.Context, language string) ([]CodeContext, error) {
	q := url.Values{}
	if language != "" {
		q.Set("language", language)
	}
	var out []CodeContext
	if err := e.t.call(ctx, request{method: http.MethodGet, path: "/code/contexts", query: q}, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteContext stops a code context.
//
// # Errors
// An *APIError (CONTEXT_NOT_FOUND) or a transport error.
func (e *Execd) DeleteContext(ctx context.Context, id string) error {
	return e.t.call(ctx, request{method: http.MethodDelete, path: "/code/contexts/" + pathEscape(id)}, nil)
}

// CodeRequest is the body of POST /code. Context.ID empty means the default
// context of Context.Language.
type CodeRequest struct {
	Context CodeContext `json:"context"`
	Code    string      `json:"code"`
}

// RunCode runs code in a context and returns its event stream.
//
// # Errors
// An *APIError (unknown context or language, busy) or a transport error.
func (e *Execd) RunCode(ctx context.Context, req CodeRequest) (*Stream, error) {
	return e.stream(ctx, request{method: http.MethodPost, path: "/code", body: req})
}

// InterruptCode interrupts the running execution of a context (id is the
// context or execution id).
//
// # Errors
// An *APIError or a transport error.
func (e *Execd) InterruptCode(ctx context.Context, id string) error {
	return e.t.call(ctx, request{method: http.MethodDelete, path: "/code", query: url.Values{"id": {id}}}, nil)
}

// Metrics is a resource usage sample of a sandbox.
type Metrics struct {
	CPUCount    float64 `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotalMiB float64 `json:"mem_total_mib"`
	MemUsedMiB  float64 `json:"mem_used_mib"`
	Timestamp   int64   `json:"timestamp"`
}

// Metrics returns the sandbox's current resource usage.
//
// # Errors
// An *APIError or a transport error.
func (e *Execd) Metrics(ctx context.Context) (*Metrics, error) {
	var m Metrics
	if err := e.t.call(ctx, request{method: http.MethodGet, path: "/metrics"}, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

func (e *Execd) stream(ctx context.Context, r request) (*Stream, error) {
	r.accept = "text/event-stream"
	resp, err := e.t.send(ctx, r)
	if err != nil {
		return nil, err
	}
	return newStream(resp.Body), nil
}
