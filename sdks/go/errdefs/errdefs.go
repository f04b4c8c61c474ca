// Package errdefs is hybox's one error model, shared by the server and its
// clients. It holds the error kinds (sentinels such as ErrNotFound), the
// table that gives every wire code of the protocol document (the ErrorCode
// schema of sdks/openapi.yaml) its kind and HTTP status, the one function
// that turns a server-side error into a status and a {code, message} body
// (HTTP), and its inverse for clients (FromResponse).
//
// Server code wraps a kind with context where an error arises:
//
//	fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
//
// or, when the wire code must be more precise than the kind's default,
// attaches a code:
//
//	errdefs.New(api.ErrorCodeContextNotFound, "context %s does not exist", id)
//
// Either way errors.Is(err, errdefs.ErrNotFound) holds, on the server and,
// after FromResponse, on the client.
//
// The package imports only the standard library and the generated wire
// types.
package errdefs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// Kinds. Each wire code belongs to exactly one kind, and the kind decides
// the HTTP status.
var (
	// ErrInvalid: the request is malformed or names something impossible (400).
	ErrInvalid = errors.New("invalid argument")
	// ErrNotSupported: the sandbox's runtime or this server cannot do it;
	// the message names what can (400).
	ErrNotSupported = errors.New("not supported")
	// ErrUnauthorized: a credential is missing or wrong (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: the credential is valid but does not allow this (403).
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound: no such sandbox, file, context, route or object (404).
	ErrNotFound = errors.New("not found")
	// ErrMethodNotAllowed: the path exists, the method does not (405).
	ErrMethodNotAllowed = errors.New("method not allowed")
	// ErrConflict: the object is busy, exists already, or is in a state
	// that does not allow this (409).
	ErrConflict = errors.New("conflict")
	// ErrTooLarge: the body or an upload exceeds a limit (413).
	ErrTooLarge = errors.New("payload too large")
	// ErrRange: a byte range that the file cannot satisfy (416).
	ErrRange = errors.New("range not satisfiable")
	// ErrUpgradeRequired: the client must switch protocols (a WebSocket
	// version this server does not speak) (426).
	ErrUpgradeRequired = errors.New("upgrade required")
	// ErrRateLimited: too much at once; retry after a while (429).
	ErrRateLimited = errors.New("rate limited")
	// ErrInternal: a bug or an unexpected failure inside the server (500).
	ErrInternal = errors.New("internal error")
	// ErrUnreachable: the sandbox's port or daemon did not answer (502).
	ErrUnreachable = errors.New("unreachable")
	// ErrUnavailable: a part the request needs is not running (503).
	ErrUnavailable = errors.New("unavailable")
	// ErrTimeout: the operation did not finish in time (504).
	ErrTimeout = errors.New("timeout")
)

// kindStatus is the HTTP status of each kind.
var kindStatus = map[error]int{
	ErrInvalid:          http.StatusBadRequest,
	ErrNotSupported:     http.StatusBadRequest,
	ErrUnauthorized:     http.StatusUnauthorized,
	ErrForbidden:        http.StatusForbidden,
	ErrNotFound:         http.StatusNotFound,
	ErrMethodNotAllowed: http.StatusMethodNotAllowed,
	ErrConflict:         http.StatusConflict,
	ErrTooLarge:         http.StatusRequestEntityTooLarge,
	ErrRange:            http.StatusRequestedRangeNotSatisfiable,
	ErrUpgradeRequired:  http.StatusUpgradeRequired,
	ErrRateLimited:      http.StatusTooManyRequests,
	ErrInternal:         http.StatusInternalServerError,
	ErrUnreachable:      http.StatusBadGateway,
	ErrUnavailable:      http.StatusServiceUnavailable,
	ErrTimeout:          http.StatusGatewayTimeout,
}

// kindCode is the code an error of a kind gets when nothing more precise
// was attached.
var kindCode = map[error]api.ErrorCode{
	ErrInvalid:          api.ErrorCodeINVALIDREQUEST,
	ErrNotSupported:     api.ErrorCodeNOTSUPPORTED,
	ErrUnauthorized:     api.ErrorCodeUNAUTHORIZED,
	ErrForbidden:        api.ErrorCodeFORBIDDEN,
	ErrNotFound:         api.ErrorCodeNOTFOUND,
	ErrMethodNotAllowed: api.ErrorCodeMETHODNOTALLOWED,
	ErrConflict:         api.ErrorCodeCONFLICT,
	ErrTooLarge:         api.ErrorCodePAYLOADTOOLARGE,
	ErrRange:            api.ErrorCodeINVALIDRANGE,
	ErrUpgradeRequired:  api.ErrorCodeUPGRADEREQUIRED,
	ErrRateLimited:      api.ErrorCodeTOOMANYEXECUTIONS,
	ErrInternal:         api.ErrorCodeINTERNALERROR,
	ErrUnreachable:      api.ErrorCodeSANDBOXUNREACHABLE,
	ErrUnavailable:      api.ErrorCodeUNAVAILABLE,
	ErrTimeout:          api.ErrorCodeTIMEOUT,
}

// Codes gives every wire code its kind. It is the Go side of the ErrorCode
// table in the protocol document; a test keeps the two equal.
var codes = map[api.ErrorCode]error{
	api.ErrorCodeINVALIDREQUEST:          ErrInvalid,
	api.ErrorCodeINVALIDREQUESTBODY:      ErrInvalid,
	api.ErrorCodeMISSINGQUERY:            ErrInvalid,
	api.ErrorCodeINVALIDPATH:             ErrInvalid,
	api.ErrorCodeINVALIDFILEMETADATA:     ErrInvalid,
	api.ErrorCodeUNKNOWNLANGUAGE:         ErrInvalid,
	api.ErrorCodeINVALIDROUTE:            ErrInvalid,
	api.ErrorCodeNOTSUPPORTED:            ErrNotSupported,
	api.ErrorCodeMISSINGAPIKEY:           ErrUnauthorized,
	api.ErrorCodeINVALIDAPIKEY:           ErrUnauthorized,
	api.ErrorCodeUNAUTHORIZED:            ErrUnauthorized,
	api.ErrorCodeINVALIDROUTETOKEN:       ErrUnauthorized,
	api.ErrorCodeROUTETOKENEXPIRED:       ErrUnauthorized,
	api.ErrorCodeFORBIDDEN:               ErrForbidden,
	api.ErrorCodePERMISSIONDENIED:        ErrForbidden,
	api.ErrorCodeNOTFOUND:                ErrNotFound,
	api.ErrorCodeSANDBOXNOTFOUND:         ErrNotFound,
	api.ErrorCodeFILENOTFOUND:            ErrNotFound,
	api.ErrorCodeCONTEXTNOTFOUND:         ErrNotFound,
	api.ErrorCodeIMAGENOTFOUND:           ErrNotFound,
	api.ErrorCodeMETHODNOTALLOWED:        ErrMethodNotAllowed,
	api.ErrorCodeCONFLICT:                ErrConflict,
	api.ErrorCodeINVALIDSTATE:            ErrConflict,
	api.ErrorCodeSANDBOXPAUSED:           ErrConflict,
	api.ErrorCodeCONTEXTBUSY:             ErrConflict,
	api.ErrorCodeFILEEXISTS:              ErrConflict,
	api.ErrorCodeVAULTEXISTS:             ErrConflict,
	api.ErrorCodeREVISIONCONFLICT:        ErrConflict,
	api.ErrorCodeCREDENTIALPROXYDISABLED: ErrConflict,
	api.ErrorCodePAYLOADTOOLARGE:         ErrTooLarge,
	api.ErrorCodeINVALIDRANGE:            ErrRange,
	api.ErrorCodeUPGRADEREQUIRED:         ErrUpgradeRequired,
	api.ErrorCodeTOOMANYEXECUTIONS:       ErrRateLimited,
	api.ErrorCodeINTERNALERROR:           ErrInternal,
	api.ErrorCodeSANDBOXUNREACHABLE:      ErrUnreachable,
	api.ErrorCodeUNAVAILABLE:             ErrUnavailable,
	api.ErrorCodeRUNTIMEERROR:            ErrUnavailable,
	api.ErrorCodeTIMEOUT:                 ErrTimeout,
}

// Kind returns the kind of a wire code, or nil for a code the table lacks.
func Kind(code api.ErrorCode) error { return codes[code] }

// Status returns the HTTP status of a wire code (500 for an unknown one).
func Status(code api.ErrorCode) int {
	if k, ok := codes[code]; ok {
		return kindStatus[k]
	}
	return http.StatusInternalServerError
}

// Codes returns every wire code in the table.
func Codes() []api.ErrorCode {
	out := make([]api.ErrorCode, 0, len(codes))
	for c := range codes {
		out = append(out, c)
	}
	return out
}

// Error is an error with a wire code and a message written for the caller.
// errors.Is(e, K) holds for the kind K of its code and for anything its
// cause matches.
type Error struct {
	// Code is the wire code.
	Code api.ErrorCode
	// Message is what the caller reads. It is sent even with a 5xx status,
	// so it must never carry internal details.
	Message string
	// Status is the HTTP status of an error decoded from a response (0 on
	// the server side: the code decides).
	Status int
	// RequestID is the X-Request-ID of the response an error was decoded
	// from.
	RequestID string
	// RetryAfter is the wait a 429 or 503 response asked for (0 if none).
	RetryAfter time.Duration

	cause error
}

// New returns an *Error with code and a formatted message.
func New(code api.ErrorCode, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with code whose message is cause's text; cause
// stays reachable through errors.Is and errors.As.
func Wrap(code api.ErrorCode, cause error) error {
	return &Error{Code: code, Message: cause.Error(), cause: cause}
}

// Error implements error.
func (e *Error) Error() string { return e.Message }

// Unwrap returns the cause given to Wrap, if any.
func (e *Error) Unwrap() error { return e.cause }

// Is reports whether target is the kind of e's code.
func (e *Error) Is(target error) bool {
	k, ok := codes[e.Code]
	return ok && k == target
}

// kinds in the order HTTP looks for them.
var kindOrder = []error{
	ErrInvalid, ErrNotSupported, ErrUnauthorized, ErrForbidden, ErrNotFound, ErrMethodNotAllowed,
	ErrConflict, ErrTooLarge, ErrRange, ErrUpgradeRequired, ErrRateLimited, ErrUnreachable, ErrUnavailable, ErrTimeout,
	ErrInternal,
}

// fixed5xx are the messages of 5xx answers whose error carries no message
// written for the caller.
var fixed5xx = map[error]string{
	ErrInternal:    "internal error",
	ErrUnreachable: "the sandbox did not answer",
	ErrUnavailable: "a part this request needs is not available",
	ErrTimeout:     "the operation did not finish in time",
}

// HTTP turns err into an HTTP status and the {code, message} body. It is
// the one place where errors become statuses: every surface (lifecycle,
// execd, egress, ingress) answers through it.
//
// An *Error in the chain decides the code. Otherwise a kind in the chain
// decides the code (its default code). With an *Error in the chain the
// message is err's whole text (the context wrapped around it names what was
// wrong), except for 500, which gets only the *Error's own message; a bare
// kind gives its text for 4xx and a fixed text for 5xx. Code that wraps a
// coded 5xx must therefore not put an internal error's text into it. Standard errors are
// understood too: fs.ErrNotExist is FILE_NOT_FOUND, fs.ErrExist
// FILE_EXISTS, fs.ErrPermission PERMISSION_DENIED, a context deadline
// TIMEOUT. Anything else is 500 INTERNAL_ERROR. A 5xx body never carries
// the text of an error that was not written for the caller.
func HTTP(err error) (int, api.Error) {
	var e *Error
	if errors.As(err, &e) {
		k, ok := codes[e.Code]
		if !ok {
			return http.StatusInternalServerError, api.Error{Code: api.ErrorCodeINTERNALERROR, Message: fixed5xx[ErrInternal]}
		}
		status, msg := kindStatus[k], err.Error()
		if status == http.StatusInternalServerError {
			msg = e.Message
		}
		return status, api.Error{Code: e.Code, Message: msg}
	}
	code, kind := api.ErrorCode(""), error(nil)
	for _, k := range kindOrder {
		if errors.Is(err, k) {
			code, kind = kindCode[k], k
			break
		}
	}
	if kind == nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			code, kind = api.ErrorCodeFILENOTFOUND, ErrNotFound
		case errors.Is(err, fs.ErrExist):
			code, kind = api.ErrorCodeFILEEXISTS, ErrConflict
		case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
			// A read-only mount (a read-only volume) refuses like a mode.
			code, kind = api.ErrorCodePERMISSIONDENIED, ErrForbidden
		case errors.Is(err, context.DeadlineExceeded):
			code, kind = api.ErrorCodeTIMEOUT, ErrTimeout
		default:
			code, kind = api.ErrorCodeINTERNALERROR, ErrInternal
		}
	}
	status := kindStatus[kind]
	msg := err.Error()
	if status >= 500 {
		msg = fixed5xx[kind]
	}
	return status, api.Error{Code: code, Message: msg}
}

// Internal reports whether err maps to 500 INTERNAL_ERROR: a failure the
// server should log, since its text does not reach the caller.
func Internal(err error) bool {
	st, body := HTTP(err)
	return st == http.StatusInternalServerError && body.Code == api.ErrorCodeINTERNALERROR
}

// FromResponse builds the client-side error of an answer with status and
// the decoded body (nil when the body was not {code, message}). The result
// is an *Error whose kind follows from its code, or, for a code the table
// lacks, from the status; errors.Is works with the kinds either way.
// retryAfter is the value of the Retry-After header ("" if none).
func FromResponse(status int, body *api.Error, requestID, retryAfter string) error {
	e := &Error{Status: status, RequestID: requestID}
	if body != nil {
		e.Code, e.Message = body.Code, body.Message
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	if _, ok := codes[e.Code]; !ok {
		e.cause = StatusKind(status)
	}
	if retryAfter != "" {
		if s, err := strconv.Atoi(retryAfter); err == nil && s >= 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		} else if t, err := http.ParseTime(retryAfter); err == nil {
			e.RetryAfter = time.Until(t)
		}
	}
	return e
}

// StatusKind is the kind of an answer whose code is not in the table
// (another server, a proxy in between), from its status alone: 422 is
// ErrInvalid, 501 ErrNotSupported, 408 ErrTimeout, any other status the kind
// that has it; an unknown 5xx is ErrInternal, an unknown 4xx ErrInvalid, and
// anything else nil.
func StatusKind(status int) error {
	switch status {
	case http.StatusUnprocessableEntity:
		return ErrInvalid
	case http.StatusNotImplemented:
		return ErrNotSupported
	case http.StatusRequestTimeout:
		return ErrTimeout
	}
	for _, k := range kindOrder {
		if kindStatus[k] == status && k != ErrNotSupported {
			return k
		}
	}
	switch {
	case status >= 500 && status <= 599:
		return ErrInternal
	case status >= 400 && status <= 499:
		return ErrInvalid
	}
	return nil
}

// RetryAfter is how long a client should wait before sending a request
// that failed with err again: the *Error's RetryAfter, else one second for
// a rate-limited answer, else 0 (no Retry-After header).
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return e.RetryAfter
	}
	if errors.Is(err, ErrRateLimited) {
		return time.Second
	}
	return 0
}

// Retryable reports whether a request that failed with err may be sent
// again unchanged: rate limited (429), unavailable (503), or a gateway
// that did not get an answer (502, 504).
func Retryable(err error) bool {
	return errors.Is(err, ErrRateLimited) || errors.Is(err, ErrUnavailable) ||
		errors.Is(err, ErrUnreachable) || errors.Is(err, ErrTimeout)
}

// Write answers an HTTP request with err: the status and the JSON body
// {code, message} that HTTP gives it. Handlers outside a framework call
// it; it is HTTP's companion for net/http.
func Write(w http.ResponseWriter, err error) {
	status, body := HTTP(err)
	b, _ := json.Marshal(body)
	h := w.Header()
	if d := RetryAfter(err); d > 0 {
		h.Set("Retry-After", strconv.Itoa(int((d+time.Second-1)/time.Second)))
	}
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// Check returns nil for a 2xx answer, and for any other the error its
// {code, message} body says (at most 1 MiB of it is read), as
// FromResponse: the one way a server-side client of an execd API (a
// container's, a Pod's) turns an answer into an error.
func Check(resp *http.Response) error {
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var e api.Error
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e); err != nil {
		return FromResponse(resp.StatusCode, nil, resp.Header.Get("X-Request-ID"), resp.Header.Get("Retry-After"))
	}
	return FromResponse(resp.StatusCode, &e, resp.Header.Get("X-Request-ID"), resp.Header.Get("Retry-After"))
}
