package hybox_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// limitedTOML configures a server that runs one execution at a time and
// refuses others after 10 ms in the queue, without a credential-vault key.
const limitedTOML = "# no vault\n[wasm]\nmax_concurrent = 1\nqueue_wait = \"10ms\"\n"

// Each typed error, produced by a real server's answer.
func TestTypedErrors(t *testing.T) {
	srv := server(t)
	c := newClient(t, srv)
	ctx := ctxFor(t, 2*time.Minute)
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	if _, err := sb.WaitRunning(ctx, 0); err != nil {
		t.Fatal(err)
	}
	limited := serverWith(t, limitedTOML)
	lc := newClient(t, limited, hybox.WithRetry(0, 0))
	lsb := newSandbox(t, lc, api.CreateSandboxRequest{})

	tests := []struct {
		name     string
		call     func() error
		sentinel error
		status   int
		code     string
	}{
		{"not found", func() error { _, err := c.Get(ctx, "00000000-0000-4000-8000-000000000000"); return err },
			hybox.ErrNotFound, 404, "SANDBOX_NOT_FOUND"},
		{"unauthorized", func() error {
			_, err := newClient(t, srv, hybox.WithAPIKey("wrong")).List(ctx, hybox.ListOptions{})
			return err
		}, hybox.ErrUnauthorized, 401, "INVALID_API_KEY"},
		{"invalid", func() error {
			timeout := 5.0
			_, err := c.Create(ctx, api.CreateSandboxRequest{Timeout: &timeout})
			return err
		}, hybox.ErrInvalid, 400, ""},
		{"conflict", func() error { return sb.Resume(ctx) }, hybox.ErrConflict, 409, ""},
		{"not supported", func() error { _, err := sb.OpenPTY(ctx, api.PtyRequest{}); return err },
			hybox.ErrNotSupported, 400, "NOT_SUPPORTED"},
		{"unavailable", func() error {
			_, err := lc.Create(ctx, api.CreateSandboxRequest{CredentialProxy: &api.CredentialProxy{Enabled: true},
				NetworkPolicy: &api.NetworkPolicy{DefaultAction: api.PolicyActionDeny}})
			return err
		}, hybox.ErrUnavailable, 503, "UNAVAILABLE"},
		{"rate limited", func() error {
			return whileBusy(t, lsb, func() error {
				_, err := lsb.Exec(ctx, hybox.Command{Command: "echo refused"}, nil)
				return err
			})
		}, hybox.ErrRateLimited, 429, "TOO_MANY_EXECUTIONS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.sentinel) {
				t.Fatalf("error %v, want %v", err, tt.sentinel)
			}
			var ae *hybox.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("error %T is not an *APIError", err)
			}
			status := ae.Status
			if tt.sentinel == hybox.ErrNotSupported && status == 501 {
				status = 400 // the document's status for NOT_SUPPORTED; servers before the one error model answered 501
			}
			if status != tt.status || (tt.code != "" && ae.Code != tt.code) || ae.Message == "" || ae.RequestID == "" {
				t.Errorf("APIError %+v, want status %d code %q, a message and a request id", ae, tt.status, tt.code)
			}
			for _, other := range []error{hybox.ErrNotFound, hybox.ErrConflict, hybox.ErrUnauthorized, hybox.ErrRateLimited,
				hybox.ErrTimeout, hybox.ErrInvalid, hybox.ErrUnavailable, hybox.ErrNotSupported} {
				if other != tt.sentinel && errors.Is(err, other) {
					t.Errorf("error %v also matches %v", err, other)
				}
			}
		})
	}

	t.Run("timeout", func(t *testing.T) {
		x, err := sb.Exec(ctx, hybox.Command{Command: "sleep 10", Timeout: 300}, nil)
		if err != nil {
			t.Fatalf("exec: %v", err)
		}
		if !errors.Is(x.Err(), hybox.ErrTimeout) || !errors.Is(x.Err(), hybox.ErrExitStatus) || x.ExitCode != 137 {
			t.Fatalf("Err() = %v (%+v), exit %d, want ErrTimeout", x.Err(), x.Error, x.ExitCode)
		}
		req := hybox.CodeOf("python", "import time\ntime.sleep(10)")
		req.TimeoutMs = 300
		x, err = sb.RunCode(ctx, req, nil)
		if err != nil || !errors.Is(x.Err(), hybox.ErrTimeout) || errors.Is(x.Err(), hybox.ErrExitStatus) {
			t.Fatalf("code past its time limit: %v, Err() = %v, want ErrTimeout", err, x.Err())
		}
	})
}

// whileBusy calls f while sb runs a long command, which it then stops.
func whileBusy(t *testing.T, sb *hybox.Sandbox, f func() error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = sb.Exec(ctx, hybox.Command{Command: "echo started; sleep 30"}, &hybox.Handlers{OnStdout: func(string) { close(started) }})
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the long command did not start")
	}
	err := f()
	cancel()
	<-done
	return err
}

// A 429 TOO_MANY_EXECUTIONS of the real server is retried until the
// execution limiter has room.
func TestRetryWhenLimited(t *testing.T) {
	limited := serverWith(t, limitedTOML)
	c := newClient(t, limited, hybox.WithRetry(50, 100*time.Millisecond))
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	ctx := ctxFor(t, time.Minute)
	// The first command holds the only slot for a second; the second is
	// refused until then, retried, and runs.
	first := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		_, err := sb.Exec(ctx, hybox.Command{Command: "echo started; sleep 1"}, &hybox.Handlers{OnStdout: func(string) { close(started) }})
		first <- err
	}()
	<-started
	start := time.Now()
	x, err := sb.Exec(ctx, hybox.Command{Command: "echo second"}, nil)
	if err != nil || x.Text() != "second" {
		t.Fatalf("second command: %v %+v", err, x)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Errorf("the second command ran after %v: it was not held back", time.Since(start))
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// The retry policy of the SDK itself, against a local server that answers
// with retryable statuses first.
func TestRetryPolicy(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		failures  int
		status    int
		retry     string
		retries   int
		wantCalls int
		wantErr   error
	}{
		{name: "429 with Retry-After, then success", method: http.MethodGet, failures: 2, status: 429, retry: "0", retries: 3, wantCalls: 3},
		{name: "429 on POST is retried", method: http.MethodPost, failures: 1, status: 429, retries: 3, wantCalls: 2},
		{name: "503 on GET is retried", method: http.MethodGet, failures: 1, status: 503, retries: 3, wantCalls: 2},
		{name: "503 on POST is not", method: http.MethodPost, failures: 1, status: 503, retries: 3, wantCalls: 1, wantErr: hybox.ErrUnavailable},
		{name: "bounded", method: http.MethodGet, failures: 10, status: 429, retry: "0", retries: 2, wantCalls: 3, wantErr: hybox.ErrRateLimited},
		{name: "off", method: http.MethodGet, failures: 1, status: 429, retries: 0, wantCalls: 1, wantErr: hybox.ErrRateLimited},
		{name: "404 is not retried", method: http.MethodGet, failures: 1, status: 404, retries: 3, wantCalls: 1, wantErr: hybox.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			front := newFront(t, func(w http.ResponseWriter, r *http.Request) {
				calls++
				if calls <= tt.failures {
					if tt.retry != "" {
						w.Header().Set("Retry-After", tt.retry)
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(tt.status)
					_, _ = w.Write([]byte(`{"code":"X","message":"try later"}`))
					return
				}
				w.Header().Set("Content-Type", "application/json")
				if r.Method == http.MethodPost {
					_, _ = w.Write([]byte(`{"id":"s1","status":{"state":"Pending"}}`))
					return
				}
				_, _ = w.Write([]byte(`{"id":"s1","status":{"state":"Running"}}`))
			})
			c, err := hybox.New(hybox.WithDomain(front), hybox.WithRetry(tt.retries, 20*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxFor(t, 10*time.Second)
			if tt.method == http.MethodGet {
				_, err = c.Get(ctx, "s1")
			} else {
				_, err = c.Create(ctx, api.CreateSandboxRequest{})
			}
			if calls != tt.wantCalls {
				t.Errorf("%d calls, want %d", calls, tt.wantCalls)
			}
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
		})
	}

	t.Run("Retry-After is reported", func(t *testing.T) {
		front := newFront(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		})
		c, _ := hybox.New(hybox.WithDomain(front), hybox.WithRetry(0, 0))
		_, err := c.Get(ctxFor(t, 5*time.Second), "s1")
		var ae *hybox.APIError
		if !errors.As(err, &ae) || ae.RetryAfter != 7*time.Second || ae.Code != "HTTP_429" {
			t.Fatalf("error %#v, want RetryAfter 7s", err)
		}
	})
	t.Run("the context ends the wait", func(t *testing.T) {
		front := newFront(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
		})
		c, _ := hybox.New(hybox.WithDomain(front), hybox.WithRetry(3, time.Minute))
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Get(ctx, "s1")
		if !errors.Is(err, hybox.ErrRateLimited) || time.Since(start) > 5*time.Second {
			t.Fatalf("error %v after %v", err, time.Since(start))
		}
	})
}
