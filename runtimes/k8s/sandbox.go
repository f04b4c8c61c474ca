package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/ingress"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// tokenHeader carries the sandbox's execd token.
const tokenHeader = "X-EXECD-ACCESS-TOKEN"

// Sandbox is one sandbox Pod, reached on its IP.
type Sandbox struct {
	r      *Runtime
	spec   runtimes.Spec
	addr   netip.Addr
	token  string
	execd  *httputil.ReverseProxy
	client *http.Client
	tr     *http.Transport
}

var _ runtimes.Sandbox = (*Sandbox)(nil)

func newSandbox(r *Runtime, spec runtimes.Spec, addr netip.Addr, token string) *Sandbox {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
	target := &url.URL{Scheme: "http", Host: net.JoinHostPort(addr.String(), strconv.Itoa(ExecdPort))}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// The caller's token (the server's, for the proxy route) is
			// replaced by the one this Pod's execd wants.
			pr.Out.Header.Set(tokenHeader, token)
		},
		Transport:     tr,
		FlushInterval: -1, // streams: flush every write
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if req.Context().Err() != nil {
				return
			}
			r.c.opts.Logger.Debug("execd did not answer", "sandbox", spec.ID, "err", err)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, `{"code":"SANDBOX_UNREACHABLE","message":"the sandbox's execd does not answer; its Pod may have stopped"}`)
		},
	}
	return &Sandbox{r: r, spec: spec, addr: addr, token: token, execd: rp, tr: tr,
		client: &http.Client{Transport: tr}}
}

// url is the address of path on the Pod's execd.
func (s *Sandbox) url(path string) string {
	return "http://" + net.JoinHostPort(s.addr.String(), strconv.Itoa(ExecdPort)) + path
}

// waitReady polls execd's /ping until it answers.
func (s *Sandbox) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	delay := 2 * time.Millisecond
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url("/ping"), nil)
		req.Header.Set(tokenHeader, s.token)
		resp, err := s.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: hybox-execd in Pod %s (%s) did not answer within %s", runtimes.ErrUnavailable,
				podName(s.spec.ID), s.addr, timeout)
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

// Addr is the Pod's IP.
func (s *Sandbox) Addr() netip.Addr { return s.addr }

// Execd proxies to hybox-execd on the Pod's IP with the sandbox's token.
func (s *Sandbox) Execd() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Without full duplex, net/http discards the rest of the request
		// body when the response starts, racing the proxy's transport.
		_ = http.NewResponseController(w).EnableFullDuplex()
		s.execd.ServeHTTP(w, r)
	})
}

// RunCode runs code through the Pod's execd and hands its events to sink
// (runtimes.CodeRunner).
func (s *Sandbox) RunCode(ctx context.Context, req api.CodeRunRequest, sink execd.Sink) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url("/code"), bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(tokenHeader, s.token)
	resp, err := s.client.Do(hreq)
	if err != nil {
		return fmt.Errorf("%w: hybox-execd in Pod %s: %v", errdefs.ErrUnreachable, podName(s.spec.ID), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e)
		return errdefs.FromResponse(resp.StatusCode, &e, "", "")
	}
	return api.ReadEvents(resp.Body, sink.Send)
}

// Proxy reverse-proxies to port on the Pod's IP.
func (s *Sandbox) Proxy(port int) (http.Handler, error) {
	target := &url.URL{Scheme: "http", Host: net.JoinHostPort(s.addr.String(), strconv.Itoa(port))}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	id := s.spec.ID
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() != nil {
			return // the client went away
		}
		s.r.c.opts.Logger.Debug("sandbox port did not answer", "sandbox", id, "port", port, "err", err)
		ingress.WriteError(w, &ingress.PortUnreachableError{Sandbox: id, Port: port})
	}
	return rp, nil
}

// Pause is not supported yet: Kubernetes has no pause for a Pod's
// containers, and the node's freezer is not reachable through the API.
//
// # Errors
// runtimes.ErrNotSupported.
func (s *Sandbox) Pause(ctx context.Context) error {
	return fmt.Errorf("%w: the Kubernetes runtime %q cannot pause a sandbox yet; use runc or runsc for sandboxes that pause", runtimes.ErrNotSupported, s.r.name)
}

// Resume is not supported yet (see Pause).
//
// # Errors
// runtimes.ErrNotSupported.
func (s *Sandbox) Resume(ctx context.Context) error {
	return fmt.Errorf("%w: the Kubernetes runtime %q cannot resume a sandbox (it never pauses one)", runtimes.ErrNotSupported, s.r.name)
}

// Close drops idle connections; the Pod keeps running.
func (s *Sandbox) Close(ctx context.Context) error {
	s.tr.CloseIdleConnections()
	return nil
}
