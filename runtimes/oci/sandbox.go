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
	"path"
	"strings"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/ingress"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
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

	exited    chan runtimes.ExitStatus // buffered 1
	stopWatch context.CancelFunc
}

var (
	_ runtimes.Sandbox = (*Sandbox)(nil)
	_ runtimes.Exiter  = (*Sandbox)(nil)
)

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
	return &Sandbox{r: r, spec: spec, addr: addr, execd: rp, client: &http.Client{Transport: tr, Timeout: 2 * time.Second},
		exited: make(chan runtimes.ExitStatus, 1), stopWatch: func() {}}
}

// Exited implements runtimes.Exiter: it yields once when the container's
// init (hybox-execd) ends on its own: {137, "OOMKilled"} when the kernel
// killed it for the sandbox's memory limit, {137, "Killed"} for another
// SIGKILL, {code, "Exited"} otherwise. Nothing is sent after Close or
// Destroy: the channel is closed instead.
func (s *Sandbox) Exited() <-chan runtimes.ExitStatus { return s.exited }

// watch starts waiting for task's exit; it replaces any other watched
// sandbox of the same id.
func (s *Sandbox) watch(task containerd.Task) error {
	ctx, cancel := context.WithCancel(s.r.b.ctx(context.Background()))
	statusC, err := task.Wait(ctx)
	if err != nil {
		cancel()
		return fmt.Errorf("wait for task %s: %w", s.spec.ID, err)
	}
	s.mu.Lock()
	s.stopWatch = cancel
	s.mu.Unlock()
	s.r.b.mu.Lock()
	if old := s.r.b.live[s.spec.ID]; old != nil && old != s {
		old.unwatchLocked()
	}
	s.r.b.live[s.spec.ID] = s
	s.r.b.mu.Unlock()
	go func() {
		// Closed once nothing more can be reported, so that whoever
		// waits on Exited (the server, per sandbox) is released.
		defer close(s.exited)
		select {
		case st := <-statusC:
			if ctx.Err() != nil {
				return
			}
			es := s.r.b.exitStatus(s.spec.ID, st)
			s.r.b.opts.Logger.Info("sandbox ended on its own", "id", s.spec.ID, "code", es.Code, "reason", es.Reason)
			s.exited <- es
		case <-ctx.Done():
		}
	}()
	return nil
}

// unwatch stops watching: what happens to the container from now on is
// not reported.
func (s *Sandbox) unwatch() {
	s.r.b.mu.Lock()
	defer s.r.b.mu.Unlock()
	s.unwatchLocked()
}

func (s *Sandbox) unwatchLocked() {
	if s.r.b.live[s.spec.ID] == s {
		delete(s.r.b.live, s.spec.ID)
	}
	s.mu.Lock()
	s.stopWatch()
	s.mu.Unlock()
}

// waitReady polls execd's /ping over the socket until it answers.
func (s *Sandbox) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !execd.WaitRemote(ctx, s.client, "http://execd/ping", nil) {
		return fmt.Errorf("%w: hybox-execd in %s did not answer within %s (see %s)", runtimes.ErrUnavailable, s.spec.ID, timeout, logPath(s.spec))
	}
	return nil
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
			errdefs.Write(w, runtimes.ErrPaused)
			return
		}
		// The claim routes of a pool member are the server's alone.
		if strings.HasPrefix(path.Clean("/"+r.URL.Path)+"/", execd.ClaimPrefix) {
			errdefs.Write(w, errdefs.New(api.ErrorCodeNOTFOUND, "no execd route %s", r.URL.Path))
			return
		}
		// Without full duplex, net/http discards the rest of the request
		// body when the response starts, racing the proxy's transport,
		// which then closes the upstream mid-stream.
		_ = http.NewResponseController(w).EnableFullDuplex()
		s.execd.ServeHTTP(w, r)
	})
}

// RunCode runs code through hybox-execd over the sandbox's socket and
// hands its events to sink (runtimes.CodeRunner).
func (s *Sandbox) RunCode(ctx context.Context, req api.CodeRunRequest, sink execd.Sink) error {
	s.mu.Lock()
	paused := s.paused
	s.mu.Unlock()
	if paused {
		return runtimes.ErrPaused
	}
	return execd.RunCodeRemote(ctx, s.client, "http://execd/code", nil, s.spec.ID, req, sink)
}

// Proxy reverse-proxies to port on the sandbox's address.
func (s *Sandbox) Proxy(port int) (http.Handler, error) {
	if !s.addr.IsValid() {
		return nil, fmt.Errorf("%w: sandbox %s has no network address", runtimes.ErrUnavailable, s.spec.ID)
	}
	return ingress.PortProxy(s.spec.ID, s.addr.String(), port, s.r.b.opts.Logger), nil
}

// Pause freezes every process of the sandbox.
func (s *Sandbox) Pause(ctx context.Context) error {
	return s.freeze(ctx, true)
}

// Resume thaws the sandbox.
func (s *Sandbox) Resume(ctx context.Context) error {
	return s.freeze(ctx, false)
}

// freeze pauses (or resumes) the sandbox's task through the freezer.
func (s *Sandbox) freeze(ctx context.Context, pause bool) error {
	ctx = s.r.b.ctx(ctx)
	c, err := s.r.b.client.LoadContainer(ctx, s.spec.ID)
	if err != nil {
		return err
	}
	t, err := c.Task(ctx, nil)
	if err != nil {
		return err
	}
	if pause {
		err = t.Pause(ctx)
	} else {
		err = t.Resume(ctx)
	}
	if err != nil {
		return fmt.Errorf("pause=%v: %w", pause, err)
	}
	s.setPaused(pause)
	return nil
}

// Close stops watching the container and drops idle connections; the
// container keeps running.
func (s *Sandbox) Close(ctx context.Context) error {
	s.unwatch()
	s.client.CloseIdleConnections()
	return nil
}
