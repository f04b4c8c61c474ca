package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/runtimes"
)

// RunRequest is the body of POST /run: code run once in a throw-away
// sandbox, without any bookkeeping. Without a networkPolicy the code has no
// network; with one, its HTTP(S) requests are governed by it, as in a
// sandbox created with that policy.
type RunRequest struct {
	Language      string          `json:"language"`
	Code          *string         `json:"code"`
	TimeoutMs     int64           `json:"timeoutMs"`
	NetworkPolicy json.RawMessage `json:"networkPolicy"`
}

// RunResult is the JSON answer of POST /run with Accept: application/json.
type RunResult struct {
	ID            string              `json:"id"`
	Stdout        string              `json:"stdout"`
	Stderr        string              `json:"stderr"`
	Results       []map[string]string `json:"results"`
	Error         *execd.ExecError    `json:"error"`
	ExecutionTime int64               `json:"executionTime"`
}

// oneShotCleanupDelay defers the teardown of a one-shot sandbox until its
// response has been written.
const oneShotCleanupDelay = 20 * time.Millisecond

func (s *Server) runOneShot(c *gin.Context) {
	var req RunRequest
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
	pol, err := parseNetworkPolicy(req.NetworkPolicy)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	rt, ok := s.opts.Router.Get(s.opts.OneShotRuntime)
	if !ok {
		s.abortErr(c, fmt.Errorf("%w: one-shot runtime %q", runtimes.ErrUnavailable, s.opts.OneShotRuntime))
		return
	}
	id := newID()
	dir := filepath.Join(s.opts.DataDir, "tmp", "run-"+id)
	spec := runtimes.Spec{ID: id, Image: "wasm://default", Dir: dir}
	var eg *egress.Sandbox
	if pol != nil {
		if eg, err = s.opts.Egress.New(id, egress.Config{Policy: pol}); err != nil {
			s.abortErr(c, err)
			return
		}
		spec.Egress = eg
	}
	ctx := c.Request.Context()
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		if eg != nil {
			_ = eg.Close()
		}
		_ = os.RemoveAll(dir)
		s.abortErr(c, err)
		return
	}
	// Clean up once the response is on its way: tearing an interpreter
	// down costs a core for some milliseconds, which the client need not
	// wait for.
	defer time.AfterFunc(oneShotCleanupDelay, func() {
		cctx := context.WithoutCancel(ctx)
		_ = sb.Close(cctx)
		_ = rt.Destroy(cctx, spec)
		if eg != nil {
			_ = eg.Close()
		}
		_ = os.RemoveAll(dir)
	})
	body, _ := json.Marshal(map[string]any{
		"context":   map[string]string{"language": req.Language},
		"code":      *req.Code,
		"timeoutMs": req.TimeoutMs,
	})
	inner, err := http.NewRequestWithContext(ctx, http.MethodPost, "/code", bytes.NewReader(body))
	if err != nil {
		s.abortErr(c, err)
		return
	}
	inner.Header.Set("Content-Type", "application/json")
	if !strings.Contains(c.GetHeader("Accept"), "application/json") {
		sb.Execd().ServeHTTP(c.Writer, inner)
		return
	}
	rec := &bufferWriter{header: http.Header{}}
	sb.Execd().ServeHTTP(rec, inner)
	if rec.status != http.StatusOK {
		c.Data(rec.status, rec.header.Get("Content-Type"), rec.buf.Bytes())
		return
	}
	c.JSON(http.StatusOK, collect(rec.buf.Bytes()))
}

// collect folds a stream of events into one RunResult.
func collect(stream []byte) RunResult {
	var res RunResult
	res.Results = []map[string]string{}
	var out, errb strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(stream))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		line = bytes.TrimPrefix(line, []byte("data:"))
		if len(line) == 0 {
			continue
		}
		var ev execd.Event
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		switch ev.Type {
		case execd.EventInit:
			res.ID = ev.Text
		case execd.EventStdout:
			out.WriteString(ev.Text)
		case execd.EventStderr:
			errb.WriteString(ev.Text)
		case execd.EventResult:
			res.Results = append(res.Results, ev.Results)
		case execd.EventError:
			res.Error = ev.Error
		case execd.EventExecutionComplete:
			res.ExecutionTime = ev.ExecutionTime
		}
	}
	res.Stdout, res.Stderr = out.String(), errb.String()
	return res
}

// bufferWriter is an in-memory http.ResponseWriter.
type bufferWriter struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func (b *bufferWriter) Header() http.Header { return b.header }
func (b *bufferWriter) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}
func (b *bufferWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.buf.Write(p)
}
func (b *bufferWriter) Flush() {}
