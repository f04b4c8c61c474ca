package hybox

import (
	"context"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// interruptGrace bounds the request that interrupts an execution whose
// context ended.
const interruptGrace = 5 * time.Second

// execution is one streamed execution on the execd API.
type execution struct {
	lines     bool // a command: output events are lines
	t         *transport
	req       request
	interrupt func(ctx context.Context, t *transport, id string) error
}

// open starts the execution and returns its event stream.
func (e execution) open(ctx context.Context) (io.ReadCloser, error) {
	e.req.accept = "text/event-stream"
	resp, err := e.t.send(ctx, e.req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// stop interrupts the execution id on the server after its context ended
// or its consumer went away.
func (e execution) stop(ctx context.Context, id string) {
	if id == "" || e.interrupt == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interruptGrace)
	defer cancel()
	_ = e.interrupt(ctx, e.t, id)
}

// collect runs the execution to its end, calling h for every event.
func (e execution) collect(ctx context.Context, h *Handlers) (*Execution, error) {
	x := &Execution{ExitCode: -1, lines: e.lines}
	for ev, err := range e.events(ctx) {
		if err != nil {
			return x, err
		}
		x.add(ev)
		h.dispatch(ev)
	}
	if !x.finished() {
		return x, ErrIncomplete
	}
	return x, nil
}

// events yields the events of the execution. When ctx ends or the consumer
// stops before the execution finished, the execution is interrupted on the
// server. A stream that ends before the terminal event yields
// ErrIncomplete.
func (e execution) events(ctx context.Context) iter.Seq2[api.Event, error] {
	return func(yield func(api.Event, error) bool) {
		body, err := e.open(ctx)
		if err != nil {
			yield(api.Event{}, err)
			return
		}
		var id string
		done := false
		defer func() {
			if !done {
				e.stop(ctx, id)
			}
		}()
		for ev, err := range events(body) {
			if err != nil {
				if ctx.Err() != nil {
					err = fmt.Errorf("hybox: execution %s: %w", id, context.Cause(ctx))
				}
				yield(api.Event{}, err)
				return
			}
			switch ev.Type {
			case api.EventTypeInit:
				id = ev.Text
			case api.EventTypeExecutionComplete, api.EventTypeError:
				done = true
			}
			if !yield(ev, nil) {
				return
			}
		}
		if ctx.Err() != nil {
			yield(api.Event{}, fmt.Errorf("hybox: execution %s: %w", id, context.Cause(ctx)))
			return
		}
		if !done {
			yield(api.Event{}, ErrIncomplete)
		}
	}
}

// Command describes a shell command. It is the wire request of POST
// /command: Command is shell source; Timeout is in milliseconds (0 = the
// server's default).
type Command = api.CommandRequest

func (s *Sandbox) command(ctx context.Context, req Command) (execution, error) {
	t, err := s.transport(ctx, ExecdPort)
	if err != nil {
		return execution{}, err
	}
	return execution{lines: true, t: t, req: request{method: http.MethodPost, path: "/command", body: req},
		interrupt: interruptCommand}, nil
}

func interruptCommand(ctx context.Context, t *transport, id string) error {
	return t.call(ctx, request{method: http.MethodDelete, path: "/command", query: url.Values{"id": {id}}}, nil)
}

// Exec runs a shell command in the foreground and returns its outcome,
// calling h (which may be nil) for each event as it arrives. A non-zero
// exit is not an error: see Execution.ExitCode and Execution.Err.
// Cancelling ctx interrupts the command on the server.
//
// # Errors
// An *APIError when the server refuses the command (ErrRateLimited when
// too many executions run, after the retries); ctx's error; ErrIncomplete
// when the stream was cut. The Execution is returned with every error: what
// arrived before it (nothing, when the server refused the command).
func (s *Sandbox) Exec(ctx context.Context, req Command, h *Handlers) (*Execution, error) {
	req.Background = false
	e, err := s.command(ctx, req)
	if err != nil {
		return &Execution{ExitCode: -1, lines: true}, err
	}
	return e.collect(ctx, h)
}

// ExecEvents runs a shell command in the foreground and yields its events
// as they arrive: init, stdout and stderr lines, then execution_complete
// or error. Stopping the iteration early, or cancelling ctx, interrupts the
// command on the server.
//
// # Errors
// The iterator yields one error and stops: those of Exec.
func (s *Sandbox) ExecEvents(ctx context.Context, req Command) iter.Seq2[api.Event, error] {
	req.Background = false
	e, err := s.command(ctx, req)
	if err != nil {
		return func(yield func(api.Event, error) bool) { yield(api.Event{}, err) }
	}
	return e.events(ctx)
}

// Start starts a shell command in the background and returns its handle.
//
// # Errors
// An *APIError when the server refuses the command, or a transport error.
func (s *Sandbox) Start(ctx context.Context, req Command) (*BackgroundCommand, error) {
	req.Background = true
	e, err := s.command(ctx, req)
	if err != nil {
		return nil, err
	}
	e.interrupt = nil // the command outlives this call
	x, err := e.collect(ctx, nil)
	if err != nil {
		return nil, err
	}
	if x.ID == "" {
		return nil, fmt.Errorf("%w: no command id", ErrMalformedEvent)
	}
	return &BackgroundCommand{ID: x.ID, t: e.t}, nil
}

// BackgroundCommand is a handle on a command started with Start.
type BackgroundCommand struct {
	// ID is the command id.
	ID string
	t  *transport
}

// Command returns a handle on a command of the sandbox by id (as printed
// by Start).
//
// # Errors
// Those of resolving the sandbox's execd endpoint.
func (s *Sandbox) Command(ctx context.Context, id string) (*BackgroundCommand, error) {
	t, err := s.transport(ctx, ExecdPort)
	if err != nil {
		return nil, err
	}
	return &BackgroundCommand{ID: id, t: t}, nil
}

// Status returns the command's state; ExitCode is set once it finished.
//
// # Errors
// An *APIError matching ErrNotFound for an unknown id, or a transport
// error.
func (b *BackgroundCommand) Status(ctx context.Context) (api.CommandStatus, error) {
	var st api.CommandStatus
	err := b.t.call(ctx, request{method: http.MethodGet, path: "/command/status/" + pathEscape(b.ID)}, &st)
	return st, err
}

// Logs returns the command's output (stdout and stderr as written) from
// byte offset cursor on, and the cursor to pass next time.
//
// # Errors
// An *APIError matching ErrNotFound for an unknown id, or a transport
// error.
func (b *BackgroundCommand) Logs(ctx context.Context, cursor int64) (string, int64, error) {
	r := request{method: http.MethodGet, path: "/command/" + pathEscape(b.ID) + "/logs",
		query: url.Values{"cursor": {strconv.FormatInt(cursor, 10)}}, accept: "text/plain"}
	resp, err := b.t.send(ctx, r)
	if err != nil {
		return "", cursor, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONBody))
	if err != nil {
		return "", cursor, fmt.Errorf("hybox: read logs: %w", err)
	}
	next := cursor + int64(len(data))
	if h := resp.Header.Get("EXECD-COMMANDS-TAIL-CURSOR"); h != "" {
		if n, err := strconv.ParseInt(h, 10, 64); err == nil {
			next = n
		}
	}
	return string(data), next, nil
}

// Kill interrupts the command (its whole process group).
//
// # Errors
// An *APIError matching ErrNotFound for an unknown id, or a transport
// error.
func (b *BackgroundCommand) Kill(ctx context.Context) error {
	return interruptCommand(ctx, b.t, b.ID)
}

// Wait polls the command's status every interval (100 ms when zero) until
// it finished, and returns that status.
//
// # Errors
// Those of Status; ctx's error when it ends first.
func (b *BackgroundCommand) Wait(ctx context.Context, interval time.Duration) (api.CommandStatus, error) {
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	for {
		st, err := b.Status(ctx)
		if err != nil || !st.Running {
			return st, err
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return st, context.Cause(ctx)
		case <-t.C:
		}
	}
}

// Session is a persistent shell of a sandbox: its working directory and
// environment carry over from one Run to the next.
type Session struct {
	// ID is the session id.
	ID string
	t  *transport
}

// CreateSession starts a persistent shell.
//
// # Errors
// An *APIError (ErrInvalid for a bad cwd), or a transport error.
func (s *Sandbox) CreateSession(ctx context.Context, req api.SessionRequest) (*Session, error) {
	t, err := s.transport(ctx, ExecdPort)
	if err != nil {
		return nil, err
	}
	var out api.SessionCreated
	if err := t.call(ctx, request{method: http.MethodPost, path: "/session", body: req}, &out); err != nil {
		return nil, err
	}
	id := out.SessionID
	if id == "" {
		id = out.ID
	}
	return &Session{ID: id, t: t}, nil
}

// Run runs shell source in the session and returns its outcome, calling h
// (which may be nil) for each event. As for Exec, a non-zero exit is data
// and cancelling ctx interrupts the run.
//
// # Errors
// An *APIError: ErrNotFound for a closed session, ErrConflict while
// another run of it is in progress; ctx's error; ErrIncomplete.
func (se *Session) Run(ctx context.Context, req api.SessionRunRequest, h *Handlers) (*Execution, error) {
	e := execution{lines: true, t: se.t, req: request{method: http.MethodPost, path: "/session/" + pathEscape(se.ID) + "/run", body: req},
		interrupt: interruptCommand}
	return e.collect(ctx, h)
}

// Close ends the session's shell.
//
// # Errors
// An *APIError matching ErrNotFound for an unknown session, or a
// transport error.
func (se *Session) Close(ctx context.Context) error {
	return se.t.call(ctx, request{method: http.MethodDelete, path: "/session/" + pathEscape(se.ID)}, nil)
}
