package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// errorOf decodes an error body.
func errorOf(t *testing.T, b []byte) (code, message string) {
	t.Helper()
	var e struct{ Code, Message string }
	require.NoError(t, json.Unmarshal(b, &e), "error body %q", b)
	return e.Code, e.Message
}

// Malformed requests found by fuzzing the API from its document
// (scripts/fuzz-api.sh): each is a 4xx with {code, message}, and the
// message names what is wrong.
func TestBadInputIsRejected(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	sb := h.create(nil)
	sess := func() string {
		st, b := h.execd(sb.ID, "POST", "/session", map[string]any{})
		require.Equal(t, http.StatusOK, st, string(b))
		var s struct {
			ID string `json:"session_id"`
		}
		require.NoError(t, json.Unmarshal(b, &s))
		return s.ID
	}()

	for _, tc := range []struct {
		name          string
		execd         bool // through the sandbox's execd endpoint
		method, path  string
		body          any
		status        int
		code, mention string
	}{
		{name: "create with a null body", method: "POST", path: "/v1/sandboxes", body: "null",
			status: 400, code: "INVALID_REQUEST", mention: "null"},
		{name: "metadata patch that is null", method: "PATCH", path: "/v1/sandboxes/" + sb.ID + "/metadata", body: "null",
			status: 400, code: "INVALID_REQUEST", mention: "null"},
		{name: "metadata patch deleting an empty key", method: "PATCH", path: "/v1/sandboxes/" + sb.ID + "/metadata",
			body: `{"": null}`, status: 400, code: "INVALID_REQUEST", mention: "metadata keys"},
		{name: "metadata patch deleting a reserved key", method: "PATCH", path: "/v1/sandboxes/" + sb.ID + "/metadata",
			body: `{"opensandbox.io/x": null}`, status: 400, code: "INVALID_REQUEST", mention: "reserved prefix"},
		{name: "DELETE /images names no image", method: "DELETE", path: "/v1/images",
			status: 405, code: "METHOD_NOT_ALLOWED", mention: "DELETE"},
		{name: "proxy to a port a wasm sandbox does not have", method: "GET", path: "/v1/sandboxes/" + sb.ID + "/proxy/8000/",
			status: 404, code: "SANDBOX_NOT_FOUND", mention: "port"},
		{name: "egress policy that is null", method: "PUT", path: "/v1/sandboxes/" + sb.ID + "/proxy/18080/policy", body: "null",
			status: 400, code: "INVALID_REQUEST", mention: "null"},
		{name: "egress targets holding a null", method: "DELETE", path: "/v1/sandboxes/" + sb.ID + "/proxy/18080/policy", body: "[null]",
			status: 400, code: "INVALID_REQUEST", mention: "targets[0]"},
		{name: "another method on an egress path", method: "TRACE", path: "/v1/sandboxes/" + sb.ID + "/proxy/18080/policy",
			status: 405, code: "METHOD_NOT_ALLOWED", mention: "GET, HEAD, POST"},
		{name: "negative code timeout", execd: true, method: "POST", path: "/code",
			body: map[string]any{"code": "1", "timeoutMs": -1}, status: 400, code: "INVALID_REQUEST_BODY", mention: "timeoutMs"},
		{name: "negative session timeout", execd: true, method: "POST", path: "/session/" + sess + "/run",
			body: map[string]any{"command": "true", "timeout": -1}, status: 400, code: "INVALID_REQUEST_BODY", mention: "timeout"},
		{name: "session in a missing directory", execd: true, method: "POST", path: "/session",
			body: map[string]any{"cwd": "/no/such/dir"}, status: 404, code: "FILE_NOT_FOUND", mention: "cwd"},
		{name: "code context in a missing directory", execd: true, method: "POST", path: "/code/context",
			body: map[string]any{"language": "python", "cwd": "/no/such/dir"}, status: 404, code: "FILE_NOT_FOUND", mention: "cwd"},
		{name: "empty state", method: "GET", path: "/v1/sandboxes?state=",
			status: 400, code: "INVALID_REQUEST", mention: "state"},
		{name: "empty page", method: "GET", path: "/v1/sandboxes?page=",
			status: 400, code: "INVALID_REQUEST", mention: "page"},
		{name: "empty env name", method: "POST", path: "/v1/sandboxes", body: `{"image":{"uri":"wasm://default"},"env":{"":"x"}}`,
			status: 400, code: "INVALID_REQUEST", mention: "env name"},
		{name: "empty expires", method: "GET", path: "/v1/sandboxes/" + sb.ID + "/endpoints/44772?expires=",
			status: 400, code: "INVALID_REQUEST", mention: "expires"},
		{name: "command with a null body", execd: true, method: "POST", path: "/command", body: "null",
			status: 400, code: "INVALID_REQUEST_BODY", mention: "null"},
		{name: "replace with a non-boolean verbose", execd: true, method: "POST", path: "/files/replace?verbose=2",
			body: map[string]any{"/tmp/x": map[string]string{"old": "a", "new": "b"}}, status: 400, code: "INVALID_REQUEST_BODY", mention: "verbose"},
		{name: "another method on /pty", execd: true, method: "GET", path: "/pty",
			status: 405, code: "METHOD_NOT_ALLOWED", mention: "POST"},
		{name: "another method on an execd path", execd: true, method: "PUT", path: "/files/info?path=/tmp",
			status: 405, code: "METHOD_NOT_ALLOWED", mention: "GET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st int
			var b []byte
			if tc.execd {
				st, b = h.execd(sb.ID, tc.method, tc.path, tc.body)
			} else {
				st, b, _ = h.do(tc.method, tc.path, tc.body)
			}
			require.Equal(t, tc.status, st, string(b))
			code, msg := errorOf(t, b)
			assert.Equal(t, tc.code, code)
			assert.Contains(t, msg, tc.mention)
		})
	}

	t.Run("a page far past the end is empty", func(t *testing.T) {
		st, b, _ := h.do("GET", "/v1/sandboxes?page=9223372036854775806&pageSize=20", nil)
		require.Equal(t, http.StatusOK, st, string(b))
		var list api.ListSandboxesResponse
		require.NoError(t, json.Unmarshal(b, &list))
		assert.Empty(t, list.Items)
		assert.False(t, list.Pagination.HasNextPage)
	})

	t.Run("405 lists the allowed methods", func(t *testing.T) {
		_, _, hdr := h.do("DELETE", "/v1/images", nil)
		assert.Equal(t, "GET", hdr.Get("Allow"))
		_, _, hdr = h.do("TRACE", "/v1/sandboxes/"+sb.ID+"/proxy/18080/credential-vault/credentials", nil)
		assert.Equal(t, "GET, HEAD", hdr.Get("Allow"))
	})

	t.Run("null and empty members are taken as absent", func(t *testing.T) {
		st, b, _ := h.do("POST", "/v1/sandboxes", `{"image":{"uri":"wasm://default"},"platform":{},"extensions":{"hybox.io/runtime":null}}`)
		require.Equal(t, http.StatusAccepted, st, string(b))
		assert.NotContains(t, string(b), `"os":""`, "an unset platform field is left out")
		// A null extension is taken as not given: the router chooses, and the
		// answer names the runtime it chose (never "" or null).
		assert.Contains(t, string(b), `"hybox.io/runtime":"wasm"`, "the chosen runtime: %s", b)
		assert.False(t, strings.Contains(string(b), `"hybox.io/runtime":""`), "a null extension is not stored as empty: %s", b)
	})
}
