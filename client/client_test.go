package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/client"
	"github.com/hybox-dev/hybox/client/clienttest"
)

func newClient(t *testing.T, srv *clienttest.Server) *client.Client {
	t.Helper()
	c, err := client.New(client.Options{Domain: srv.URL, APIKey: srv.APIKey, UserAgent: "hybox-test"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNormalizeDomain(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "no scheme", in: "127.0.0.1:8080", want: "http://127.0.0.1:8080"},
		{name: "https kept", in: "https://sb.example.com/", want: "https://sb.example.com"},
		{name: "path kept", in: "http://h/api//", want: "http://h/api"},
		{name: "empty", in: " ", wantErr: true},
		{name: "bad scheme", in: "ftp://h", wantErr: true},
		{name: "no host", in: "http://", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := client.NormalizeDomain(tt.in)
			if tt.wantErr {
				if !errors.Is(err, client.ErrInvalidOptions) {
					t.Fatalf("err = %v, want ErrInvalidOptions", err)
				}
				return
			}
			if err != nil || u.String() != tt.want {
				t.Fatalf("got %v, %v; want %s", u, err, tt.want)
			}
		})
	}
	c, err := client.New(client.Options{Domain: "h:1/v1"})
	if err != nil || c.BaseURL() != "http://h:1/v1" {
		t.Fatalf("v1 doubled: %v %v", c.BaseURL(), err)
	}
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	srv := clienttest.NewServer(t)
	srv.SetPendingPolls(2)
	c := newClient(t, srv)

	if err := c.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	timeout := 600
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{
		Image:          &client.Image{URI: "wasm://default"},
		Timeout:        &timeout,
		Env:            map[string]string{"A": "1"},
		Metadata:       map[string]string{"team": "x"},
		ResourceLimits: map[string]string{"memory": "512Mi"},
		Extensions:     map[string]string{client.RuntimeExtension: "wasm"},
	})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	if sb.Status.State != client.StatePending || sb.ExpiresAt == nil || len(sb.Raw) == 0 {
		t.Fatalf("created = %+v", sb)
	}
	if d := sb.ExpiresAt.Sub(sb.CreatedAt); d != 600*time.Second {
		t.Errorf("expiresAt - createdAt = %v", d)
	}
	req, _ := srv.LastRequest("POST", "/v1/sandboxes")
	if req.Header.Get(client.APIKeyHeader) != srv.APIKey || req.Header.Get("User-Agent") != "hybox-test" {
		t.Errorf("headers = %v", req.Header)
	}
	var body map[string]any
	_ = json.Unmarshal(req.Body, &body)
	if body["timeout"] != 600.0 || body["extensions"].(map[string]any)[client.RuntimeExtension] != "wasm" {
		t.Errorf("create body = %s", req.Body)
	}

	// A nil timeout is sent as an explicit null (no expiry).
	sb2, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Image: &client.Image{URI: "wasm://default"}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ = srv.LastRequest("POST", "/v1/sandboxes")
	if !strings.Contains(string(req.Body), `"timeout":null`) || sb2.ExpiresAt != nil {
		t.Errorf("no-expiry create body = %s, expiresAt = %v", req.Body, sb2.ExpiresAt)
	}

	got, err := c.WaitRunning(ctx, sb.ID, time.Millisecond)
	if err != nil || got.Status.State != client.StateRunning {
		t.Fatalf("WaitRunning = %+v, %v", got, err)
	}
	if !strings.Contains(string(got.Raw), `"runtime":"wasm"`) {
		t.Errorf("Raw lost unknown fields: %s", got.Raw)
	}

	list, err := c.ListSandboxes(ctx, client.ListOptions{States: []string{client.StateRunning, client.StatePaused}, Metadata: map[string]string{"team": "x"}, Page: 1, PageSize: 10})
	if err != nil {
		t.Fatalf("ListSandboxes: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].ID != sb.ID || list.Pagination.TotalItems != 1 || len(list.Raw) == 0 {
		t.Fatalf("list = %+v", list)
	}
	req, _ = srv.LastRequest("GET", "/v1/sandboxes")
	if q := req.Query; len(q["state"]) != 2 || q.Get("metadata") != "team=x" || q.Get("pageSize") != "10" {
		t.Errorf("list query = %v", q)
	}

	v := "y"
	patched, err := c.PatchMetadata(ctx, sb.ID, map[string]*string{"team": nil, "owner": &v})
	if err != nil || patched.Metadata["owner"] != "y" || patched.Metadata["team"] != "" {
		t.Fatalf("PatchMetadata = %+v, %v", patched, err)
	}
	if err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if s, _ := c.GetSandbox(ctx, sb.ID); s.Status.State != client.StatePaused {
		t.Errorf("after pause: %s", s.Status.State)
	}
	if err := c.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	want := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	exp, err := c.RenewExpiration(ctx, sb.ID, want)
	if err != nil || !exp.Equal(want) {
		t.Fatalf("RenewExpiration = %v, %v; want %v", exp, err, want)
	}
	if _, err := c.RenewExpiration(ctx, sb.ID, time.Now().Add(-time.Hour)); err == nil {
		t.Error("renew into the past succeeded")
	}

	ep, err := c.GetEndpoint(ctx, sb.ID, client.ExecdPort)
	if err != nil || !strings.HasSuffix(ep.Endpoint, "/proxy/44772") || strings.Contains(ep.Endpoint, "://") {
		t.Fatalf("GetEndpoint = %+v, %v", ep, err)
	}

	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	_, err = c.GetSandbox(ctx, sb.ID)
	if !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

func TestAPIErrors(t *testing.T) {
	ctx := context.Background()
	srv := clienttest.NewServer(t)
	tests := []struct {
		name     string
		key      string
		call     func(c *client.Client) error
		status   int
		code     string
		sentinel error
	}{
		{name: "missing key", key: "", call: func(c *client.Client) error { _, err := c.ListSandboxes(ctx, client.ListOptions{}); return err }, status: 401, code: "MISSING_API_KEY", sentinel: client.ErrUnauthorized},
		{name: "wrong key", key: "nope", call: func(c *client.Client) error { _, err := c.GetSandbox(ctx, "x"); return err }, status: 401, code: "INVALID_API_KEY", sentinel: client.ErrUnauthorized},
		{name: "not found", key: srv.APIKey, call: func(c *client.Client) error { return c.DeleteSandbox(ctx, "nope") }, status: 404, code: "SANDBOX_NOT_FOUND", sentinel: client.ErrNotFound},
		{name: "bad timeout", key: srv.APIKey, call: func(c *client.Client) error {
			n := 5
			_, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Timeout: &n})
			return err
		}, status: 400, code: "INVALID_PARAMETER"},
		{name: "bad language", key: srv.APIKey, call: func(c *client.Client) error {
			_, err := c.Run(ctx, client.RunRequest{Language: "cobol", Code: "x"})
			return err
		}, status: 400, code: "UNKNOWN_LANGUAGE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := client.New(client.Options{Domain: srv.URL, APIKey: tt.key})
			err := tt.call(c)
			var ae *client.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v (%T), want *APIError", err, err)
			}
			if ae.StatusCode != tt.status || ae.Code != tt.code || ae.Message == "" || ae.RequestID != "req-1" {
				t.Errorf("APIError = %+v", ae)
			}
			if !strings.HasPrefix(ae.Error(), tt.code+": ") {
				t.Errorf("Error() = %q", ae.Error())
			}
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.sentinel)
			}
		})
	}
}

func TestNonJSONErrorBody(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream exploded", http.StatusBadGateway)
	}))
	defer hs.Close()
	c, _ := client.New(client.Options{Domain: hs.URL})
	_, err := c.GetSandbox(context.Background(), "x")
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Code != "HTTP_502" || ae.Message != "upstream exploded" {
		t.Fatalf("err = %#v", err)
	}
}

func TestWaitRunningFailed(t *testing.T) {
	srv := clienttest.NewServer(t)
	id := srv.AddSandbox(client.Sandbox{Status: client.Status{State: client.StateFailed, Reason: "ImagePullError", Message: "no such image"}})
	_, err := newClient(t, srv).WaitRunning(context.Background(), id, time.Millisecond)
	var se *client.StateError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "no such image") {
		t.Fatalf("err = %v", err)
	}
}

func TestOneShotRun(t *testing.T) {
	srv := clienttest.NewServer(t)
	srv.SetDataPrefix(true)
	st, err := newClient(t, srv).Run(context.Background(), client.RunRequest{Language: "python", Code: "print(1)", TimeoutMs: 5000})
	if err != nil {
		t.Fatal(err)
	}
	x, err := st.Collect(nil)
	if err != nil || !x.Complete || len(x.Results) != 1 || x.Results[0]["text"] != "42" || x.Stdout[0] != "out: print(1)\n" {
		t.Fatalf("execution = %+v, %v", x, err)
	}
	req, _ := srv.LastRequest("POST", "/v1/run")
	if !strings.Contains(string(req.Body), `"timeoutMs":5000`) || req.Header.Get("Accept") != "text/event-stream" {
		t.Errorf("run request = %s %v", req.Body, req.Header)
	}
}
