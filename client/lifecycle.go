package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Sandbox states.
const (
	StatePending    = "Pending"
	StateRunning    = "Running"
	StatePausing    = "Pausing"
	StatePaused     = "Paused"
	StateResuming   = "Resuming"
	StateStopping   = "Stopping"
	StateTerminated = "Terminated"
	StateFailed     = "Failed"
)

// RuntimeExtension is the extensions key that selects a sandbox's runtime
// (wasm, runc or runsc).
const RuntimeExtension = "hybox.io/runtime"

// Image names a sandbox image and optional registry credentials.
type Image struct {
	URI  string     `json:"uri"`
	Auth *ImageAuth `json:"auth,omitempty"`
}

// ImageAuth holds registry credentials of an Image.
type ImageAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// Platform is an OS/architecture pair.
type Platform struct {
	OS   string `json:"os,omitempty"`
	Arch string `json:"arch,omitempty"`
}

// EgressRule is one rule of a NetworkPolicy.
type EgressRule struct {
	Action string `json:"action"` // allow or deny
	Target string `json:"target"` // domain, *.domain, IP or CIDR
}

// NetworkPolicy restricts a sandbox's outbound traffic.
type NetworkPolicy struct {
	DefaultAction string       `json:"defaultAction,omitempty"`
	Egress        []EgressRule `json:"egress,omitempty"`
}

// CredentialProxy turns on the credential vault of a sandbox.
type CredentialProxy struct {
	Enabled bool `json:"enabled"`
}

// Volume mounts host storage into a sandbox.
type Volume struct {
	Name      string          `json:"name"`
	MountPath string          `json:"mountPath"`
	ReadOnly  bool            `json:"readOnly,omitempty"`
	SubPath   string          `json:"subPath,omitempty"`
	Host      *HostVolume     `json:"host,omitempty"`
	PVC       json.RawMessage `json:"pvc,omitempty"`
}

// HostVolume is the host-path source of a Volume.
type HostVolume struct {
	Path string `json:"path"`
}

// CreateSandboxRequest is the body of POST /sandboxes.
type CreateSandboxRequest struct {
	Image      *Image   `json:"image,omitempty"`
	SnapshotID string   `json:"snapshotId,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Timeout is the lifetime in seconds (at least 60); nil is sent as
	// null, which means the sandbox never expires.
	Timeout         *int              `json:"timeout"`
	ResourceLimits  map[string]string `json:"resourceLimits,omitempty"`
	Env             map[string]string `json:"env,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	Platform        *Platform         `json:"platform,omitempty"`
	NetworkPolicy   *NetworkPolicy    `json:"networkPolicy,omitempty"`
	CredentialProxy *CredentialProxy  `json:"credentialProxy,omitempty"`
	SecureAccess    bool              `json:"secureAccess,omitempty"`
	Volumes         []Volume          `json:"volumes,omitempty"`
	Extensions      map[string]string `json:"extensions,omitempty"`
}

// Status is the state of a sandbox and why it is in it.
type Status struct {
	State            string     `json:"state"`
	Reason           string     `json:"reason,omitempty"`
	Message          string     `json:"message,omitempty"`
	LastTransitionAt *time.Time `json:"lastTransitionAt,omitempty"`
}

// Sandbox is a sandbox as the lifecycle server describes it.
type Sandbox struct {
	ID         string            `json:"id"`
	Image      *Image            `json:"image,omitempty"`
	SnapshotID string            `json:"snapshotId,omitempty"`
	Platform   *Platform         `json:"platform,omitempty"`
	Status     Status            `json:"status"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
	// Extensions holds, among others, RuntimeExtension: the runtime the
	// sandbox runs on (hybox servers always set it).
	Extensions map[string]string `json:"extensions,omitempty"`

	// Raw is the JSON object the server sent, unknown fields included.
	Raw json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes a sandbox and keeps the raw object in Raw.
func (s *Sandbox) UnmarshalJSON(b []byte) error {
	type plain Sandbox
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = Sandbox(p)
	s.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// Pagination describes one page of a list.
type Pagination struct {
	Page        int  `json:"page"`
	PageSize    int  `json:"pageSize"`
	TotalItems  int  `json:"totalItems"`
	TotalPages  int  `json:"totalPages"`
	HasNextPage bool `json:"hasNextPage"`
}

// SandboxList is one page of GET /sandboxes.
type SandboxList struct {
	Items      []Sandbox  `json:"items"`
	Pagination Pagination `json:"pagination"`

	// Raw is the JSON object the server sent.
	Raw json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes a list and keeps the raw object in Raw.
func (l *SandboxList) UnmarshalJSON(b []byte) error {
	type plain SandboxList
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*l = SandboxList(p)
	l.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// ListOptions filters GET /sandboxes. Zero values are left to the server.
type ListOptions struct {
	States   []string          // any of these states (OR)
	Metadata map[string]string // all of these pairs (AND)
	Page     int               // 1-based
	PageSize int
}

// Endpoint is how to reach one port of a sandbox: an address without scheme
// ("host[:port][/path]") and headers to send with every request to it.
type Endpoint struct {
	Endpoint string            `json:"endpoint"`
	Headers  map[string]string `json:"headers,omitempty"`
}

// Health checks GET /health of the server (outside /v1).
//
// # Errors
// An *APIError when the server is unhealthy, or a transport error.
func (c *Client) Health(ctx context.Context) error {
	t := c.transport()
	b := *t.base
	b.Path = strings.TrimSuffix(b.Path, "/v1")
	b.RawPath = ""
	t.base = &b
	return t.call(ctx, request{method: http.MethodGet, path: "/health"}, nil)
}

// CreateSandbox creates a sandbox. The server answers before the sandbox
// runs; use WaitRunning to wait for it.
//
// # Errors
// An *APIError for a refused request (bad image, bad timeout, quota), or a
// transport error.
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandboxRequest) (*Sandbox, error) {
	var sb Sandbox
	if err := c.transport().call(ctx, request{method: http.MethodPost, path: "/sandboxes", body: req}, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// ListSandboxes returns one page of sandboxes.
//
// # Errors
// An *APIError for a bad filter, or a transport error.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) (*SandboxList, error) {
	q := url.Values{}
	for _, s := range opts.States {
		q.Add("state", s)
	}
	if len(opts.Metadata) > 0 {
		q.Set("metadata", EncodeMetadataFilter(opts.Metadata))
	}
	if opts.Page > 0 {
		q.Set("page", strconv.Itoa(opts.Page))
	}
	if opts.PageSize > 0 {
		q.Set("pageSize", strconv.Itoa(opts.PageSize))
	}
	var l SandboxList
	if err := c.transport().call(ctx, request{method: http.MethodGet, path: "/sandboxes", query: q}, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// EncodeMetadataFilter encodes metadata pairs as the one "k=v&k2=v2" string
// the metadata query parameter takes, keys sorted.
func EncodeMetadataFilter(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(k))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(m[k]))
	}
	return b.String()
}

// GetSandbox returns one sandbox.
//
// # Errors
// An *APIError matching ErrNotFound for an unknown id, or a transport error.
func (c *Client) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	if err := c.transport().call(ctx, request{method: http.MethodGet, path: "/sandboxes/" + pathEscape(id)}, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// DeleteSandbox terminates a sandbox and removes it.
//
// # Errors
// An *APIError matching ErrNotFound for an unknown id, or a transport error.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	return c.transport().call(ctx, request{method: http.MethodDelete, path: "/sandboxes/" + pathEscape(id)}, nil)
}

// PatchMetadata applies a JSON merge patch to a sandbox's metadata: a nil
// value deletes its key.
//
// # Errors
// An *APIError (unknown id, reserved key), or a transport error.
func (c *Client) PatchMetadata(ctx context.Context, id string, patch map[string]*string) (*Sandbox, error) {
	var sb Sandbox
	r := request{method: http.MethodPatch, path: "/sandboxes/" + pathEscape(id) + "/metadata", body: patch}
	if err := c.transport().call(ctx, r, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// PauseSandbox asks the server to pause a sandbox.
//
// # Errors
// An *APIError (unknown id, state that cannot pause), or a transport error.
func (c *Client) PauseSandbox(ctx context.Context, id string) error {
	return c.transport().call(ctx, request{method: http.MethodPost, path: "/sandboxes/" + pathEscape(id) + "/pause"}, nil)
}

// ResumeSandbox asks the server to resume a paused sandbox.
//
// # Errors
// An *APIError (unknown id, state that cannot resume), or a transport error.
func (c *Client) ResumeSandbox(ctx context.Context, id string) error {
	return c.transport().call(ctx, request{method: http.MethodPost, path: "/sandboxes/" + pathEscape(id) + "/resume"}, nil)
}

// RenewExpiration sets a sandbox's expiry time and returns the time the
// server recorded.
//
// # Errors
// An *APIError (unknown id, time in the past), or a transport error.
func (c *Client) RenewExpiration(ctx context.Context, id string, expiresAt time.Time) (time.Time, error) {
	var out struct {
		ExpiresAt time.Time `json:"expiresAt"`
	}
	body := map[string]string{"expiresAt": expiresAt.UTC().Format(time.RFC3339Nano)}
	r := request{method: http.MethodPost, path: "/sandboxes/" + pathEscape(id) + "/renew-expiration", body: body}
	if err := c.transport().call(ctx, r, &out); err != nil {
		return time.Time{}, err
	}
	return out.ExpiresAt, nil
}

// GetEndpoint returns how to reach a port of a sandbox.
//
// # Errors
// An *APIError (unknown id, port), or a transport error.
func (c *Client) GetEndpoint(ctx context.Context, id string, port int) (*Endpoint, error) {
	var ep Endpoint
	r := request{method: http.MethodGet, path: fmt.Sprintf("/sandboxes/%s/endpoints/%d", pathEscape(id), port)}
	if err := c.transport().call(ctx, r, &ep); err != nil {
		return nil, err
	}
	return &ep, nil
}

// WaitRunning polls a sandbox every interval (250 ms when zero) until it is
// Running and returns it.
//
// # Errors
// A *StateError when the sandbox reaches Failed, Terminated or Stopping; an
// *APIError from polling; ctx.Err() when ctx ends first.
func (c *Client) WaitRunning(ctx context.Context, id string, interval time.Duration) (*Sandbox, error) {
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		sb, err := c.GetSandbox(ctx, id)
		if err != nil {
			return nil, err
		}
		switch sb.Status.State {
		case StateRunning:
			return sb, nil
		case StateFailed, StateTerminated, StateStopping:
			return sb, &StateError{ID: id, Status: sb.Status}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// StateError reports a sandbox that reached a state it cannot leave for
// Running.
type StateError struct {
	ID     string
	Status Status
}

// Error describes the state and its reason.
func (e *StateError) Error() string {
	s := fmt.Sprintf("sandbox %s is %s", e.ID, e.Status.State)
	if e.Status.Reason != "" {
		s += ": " + e.Status.Reason
	}
	if e.Status.Message != "" {
		s += ": " + e.Status.Message
	}
	return s
}

// RunRequest is the body of hybox's one-shot POST /run: run code in a
// fresh, throw-away sandbox. Without a NetworkPolicy the code has no
// network.
type RunRequest struct {
	Language      string         `json:"language"`
	Code          string         `json:"code"`
	TimeoutMs     int64          `json:"timeoutMs,omitempty"`
	NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`
}

// Run runs code once in a throw-away sandbox (hybox's POST /v1/run) and
// returns its event stream.
//
// # Errors
// An *APIError (unknown language, bad request), or a transport error.
func (c *Client) Run(ctx context.Context, req RunRequest) (*Stream, error) {
	resp, err := c.transport().send(ctx, request{method: http.MethodPost, path: "/run", body: req, accept: "text/event-stream"})
	if err != nil {
		return nil, err
	}
	return newStream(resp.Body), nil
}
