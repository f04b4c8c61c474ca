package k8s

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/ingress"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// tokenHeader carries the sandbox's execd token.
const tokenHeader = execd.AccessTokenHeader

// Sandbox is one sandbox Pod, reached on its IP or through the API
// server (podAccess).
type Sandbox struct {
	r         *Runtime
	spec      runtimes.Spec
	addr      netip.Addr
	token     string
	base      *url.URL // serves execd's "/"
	execd     *httputil.ReverseProxy
	client    *http.Client
	rt        http.RoundTripper
	closeIdle func()
	agent     *egress.AgentClient // the Pod's egress agent, if any
	// secret is the data of the Pod's Secret as read at create or
	// restore: the agent's configuration and key, fixed for the Pod's
	// life (a claim needs them and reads nothing again).
	secret map[string][]byte

	exited    chan runtimes.ExitStatus // buffered 1
	stopWatch context.CancelFunc
	watching  sync.WaitGroup
}

var (
	_ runtimes.Sandbox = (*Sandbox)(nil)
	_ runtimes.Exiter  = (*Sandbox)(nil)
)

func newSandbox(r *Runtime, spec runtimes.Spec, addr netip.Addr, token string) *Sandbox {
	rt, closeIdle := r.c.access.transport()
	target := r.c.access.base(podName(spec.ID), addr, ExecdPort)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// The caller's token (the server's, for the proxy route) is
			// replaced by the one this Pod's execd wants.
			pr.Out.Header.Set(tokenHeader, token)
		},
		Transport:     rt,
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
	return &Sandbox{r: r, spec: spec, addr: addr, token: token, base: target, execd: rp, rt: rt, closeIdle: closeIdle,
		client: &http.Client{Transport: rt}, exited: make(chan runtimes.ExitStatus, 1), stopWatch: func() {}}
}

// Exited implements runtimes.Exiter: it yields once when the workload
// container (hybox-execd, its PID 1) ends on its own, as the kubelet
// reports it: {137, "OOMKilled"} for the memory limit, {code, "Killed"}
// for a death by signal, {code, "Exited"} otherwise. The channel is closed
// without a value after Close, when the Pod is deleted (Destroy), and when
// the watch on the API server fails.
func (s *Sandbox) Exited() <-chan runtimes.ExitStatus { return s.exited }

// watchExit watches the Pod, from state pod on, for the end of the
// workload container.
func (s *Sandbox) watchExit(pod *corev1.Pod) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopWatch = cancel
	s.watching.Add(1)
	go func() {
		defer s.watching.Done()
		defer close(s.exited)
		var st *runtimes.ExitStatus
		err := s.r.watchPod(ctx, pod, func(p *corev1.Pod) bool {
			for _, cs := range p.Status.ContainerStatuses {
				if t := cs.State.Terminated; cs.Name == containerName && t != nil {
					st = exitStatus(t)
					return true
				}
			}
			return false
		})
		if st != nil && ctx.Err() == nil {
			s.r.c.opts.Logger.Info("sandbox ended on its own", "id", s.spec.ID, "code", st.Code, "reason", st.Reason)
			s.exited <- *st
		} else if err != nil && ctx.Err() == nil {
			s.r.c.opts.Logger.Debug("no longer watching the sandbox's Pod", "id", s.spec.ID, "err", err)
		}
	}()
}

// exitStatus describes how the workload container ended.
func exitStatus(t *corev1.ContainerStateTerminated) *runtimes.ExitStatus {
	code := int(t.ExitCode)
	switch {
	case t.Reason == "OOMKilled":
		return &runtimes.ExitStatus{Code: code, Reason: "OOMKilled"}
	case t.Signal != 0 || code > 128:
		return &runtimes.ExitStatus{Code: code, Reason: "Killed"}
	}
	return &runtimes.ExitStatus{Code: code, Reason: "Exited"}
}

// url is the address of path on the Pod's execd.
func (s *Sandbox) url(path string) string {
	return strings.TrimSuffix(s.base.String(), "/") + path
}

// waitReady polls execd's /ping until it answers.
func (s *Sandbox) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hdr := http.Header{tokenHeader: {s.token}}
	if ok, err := s.r.c.access.probe(ctx, s.client, s.url("/ping"), hdr); ok || err != nil {
		return err
	}
	if !execd.WaitRemote(ctx, s.client, s.url("/ping"), hdr) {
		return fmt.Errorf("%w: hybox-execd in Pod %s (%s) did not answer within %s", runtimes.ErrUnavailable,
			podName(s.spec.ID), s.addr, timeout)
	}
	return nil
}

// Addr is the Pod's IP.
func (s *Sandbox) Addr() netip.Addr { return s.addr }

// Execd proxies to the Pod's hybox-execd with the sandbox's token.
func (s *Sandbox) Execd() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The claim routes of a pool member are the server's alone.
		if strings.HasPrefix(path.Clean("/"+r.URL.Path)+"/", execd.ClaimPrefix) {
			errdefs.Write(w, errdefs.New(api.ErrorCodeNOTFOUND, "no execd route %s", r.URL.Path))
			return
		}
		// Without full duplex, net/http discards the rest of the request
		// body when the response starts, racing the proxy's transport.
		_ = http.NewResponseController(w).EnableFullDuplex()
		s.execd.ServeHTTP(w, r)
	})
}

// RunCode runs code through the Pod's execd and hands its events to sink
// (runtimes.CodeRunner).
func (s *Sandbox) RunCode(ctx context.Context, req api.CodeRunRequest, sink execd.Sink) error {
	return execd.RunCodeRemote(ctx, s.client, s.url("/code"), http.Header{tokenHeader: {s.token}}, "Pod "+podName(s.spec.ID), req, sink)
}

// Proxy reverse-proxies to port of the Pod.
func (s *Sandbox) Proxy(port int) (http.Handler, error) {
	return ingress.PortProxyVia(s.spec.ID, s.r.c.access.base(podName(s.spec.ID), s.addr, port), port, s.rt, s.r.c.opts.Logger), nil
}

// Pause is not supported: the Kubernetes API has no way to freeze a Pod's
// processes (no pause subresource, no freezer in the Pod spec, none in
// the CRI), and the node's freezer is not reachable through the API.
//
// # Errors
// runtimes.ErrNotSupported.
func (s *Sandbox) Pause(ctx context.Context) error {
	return fmt.Errorf("%w: the Kubernetes runtime %q cannot pause a sandbox (Kubernetes cannot freeze a Pod); use runc or runsc for sandboxes that pause", runtimes.ErrNotSupported, s.r.name)
}

// Resume is not supported yet (see Pause).
//
// # Errors
// runtimes.ErrNotSupported.
func (s *Sandbox) Resume(ctx context.Context) error {
	return fmt.Errorf("%w: the Kubernetes runtime %q cannot resume a sandbox (it never pauses one)", runtimes.ErrNotSupported, s.r.name)
}

// Close stops watching the Pod and drops idle connections; the Pod keeps
// running.
func (s *Sandbox) Close(ctx context.Context) error {
	s.stopWatch()
	s.watching.Wait()
	s.closeIdle()
	if s.agent != nil {
		s.agent.CloseIdleConnections()
	}
	return nil
}
