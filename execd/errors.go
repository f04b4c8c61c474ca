package execd

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
)

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes {"code","message"} with status.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, ErrorBody{Code: code, Message: message})
}

// writeErr maps err to a status and wire code. This is the one place where
// execd errors become HTTP statuses. Internal errors never leak their text
// into a 5xx body unless they wrap a known sentinel.
func writeErr(w http.ResponseWriter, err error) {
	status, code := statusOf(err)
	msg := err.Error()
	if status >= 500 && code == CodeInternal {
		msg = "internal error"
	}
	writeError(w, status, code, msg)
}

func statusOf(err error) (int, string) {
	switch {
	case errors.Is(err, ErrNotSupported):
		return http.StatusNotImplemented, CodeNotSupported
	case errors.Is(err, ErrUnknownLanguage):
		return http.StatusBadRequest, CodeUnknownLanguage
	case errors.Is(err, ErrBusy):
		return http.StatusConflict, CodeBusy
	case errors.Is(err, ErrOverloaded):
		return http.StatusTooManyRequests, CodeOverloaded
	case errors.Is(err, errInvalidPath):
		return http.StatusBadRequest, CodeInvalidPath
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, CodeTimeout
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound, CodeFileNotFound
	case errors.Is(err, fs.ErrExist):
		return http.StatusConflict, CodeFileExists
	case errors.Is(err, fs.ErrPermission):
		return http.StatusForbidden, CodeInvalidPath
	default:
		return http.StatusInternalServerError, CodeInternal
	}
}

// CodeTimeout: an operation did not finish in time.
const CodeTimeout = "TIMEOUT"

// errInvalidPath marks a path that is malformed or escapes the sandbox root.
var errInvalidPath = errors.New("invalid path")
