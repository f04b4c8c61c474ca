package hybox_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func TestLifecycle(t *testing.T) {
	c := newClient(t, server(t))
	ctx := ctxFor(t, 2*time.Minute)
	if err := c.Health(ctx); err != nil {
		t.Fatalf("health: %v", err)
	}
	timeout := 300.0
	sb := newSandbox(t, c, api.CreateSandboxRequest{Timeout: &timeout, Metadata: api.Metadata{"suite": "lifecycle", "team": "a"}})
	if sb.ID() == "" || sb.Info().Metadata["team"] != "a" {
		t.Fatalf("create: %+v", sb.Info())
	}
	info, err := sb.WaitRunning(ctx, 0)
	if err != nil || info.Status.State != api.SandboxStateRunning {
		t.Fatalf("wait running: %v %+v", err, info.Status)
	}
	if d := info.ExpiresAt.Sub(info.CreatedAt); d < 290*time.Second || d > 310*time.Second {
		t.Errorf("expiresAt - createdAt = %v, want ≈ 300s", d)
	}

	again, err := c.Connect(ctx, sb.ID())
	if err != nil || again.Info().ID != sb.ID() {
		t.Fatalf("connect: %v", err)
	}

	ep, err := sb.Endpoint(ctx, hybox.ExecdPort)
	if err != nil || ep.Endpoint == "" {
		t.Fatalf("endpoint: %v %+v", err, ep)
	}
	u, hdr, err := sb.URL(ctx, hybox.ExecdPort)
	if err != nil || !strings.HasPrefix(u, "http://") || len(hdr) == 0 {
		t.Fatalf("url: %v %q %v", err, u, hdr)
	}
	if err := sb.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if _, err := sb.Metrics(ctx); err != nil {
		t.Fatalf("metrics: %v", err)
	}

	patched, err := sb.PatchMetadata(ctx, api.MetadataPatch{"team": nil, "owner": ptr("sdk")})
	if err != nil {
		t.Fatalf("patch metadata: %v", err)
	}
	if _, ok := patched.Metadata["team"]; ok || patched.Metadata["owner"] != "sdk" || sb.Info().Metadata["owner"] != "sdk" {
		t.Errorf("metadata after patch: %v", patched.Metadata)
	}

	want := time.Now().Add(time.Hour).Truncate(time.Second)
	got, err := sb.Renew(ctx, want)
	if err != nil || !got.Equal(want) {
		t.Fatalf("renew: %v %v, want %v", err, got, want)
	}
	got, err = sb.SetTimeout(ctx, 2*time.Hour)
	if err != nil || time.Until(got) < 119*time.Minute {
		t.Fatalf("set timeout: %v %v", err, got)
	}
	if _, err := sb.Renew(ctx, time.Now().Add(-time.Hour)); !errors.Is(err, hybox.ErrInvalid) {
		t.Errorf("renew into the past: %v, want ErrInvalid", err)
	}

	if err := sb.Pause(ctx); err != nil {
		t.Fatalf("pause: %v", err)
	}
	waitState(t, sb, api.SandboxStatePaused)
	if err := sb.Pause(ctx); !errors.Is(err, hybox.ErrConflict) {
		t.Errorf("pause a paused sandbox: %v, want ErrConflict", err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if _, err := sb.WaitRunning(ctx, 0); err != nil {
		t.Fatalf("running after resume: %v", err)
	}
	x, err := sb.Exec(ctx, hybox.Command{Command: "echo back"}, nil)
	if err != nil || x.Text() != "back" {
		t.Fatalf("exec after resume: %v %+v", err, x)
	}

	if err := sb.Kill(ctx); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if _, err := c.Get(ctx, sb.ID()); !errors.Is(err, hybox.ErrNotFound) {
		t.Errorf("get after kill: %v, want ErrNotFound", err)
	}
}

func waitState(t *testing.T, sb *hybox.Sandbox, want api.SandboxState) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	for {
		info, err := sb.Refresh(ctx)
		if err != nil {
			t.Fatalf("refresh: %v", err)
		}
		if info.Status.State == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("state %s, want %s", info.Status.State, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestListFiltersAndPages(t *testing.T) {
	c := newClient(t, server(t))
	ctx := ctxFor(t, time.Minute)
	label := "list-" + time.Now().Format("150405.000000")
	ids := map[string]bool{}
	for range 3 {
		sb := newSandbox(t, c, api.CreateSandboxRequest{Metadata: api.Metadata{"suite": label}})
		ids[sb.ID()] = true
	}
	newSandbox(t, c, api.CreateSandboxRequest{Metadata: api.Metadata{"suite": label + "-other"}})

	page, err := c.List(ctx, hybox.ListOptions{Metadata: map[string]string{"suite": label}, PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 2 || page.Pagination.TotalItems != 3 || !page.Pagination.HasNextPage {
		t.Fatalf("page 1: %d items, %+v", len(page.Items), page.Pagination)
	}
	seen := map[string]bool{}
	for sb, err := range c.All(ctx, hybox.ListOptions{Metadata: map[string]string{"suite": label}, PageSize: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		seen[sb.ID] = true
	}
	if len(seen) != 3 {
		t.Fatalf("All saw %d sandboxes, want 3", len(seen))
	}
	for id := range ids {
		if !seen[id] {
			t.Errorf("All missed %s", id)
		}
	}
	none, err := c.List(ctx, hybox.ListOptions{States: []api.SandboxState{api.SandboxStateTerminated}, Metadata: map[string]string{"suite": label}})
	if err != nil || len(none.Items) != 0 {
		t.Errorf("state filter: %v %d items", err, len(none.Items))
	}
}

func TestFromEnv(t *testing.T) {
	srv := server(t)
	ctx := ctxFor(t, time.Minute)
	tests := []struct {
		name string
		env  map[string]string
	}{
		{"hybox names", map[string]string{hybox.EnvDomain: srv.URL, hybox.EnvAPIKey: srv.APIKey,
			hybox.EnvOpenSandboxDomain: "http://127.0.0.1:1", hybox.EnvOpenSandboxKey: "wrong"}},
		{"OpenSandbox names", map[string]string{hybox.EnvOpenSandboxDomain: strings.TrimPrefix(srv.URL, "http://"), hybox.EnvOpenSandboxKey: srv.APIKey}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{hybox.EnvDomain, hybox.EnvAPIKey, hybox.EnvOpenSandboxDomain, hybox.EnvOpenSandboxKey} {
				t.Setenv(k, tt.env[k])
			}
			c, err := hybox.FromEnv()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.List(ctx, hybox.ListOptions{PageSize: 1}); err != nil {
				t.Fatalf("list: %v", err)
			}
		})
	}
	t.Run("options override the environment", func(t *testing.T) {
		t.Setenv(hybox.EnvDomain, srv.URL)
		t.Setenv(hybox.EnvAPIKey, srv.APIKey)
		c, err := hybox.FromEnv(hybox.WithAPIKey("wrong-key"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.List(ctx, hybox.ListOptions{}); !errors.Is(err, hybox.ErrUnauthorized) {
			t.Fatalf("list with a wrong key: %v, want ErrUnauthorized", err)
		}
	})
	if _, err := hybox.New(hybox.WithDomain("ftp://example.com")); !errors.Is(err, hybox.ErrInvalid) {
		t.Errorf("New with an ftp domain: %v, want ErrInvalid", err)
	}
}

func ptr[T any](v T) *T { return &v }

// A signed endpoint reaches the port with its own headers, without the API
// key.
func TestSignedEndpoint(t *testing.T) {
	srv := server(t)
	c := newClient(t, srv)
	ctx := ctxFor(t, time.Minute)
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	if _, err := sb.WaitRunning(ctx, 0); err != nil {
		t.Fatal(err)
	}
	ep, err := sb.SignedEndpoint(ctx, hybox.ExecdPort, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatalf("signed endpoint: %v", err)
	}
	get := func(headers map[string]string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ep.Endpoint+"/ping", nil)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get(ep.Headers); st != http.StatusOK {
		t.Errorf("GET /ping with the signed headers: %d", st)
	}
	if st := get(nil); st != http.StatusUnauthorized {
		t.Errorf("GET /ping without them: %d, want 401", st)
	}
	if _, err := sb.SignedEndpoint(ctx, hybox.ExecdPort, time.Now().Add(-time.Minute)); !errors.Is(err, hybox.ErrInvalid) {
		t.Errorf("an expiry in the past: %v, want ErrInvalid", err)
	}
}
