package oci

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/hybox-dev/hybox/runtimes"
)

// Sandbox is one container sandbox.
type Sandbox struct {
	r      *Runtime
	spec   runtimes.Spec
	addr   netip.Addr
	execd  *httputil.ReverseProxy
	client *http.Client

	mu     sync.Mutex
	paused bool
}

var _ runtimes.Sandbox = (*Sandbox)(nil)

func newSandbox(r *Runtime, spec runtimes.Spec, addr netip.Addr) *Sandbox {
	sock := socketPath(spec)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialUnix(ctx, sock)
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
	target := &url.URL{Scheme: "http", Host: "execd"}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = "execd"
		},
		Transport:     tr,
		FlushInterval: -1, // streams: flush every write
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, `{"code":"SANDBOX_UNREACHABLE","message":"the sandbox's execd does not answer; the sandbox may have stopped"}`)
		},
	}
	return &Sandbox{r: r, spec: spec, addr: addr, execd: rp, client: &http.Client{Transport: tr, Timeout: 2 * time.Second}}
}

// waitReady polls execd's /ping over the socket until it answers.
func (s *Sandbox) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	delay := 2 * time.Millisecond
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://execd/ping", nil)
		resp, err := s.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: hybox-execd in %s did not answer within %s (see %s)", runtimes.ErrUnavailable, s.spec.ID, timeout, logPath(s.spec))
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

func (s *Sandbox) setPaused(p bool) {
	s.mu.Lock()
	s.paused = p
	s.mu.Unlock()
}

// Execd proxies to hybox-execd over the sandbox's unix socket. While the
// sandbox is paused it answers 409 without touching the frozen container.
func (s *Sandbox) Execd() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		paused := s.paused
		s.mu.Unlock()
		if paused {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"code":"SANDBOX_PAUSED","message":"the sandbox is paused; resume it first"}`)
			return
		}
		s.execd.ServeHTTP(w, r)
	})
}

// Proxy reverse-proxies to port on the sandbox's address.
func (s *Sandbox) Proxy(port int) (http.Handler, error) {
	if !s.addr.IsValid() {
		return nil, fmt.Errorf("%w: sandbox %s has no network address", runtimes.ErrUnavailable, s.spec.ID)
	}
	target := &url.URL{Scheme: "http", Host: net.JoinHostPort(s.addr.String(), strconv.Itoa(port))}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	return rp, nil
}

// Pause freezes every process of the sandbox.
func (s *Sandbox) Pause(ctx context.Context) error {
	ctx = s.r.b.ctx(ctx)
	c, err := s.r.b.client.LoadContainer(ctx, s.spec.ID)
	if err != nil {
		return err
	}
	t, err := c.Task(ctx, nil)
	if err != nil {
		return err
	}
	if err := t.Pause(ctx); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	s.setPaused(true)
	return nil
}

// Resume thaws the sandbox.
func (s *Sandbox) Resume(ctx context.Context) error {
	ctx = s.r.b.ctx(ctx)
	c, err := s.r.b.client.LoadContainer(ctx, s.spec.ID)
	if err != nil {
		return err
	}
	t, err := c.Task(ctx, nil)
	if err != nil {
		return err
	}
	if err := t.Resume(ctx); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	s.setPaused(false)
	return nil
}

// Close drops idle connections; the container keeps running.
func (s *Sandbox) Close(ctx context.Context) error {
	s.client.CloseIdleConnections()
	return nil
}
