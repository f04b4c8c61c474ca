package hybox

import (
	"context"
	"iter"
	"net/http"
	"net/url"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// Code is a request to run code in a context: Code is the source; Context
// names the context by id, or by language alone for that language's
// default context. CodeIn and CodeOf build the usual ones.
type Code = api.CodeRunRequest

// CodeIn returns the request to run src in the code context id.
func CodeIn(id, src string) Code {
	return Code{Code: &src, Context: api.CodeRunContext{ID: id}}
}

// CodeOf returns the request to run src in the default context of
// language (python, javascript, ...), which the sandbox starts on first
// use.
func CodeOf(language api.Language, src string) Code {
	return Code{Code: &src, Context: api.CodeRunContext{Language: language}}
}

// CreateContext starts a persistent interpreter of a language (python,
// javascript, bash, ...) whose variables carry over between runs.
//
// # Errors
// An *APIError (ErrInvalid for an unknown language), or a transport error.
func (s *Sandbox) CreateContext(ctx context.Context, req api.CodeContextRequest) (api.CodeContext, error) {
	var out api.CodeContext
	err := s.execdCall(ctx, request{method: http.MethodPost, path: "/code/context", body: req}, &out)
	return out, err
}

// Contexts lists the code contexts, of one language when language is not
// empty.
//
// # Errors
// An *APIError or a transport error.
func (s *Sandbox) Contexts(ctx context.Context, language api.Language) ([]api.CodeContext, error) {
	q := url.Values{}
	if language != "" {
		q.Set("language", language)
	}
	var out []api.CodeContext
	err := s.execdCall(ctx, request{method: http.MethodGet, path: "/code/contexts", query: q}, &out)
	return out, err
}

// DeleteContext stops a code context.
//
// # Errors
// An *APIError matching ErrNotFound for an unknown id, or a transport
// error.
func (s *Sandbox) DeleteContext(ctx context.Context, id string) error {
	return s.execdCall(ctx, request{method: http.MethodDelete, path: "/code/contexts/" + pathEscape(id)}, nil)
}

// DeleteContexts stops every code context of a language.
//
// # Errors
// An *APIError or a transport error.
func (s *Sandbox) DeleteContexts(ctx context.Context, language api.Language) error {
	q := url.Values{"language": {language}}
	return s.execdCall(ctx, request{method: http.MethodDelete, path: "/code/contexts", query: q}, nil)
}

func (s *Sandbox) code(ctx context.Context, req Code) (execution, error) {
	t, err := s.transport(ctx, ExecdPort)
	if err != nil {
		return execution{}, err
	}
	return execution{t: t, req: request{method: http.MethodPost, path: "/code", body: req}, interrupt: interruptCode}, nil
}

func interruptCode(ctx context.Context, t *transport, id string) error {
	return t.call(ctx, request{method: http.MethodDelete, path: "/code", query: url.Values{"id": {id}}}, nil)
}

// RunCode runs code in a context and returns its outcome (output, rich
// results, the exception if one was raised), calling h (which may be nil)
// for each event as it arrives. An exception in the code is data: see
// Execution.Error and Execution.Err. Cancelling ctx interrupts the code.
//
// # Errors
// An *APIError: ErrNotFound for an unknown context, ErrConflict while the
// context runs another execution, ErrRateLimited; ctx's error;
// ErrIncomplete. The Execution is returned with every error: what arrived
// before it (nothing, when the server refused the call).
func (s *Sandbox) RunCode(ctx context.Context, req Code, h *Handlers) (*Execution, error) {
	e, err := s.code(ctx, req)
	if err != nil {
		return &Execution{ExitCode: -1}, err
	}
	return e.collect(ctx, h)
}

// CodeEvents runs code in a context and yields its events as they
// arrive. Stopping the iteration early, or cancelling ctx, interrupts the
// execution.
//
// # Errors
// The iterator yields one error and stops: those of RunCode.
func (s *Sandbox) CodeEvents(ctx context.Context, req Code) iter.Seq2[api.Event, error] {
	e, err := s.code(ctx, req)
	if err != nil {
		return func(yield func(api.Event, error) bool) { yield(api.Event{}, err) }
	}
	return e.events(ctx)
}

// Interrupt interrupts the execution running in a code context (id is the
// context id or the execution id).
//
// # Errors
// An *APIError or a transport error.
func (s *Sandbox) Interrupt(ctx context.Context, id string) error {
	t, err := s.transport(ctx, ExecdPort)
	if err != nil {
		return err
	}
	return interruptCode(ctx, t, id)
}

// Run runs code once in a fresh, throw-away sandbox (POST /v1/run) and
// returns its outcome, calling h (which may be nil) for each event.
// Without a NetworkPolicy the code has no network.
//
// # Errors
// An *APIError (ErrInvalid for an unknown language), ctx's error,
// ErrIncomplete.
func (c *Client) Run(ctx context.Context, req api.RunRequest, h *Handlers) (*Execution, error) {
	e := execution{t: &c.tr, req: request{method: http.MethodPost, path: "/run", body: req}}
	return e.collect(ctx, h)
}
