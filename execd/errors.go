package execd

import (
	"encoding/json"
	"net/http"

	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with code's status (errdefs) and {code, message}.
func writeError(w http.ResponseWriter, code api.ErrorCode, message string) {
	writeErr(w, errdefs.New(code, "%s", message))
}

// writeErr answers with err turned into a status and {code, message} by
// errdefs.HTTP, the one function that does this for every surface.
func writeErr(w http.ResponseWriter, err error) { errdefs.Write(w, err) }

// errInvalidPath marks a path that is malformed or escapes the sandbox root.
var errInvalidPath = errdefs.New(api.ErrorCodeINVALIDPATH, "invalid path")
