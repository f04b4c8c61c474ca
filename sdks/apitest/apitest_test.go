package apitest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/sdks"
)

const testDoc = `
openapi: 3.1.0
info: {title: t, version: "1"}
paths:
  /things/{id}:
    get:
      tags: [things]
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Thing"}
        "404": {$ref: "#/components/responses/NotFound"}
    delete:
      tags: [things]
      responses:
        "204": {description: gone}
  /things/special:
    get:
      tags: [things]
      responses:
        "200":
          description: ok
          content:
            text/plain: {schema: {type: string}}
  /files/{name}:
    delete:
      tags: [things]
      responses:
        "204": {description: gone}
  /stream:
    get:
      tags: [things]
      responses:
        "200":
          description: events
          content:
            text/event-stream:
              schema: {type: string}
              x-item-schema: {$ref: "#/components/schemas/Thing"}
  /ping:
    get:
      tags: [execd]
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {type: object, required: [ok], properties: {ok: {const: true}}}
  /sandboxes/{id}/proxy/{port}:
    get:
      tags: [proxy]
      responses:
        default: {description: the sandbox's answer}
        "502": {$ref: "#/components/responses/NotFound"}
components:
  responses:
    NotFound:
      description: not found
      content:
        application/json:
          schema: {$ref: "#/components/schemas/Error"}
  schemas:
    Error:
      type: object
      required: [code, message]
      properties:
        code: {type: string}
        message: {type: string}
    Thing:
      type: object
      required: [name]
      properties:
        name: {type: string}
        size: {type: integer, minimum: 0}
`

// fixed answers every request with one status, content type and body.
func fixed(status int, ctype, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ctype != "" {
			w.Header().Set("Content-Type", ctype)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func TestValidate(t *testing.T) {
	spec, err := Load([]byte(testDoc))
	require.NoError(t, err)
	for _, tc := range []struct {
		name, method, path string
		handler            http.Handler
		want               []string // substrings of the mismatches, in order; none = conforms
	}{
		{name: "conforming", method: "GET", path: "/things/a",
			handler: fixed(200, "application/json; charset=utf-8", `{"name":"a","size":1}`)},
		{name: "under /v1", method: "GET", path: "/v1/things/a",
			handler: fixed(200, "application/json", `{"name":"a"}`)},
		{name: "wrong type at a pointer", method: "GET", path: "/things/a",
			handler: fixed(200, "application/json", `{"name":"a","size":-1}`),
			want:    []string{"GET /things/{id} → 200 at /size: minimum"}},
		{name: "missing property", method: "GET", path: "/things/a",
			handler: fixed(200, "application/json", `{}`),
			want:    []string{"at /: missing property 'name'"}},
		{name: "not JSON", method: "GET", path: "/things/a",
			handler: fixed(200, "application/json", `nope`),
			want:    []string{"body is not JSON"}},
		{name: "undocumented status", method: "GET", path: "/things/a",
			handler: fixed(500, "application/json", `{"code":"x","message":"y"}`),
			want:    []string{"status 500 is not documented"}},
		{name: "undocumented content type", method: "GET", path: "/things/a",
			handler: fixed(200, "text/html", `<p>`),
			want:    []string{`content type "text/html" is not among application/json`}},
		{name: "sniffed content type", method: "GET", path: "/things/a",
			handler: fixed(200, "", `<html>`),
			want:    []string{`content type "text/html"`}},
		{name: "error through a response reference", method: "GET", path: "/things/a",
			handler: fixed(404, "application/json", `{"code":"NOT_FOUND"}`),
			want:    []string{"404 at /: missing property 'message'"}},
		{name: "body where none is described", method: "DELETE", path: "/things/a",
			handler: fixed(204, "text/plain", `x`)},
		{name: "literal segment wins", method: "GET", path: "/things/special",
			handler: fixed(200, "text/plain", `anything`)},
		{name: "last parameter takes the rest", method: "DELETE", path: "/files/a/b:c",
			handler: fixed(204, "", ``)},
		{name: "unknown route with an Error", method: "GET", path: "/nowhere",
			handler: fixed(404, "application/json", `{"code":"NOT_FOUND","message":"no route"}`)},
		{name: "unknown route with something else", method: "GET", path: "/nowhere",
			handler: fixed(404, "text/plain", `404 page not found`),
			want:    []string{"an error answer must be application/json"}},
		{name: "unknown route answered 200", method: "GET", path: "/nowhere",
			handler: fixed(200, "application/json", `{}`),
			want:    []string{"no operation in the document for GET /nowhere"}},
		{name: "other method", method: "POST", path: "/things/a",
			handler: fixed(405, "application/json", `{"code":"METHOD_NOT_ALLOWED","message":"m"}`)},
		{name: "stream items", method: "GET", path: "/stream",
			handler: fixed(200, "text/event-stream", "{\"name\":\"a\"}\n\n{\"size\":2}\n\n"),
			want:    []string{"item 1 /: missing property 'name'"}},
		{name: "stream ending inside an item", method: "GET", path: "/stream",
			handler: fixed(200, "text/event-stream", "{\"name\":\"a\"}\n"),
			want:    []string{"the stream ends inside an event"}},
		{name: "trailing-slash redirect", method: "DELETE", path: "/things",
			handler: http.RedirectHandler("/things/", http.StatusTemporaryRedirect)},
		{name: "another redirect", method: "DELETE", path: "/things",
			handler: http.RedirectHandler("/elsewhere", http.StatusTemporaryRedirect),
			want:    []string{"no operation in the document"}},
		{name: "execd through the proxy", method: "GET", path: "/v1/sandboxes/x/proxy/44772/ping",
			handler: fixed(200, "application/json", `{"ok":false}`),
			want:    []string{"execd GET /ping → 200 at /ok: value must be true"}},
		{name: "proxy refusal in front of execd", method: "GET", path: "/sandboxes/x/proxy/44772/ping",
			handler: fixed(502, "application/json", `{"code":"SANDBOX_UNREACHABLE","message":"m"}`)},
		{name: "an application port", method: "GET", path: "/sandboxes/x/proxy/8000/anything",
			handler: fixed(200, "text/html", `<p>`)},
		{name: "the proxy root of an application port", method: "GET", path: "/sandboxes/x/proxy/8000",
			handler: fixed(418, "text/html", `<p>`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := Record(tc.handler)
			ts := httptest.NewServer(rec)
			req, err := http.NewRequest(tc.method, ts.URL+tc.path, nil)
			require.NoError(t, err)
			resp, err := noRedirects.Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ts.Close()
			ex := rec.Exchanges()
			require.Len(t, ex, 1)
			var got []string
			for _, m := range spec.Validate(ex[0]) {
				got = append(got, m.String())
			}
			require.Len(t, got, len(tc.want), "%q", got)
			for i, w := range tc.want {
				assert.Contains(t, got[i], w)
			}
		})
	}
}

func TestBodyWhereNoneIsDescribed(t *testing.T) {
	spec, err := Load([]byte(testDoc))
	require.NoError(t, err)
	ms := spec.Validate(&Exchange{Method: "DELETE", Path: "/things/a", Status: 204, ContentType: "text/plain", Body: []byte("x")})
	require.Len(t, ms, 1)
	assert.Contains(t, ms[0].Message, "describes no body")
}

func TestRecorderCapsBodies(t *testing.T) {
	big := strings.Repeat("x", MaxBody+10)
	rec := Record(fixed(200, "text/plain", big))
	ts := httptest.NewServer(rec)
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/things/special")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Len(t, b, len(big), "the client gets the whole body")
	ex := rec.Exchanges()
	require.Len(t, ex, 1)
	assert.True(t, ex[0].Truncated)
	assert.Len(t, ex[0].Body, MaxBody)
}

// The protocol document loads, and each of its response schemas compiles.
func TestProtocolDocumentCompiles(t *testing.T) {
	spec, err := Load(sdks.OpenAPI)
	require.NoError(t, err)
	require.NotEmpty(t, spec.Operations())
	n := 0
	for _, o := range spec.ops {
		rs, _ := o.op["responses"].(map[string]any)
		for code, r := range rs {
			resp, ptr, err := spec.deref(r, o.ptr+"/responses/"+code)
			require.NoError(t, err)
			content, _ := resp["content"].(map[string]any)
			for mt, m := range content {
				media, _ := m.(map[string]any)
				for _, k := range []string{"schema", ItemSchemaKey} {
					if _, ok := media[k]; ok {
						_, err := spec.schema(ptr + "/content/" + escape(mt) + "/" + k)
						assert.NoError(t, err, "%s %s %s", o, code, mt)
						n++
					}
				}
			}
		}
	}
	assert.Greater(t, n, 50)
}
