package server

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/internal/mounts"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// oneShotCleanupDelay defers the teardown of a one-shot sandbox until its
// response has been written.
const oneShotCleanupDelay = 20 * time.Millisecond

// runOneShot serves POST /run: code run once in a throw-away sandbox of the
// configured one-shot runtime and image, without any bookkeeping. Without
// a networkPolicy the code has no network; with one, its requests are
// governed by it, as in a sandbox created with that policy. The code runs
// through the sandbox's CodeRunner: no HTTP request is made to its execd.
func (s *Server) runOneShot(c *gin.Context) {
	var req api.RunRequest
	if err := decodeBody(c, &req); err != nil {
		s.abortErr(c, err)
		return
	}
	if req.Code == nil {
		s.abortErr(c, badRequest("code is required"))
		return
	}
	if strings.TrimSpace(req.Language) == "" {
		s.abortErr(c, badRequest("language is required (python, javascript or bash)"))
		return
	}
	if req.TimeoutMs < 0 {
		s.abortErr(c, badRequest("timeoutMs must not be negative"))
		return
	}
	pol, err := networkPolicyOf(req.NetworkPolicy)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	rt, ok := s.opts.Runtimes.Get(s.opts.OneShotRuntime)
	if !ok {
		s.abortErr(c, errdefs.New(api.ErrorCodeUNAVAILABLE, "the one-shot runtime %q is not available on this server", s.opts.OneShotRuntime))
		return
	}
	id := newID()
	dir := filepath.Join(s.opts.DataDir, "tmp", "run-"+id)
	spec := runtimes.Spec{ID: id, Image: s.opts.OneShotImage, Dir: dir}
	var eg *egress.Controller
	if pol != nil {
		if eg, err = s.opts.Egress.New(id, egress.Config{Policy: pol}); err != nil {
			s.abortErr(c, err)
			return
		}
		spec.Egress = eg
	}
	ctx := c.Request.Context()
	teardown := func(sb runtimes.Sandbox) {
		cctx := context.WithoutCancel(ctx)
		if sb != nil {
			discard(sb)
			_ = sb.Close(cctx)
			_ = rt.Destroy(cctx, spec)
		}
		if eg != nil {
			_ = eg.Close()
		}
		_ = mounts.RemoveAll(dir)
	}
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		teardown(nil)
		s.abortErr(c, err)
		return
	}
	// Clean up once the response is on its way: tearing an interpreter
	// down costs a core for some milliseconds, which the client need not
	// wait for.
	defer time.AfterFunc(oneShotCleanupDelay, func() { teardown(sb) })
	runner, ok := sb.(runtimes.CodeRunner)
	if !ok {
		s.abortErr(c, errdefs.New(api.ErrorCodeNOTSUPPORTED, "the one-shot runtime %q cannot run code", s.opts.OneShotRuntime))
		return
	}
	creq := api.CodeRunRequest{Context: api.CodeRunContext{Language: req.Language}, Code: req.Code, TimeoutMs: req.TimeoutMs}
	if !strings.Contains(c.GetHeader("Accept"), "application/json") {
		st := execd.NewStream(c.Writer)
		defer st.Close()
		if err := runner.RunCode(ctx, creq, st); err != nil {
			s.abortErr(c, err)
		}
		return
	}
	var col collector
	if err := runner.RunCode(ctx, creq, &col); err != nil {
		s.abortErr(c, err)
		return
	}
	c.JSON(http.StatusOK, col.result())
}

// collector folds the events of one execution into a RunResult.
type collector struct {
	mu       sync.Mutex
	res      api.RunResult
	out, err strings.Builder
}

// Send implements execd.Sink.
func (c *collector) Send(ev api.Event) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ev.Type {
	case api.EventTypeInit:
		c.res.ID = ev.Text
	case api.EventTypeStdout:
		c.out.WriteString(ev.Text)
	case api.EventTypeStderr:
		c.err.WriteString(ev.Text)
	case api.EventTypeResult:
		c.res.Results = append(c.res.Results, ev.Results)
	case api.EventTypeError:
		c.res.Error = ev.Error
	case api.EventTypeExecutionComplete:
		c.res.ExecutionTime = ev.ExecutionTime
	}
	return true
}

func (c *collector) result() api.RunResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.res
	r.Stdout, r.Stderr = c.out.String(), c.err.String()
	if r.Results == nil {
		r.Results = []api.MimeBundle{}
	}
	return r
}
