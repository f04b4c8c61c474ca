package hybox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Sentinel errors. They are the error kinds of package errdefs (the one
// error model of hybox's server and clients), so errors.Is works with
// either name. Every *APIError wraps the kinds its code and status call for.
var (
	// ErrNotFound: the sandbox, file, context, command or resource does not
	// exist (404).
	ErrNotFound = errdefs.ErrNotFound
	// ErrConflict: the resource is busy or in a state that refuses the call,
	// such as a code context running another execution, a paused sandbox or
	// a stale revision (409).
	ErrConflict = errdefs.ErrConflict
	// ErrUnauthorized: the API key or a sandbox token is missing or wrong
	// (401), or does not allow the call (403, which is ErrForbidden too).
	ErrUnauthorized = errdefs.ErrUnauthorized
	// ErrForbidden: the credential is valid but does not allow the call
	// (403).
	ErrForbidden = errdefs.ErrForbidden
	// ErrRateLimited: the server refused the call for now (429); the
	// *APIError's RetryAfter says when to try again, when the server said.
	ErrRateLimited = errdefs.ErrRateLimited
	// ErrTimeout: an operation did not finish in time on the server (504),
	// or an execution hit its time limit.
	ErrTimeout = errdefs.ErrTimeout
	// ErrInvalid: the request is malformed or names something invalid
	// (400; also 405, 413 and 416, which have their own errdefs kinds).
	ErrInvalid = errdefs.ErrInvalid
	// ErrUnavailable: the server or the sandbox cannot serve the call now
	// (503; also 502, errdefs.ErrUnreachable).
	ErrUnavailable = errdefs.ErrUnavailable
	// ErrNotSupported: the server or this sandbox's runtime does not
	// implement the operation (code NOT_SUPPORTED), such as a terminal in a
	// wasm sandbox.
	ErrNotSupported = errdefs.ErrNotSupported
	// ErrInternal: the server failed (500).
	ErrInternal = errdefs.ErrInternal
)

// Errors of the SDK itself.
var (
	// ErrIncomplete: an execution's stream ended before it completed or
	// failed (the connection was cut).
	ErrIncomplete = errors.New("hybox: stream ended before the execution finished")
	// ErrMalformedEvent: a stream carried an event that is not a JSON
	// object.
	ErrMalformedEvent = errors.New("hybox: malformed stream event")
	// ErrExitStatus is wrapped by the error of Execution.Err for a command
	// that exited with a non-zero code.
	ErrExitStatus = errors.New("hybox: non-zero exit status")
)

// APIError is an error answer of the server: the HTTP status and the body
// {"code","message"}. It wraps the sentinel of its status and code (see
// Unwrap).
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the body's code, such as SANDBOX_NOT_FOUND, or HTTP_<status>
	// when the body had none.
	Code string
	// Message is the body's message, or the start of a body that was not
	// an error object.
	Message string
	// RequestID is the X-Request-ID of the answer.
	RequestID string
	// RetryAfter is the server's Retry-After, zero when it sent none.
	RetryAfter time.Duration
}

// Error returns "hybox: CODE (status): message".
func (e *APIError) Error() string {
	s := fmt.Sprintf("hybox: %s (%d)", e.Code, e.Status)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap returns the kinds of e: the kind of its code in the error table
// of the protocol document (errdefs.Kind), or for a code the table lacks
// the kind of its status; with ErrInvalid for the finer client-error kinds
// (method not allowed, too large, range), ErrUnavailable for an
// unreachable sandbox (502) and ErrUnauthorized for a forbidden call (403).
func (e *APIError) Unwrap() []error {
	kind := errdefs.Kind(api.ErrorCode(e.Code))
	if kind == nil {
		kind = errdefs.StatusKind(e.Status)
	}
	if kind == nil {
		return nil
	}
	errs := []error{kind}
	switch kind {
	case errdefs.ErrMethodNotAllowed, errdefs.ErrTooLarge, errdefs.ErrRange:
		errs = append(errs, ErrInvalid)
	case errdefs.ErrUnreachable:
		errs = append(errs, ErrUnavailable)
	case errdefs.ErrForbidden:
		errs = append(errs, ErrUnauthorized)
	}
	return errs
}

// errorFromResponse turns a non-2xx answer into an *APIError; it reads (a
// bounded part of) the body but does not close it.
func errorFromResponse(resp *http.Response, now time.Time) *APIError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &APIError{
		Status:     resp.StatusCode,
		RequestID:  resp.Header.Get("X-Request-ID"),
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), now),
	}
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &body) == nil && (body.Code != "" || body.Message != "") {
		e.Code, e.Message = body.Code, body.Message
	} else {
		msg := strings.TrimSpace(string(b))
		if len(msg) > 512 {
			msg = msg[:512] + "…"
		}
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		e.Message = msg
	}
	if e.Code == "" {
		e.Code = "HTTP_" + strconv.Itoa(resp.StatusCode)
	}
	return e
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
