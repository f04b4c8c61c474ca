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
)

// Sentinel errors. Every *APIError wraps the one its HTTP status and code
// call for, so callers test errors with errors.Is.
var (
	// ErrNotFound: the sandbox, file, context, command or resource does not
	// exist (404).
	ErrNotFound = errors.New("hybox: not found")
	// ErrConflict: the resource is busy or in a state that refuses the call,
	// such as a code context running another execution, a paused sandbox or
	// a stale revision (409).
	ErrConflict = errors.New("hybox: conflict")
	// ErrUnauthorized: the API key or a sandbox token is missing, wrong or not
	// allowed to do this (401, 403).
	ErrUnauthorized = errors.New("hybox: unauthorized")
	// ErrRateLimited: the server refused the call for now (429); the
	// *APIError's RetryAfter says when to try again, when the server said.
	ErrRateLimited = errors.New("hybox: rate limited")
	// ErrTimeout: an operation did not finish in time on the server (504,
	// 408), or an execution hit its time limit.
	ErrTimeout = errors.New("hybox: timeout")
	// ErrInvalid: the request is malformed or names something invalid (400,
	// 413, 416, 422).
	ErrInvalid = errors.New("hybox: invalid request")
	// ErrUnavailable: the server or the sandbox cannot serve the call now
	// (502, 503).
	ErrUnavailable = errors.New("hybox: unavailable")
	// ErrNotSupported: the server or this sandbox's runtime does not
	// implement the operation (501), such as a terminal in a wasm sandbox.
	ErrNotSupported = errors.New("hybox: not supported")
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

// Unwrap returns the sentinel error for e's code and status: ErrTimeout
// for code TIMEOUT, ErrNotSupported for NOT_SUPPORTED, ErrConflict for
// CONTEXT_BUSY and INVALID_STATE, else by status (404 ErrNotFound, 409
// ErrConflict, 401/403 ErrUnauthorized, 429 ErrRateLimited, 408/504
// ErrTimeout, 400/413/416/422 ErrInvalid, 501 ErrNotSupported, 502/503
// ErrUnavailable); nil for other statuses.
func (e *APIError) Unwrap() error {
	switch e.Code {
	case "TIMEOUT":
		return ErrTimeout
	case "NOT_SUPPORTED":
		return ErrNotSupported
	case "CONTEXT_BUSY", "INVALID_STATE", "REVISION_CONFLICT":
		return ErrConflict
	case "TOO_MANY_EXECUTIONS":
		return ErrRateLimited
	}
	switch e.Status {
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict:
		return ErrConflict
	case http.StatusUnauthorized, http.StatusForbidden:
		return ErrUnauthorized
	case http.StatusTooManyRequests:
		return ErrRateLimited
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return ErrTimeout
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge,
		http.StatusRequestedRangeNotSatisfiable, http.StatusUnprocessableEntity:
		return ErrInvalid
	case http.StatusNotImplemented:
		return ErrNotSupported
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return ErrUnavailable
	}
	return nil
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
