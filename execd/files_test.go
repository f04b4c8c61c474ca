package execd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// filesEnv is a files API served over loopback on a real temp directory.
// dir is the sandbox root; outside is a sibling directory holding secret,
// which no request may reach.
type filesEnv struct {
	t       *testing.T
	srv     *httptest.Server
	dir     string
	outside string
}

func newFilesEnv(t *testing.T, opts FilesOptions) *filesEnv {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.MkdirAll(outside, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o644))
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	t.Cleanup(func() { root.Close() })
	mux := http.NewServeMux()
	RegisterFiles(mux, func() *os.Root { return root }, opts)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &filesEnv{t: t, srv: srv, dir: dir, outside: outside}
}

// write creates a file below the root (guest path rel) with parents.
func (e *filesEnv) write(rel, content string, mode fs.FileMode) {
	e.t.Helper()
	p := filepath.Join(e.dir, filepath.FromSlash(rel))
	require.NoError(e.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(e.t, os.WriteFile(p, []byte(content), mode))
	require.NoError(e.t, os.Chmod(p, mode))
}

func (e *filesEnv) read(rel string) string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, filepath.FromSlash(rel)))
	require.NoError(e.t, err)
	return string(b)
}

func (e *filesEnv) exists(rel string) bool {
	_, err := os.Lstat(filepath.Join(e.dir, filepath.FromSlash(rel)))
	return err == nil
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) errBody(t *testing.T) api.Error {
	t.Helper()
	var eb api.Error
	require.NoError(t, json.Unmarshal(r.body, &eb), "body %q", r.body)
	return eb
}

// do sends a request; body may be nil, a string, []byte or any JSON value.
func (e *filesEnv) do(method, target string, body any, header ...string) response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		js, err := json.Marshal(b)
		require.NoError(e.t, err)
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, e.srv.URL+target, rd)
	require.NoError(e.t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// expectErr asserts an error response with status and code.
func expectErr(t *testing.T, r response, status int, code api.ErrorCode) {
	t.Helper()
	require.Equal(t, status, r.status, "body %s", r.body)
	assert.Equal(t, code, r.errBody(t).Code)
}

func q(path string) string { return url.QueryEscape(path) }

func TestFilesInfo(t *testing.T) {
	e := newFilesEnv(t, FilesOptions{})
	e.write("workspace/a.txt", "hello", 0o640)
	require.NoError(t, os.Symlink("a.txt", filepath.Join(e.dir, "workspace/link")))
	uid, gid := os.Getuid(), os.Getgid()
	e.write("etc/passwd", fmt.Sprintf("# comment\nalice:x:%d:%d::/home/alice:/bin/sh\n", uid, gid), 0o644)
	e.write("etc/group", fmt.Sprintf("staff:x:%d:\n", gid), 0o644)

	r := e.do("GET", "/files/info?path="+q("/workspace/a.txt")+"&path=workspace&path="+q("/workspace/link"), nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var got map[string]FileInfo
	require.NoError(t, json.Unmarshal(r.body, &got))
	require.Len(t, got, 3)
	a := got["/workspace/a.txt"]
	assert.Equal(t, "/workspace/a.txt", a.Path)
	assert.Equal(t, api.FileInfoTypeFile, a.Type)
	assert.EqualValues(t, 5, a.Size)
	assert.Equal(t, 640, a.Mode)
	assert.Equal(t, "alice", a.Owner)
	assert.Equal(t, "staff", a.Group)
	assert.Regexp(t, `"modified_at":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"`, string(r.body), "dates are RFC 3339 in UTC, to the second")
	assert.NotEmpty(t, a.CreatedAt)
	assert.Equal(t, api.FileInfoTypeDirectory, got["workspace"].Type)
	assert.Equal(t, "/workspace", got["workspace"].Path, "relative paths are relative to /")
	assert.Equal(t, api.FileInfoTypeSymlink, got["/workspace/link"].Type)

	// Without a passwd entry the owner is numeric.
	require.NoError(t, os.Remove(filepath.Join(e.dir, "etc/passwd")))
	r = e.do("GET", "/files/info?path=/workspace/a.txt", nil)
	require.NoError(t, json.Unmarshal(r.body, &got))
	assert.Equal(t, fmt.Sprint(uid), got["/workspace/a.txt"].Owner)

	tests := []struct {
		name   string
		query  string
		status int
		code   api.ErrorCode
	}{
		{"missing file", "?path=/nope", 404, CodeFileNotFound},
		{"one of several missing", "?path=/workspace/a.txt&path=/nope", 404, CodeFileNotFound},
		{"file as directory", "?path=/workspace/a.txt/x", 404, CodeFileNotFound},
		{"no path", "", 400, CodeMissingQuery},
		{"empty path", "?path=", 400, CodeMissingQuery},
		{"dotdot", "?path=" + q("/../outside/secret"), 400, CodeInvalidPath},
		{"nul", "?path=%2Fa%00b", 400, CodeInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectErr(t, e.do("GET", "/files/info"+tt.query, nil), tt.status, tt.code)
		})
	}
}

func TestFilesDelete(t *testing.T) {
	e := newFilesEnv(t, FilesOptions{})
	e.write("a", "1", 0o644)
	e.write("b", "2", 0o644)
	e.write("d/c", "3", 0o644)
	require.NoError(t, os.Symlink("d", filepath.Join(e.dir, "dirlink")))

	r := e.do("DELETE", "/files?path=/a&path=b&path=/missing&path=/dirlink", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.False(t, e.exists("a"))
	assert.False(t, e.exists("b"))
	assert.False(t, e.exists("dirlink"), "a symlink to a directory is removed as a file")
	assert.True(t, e.exists("d/c"), "the link's target stays")

	expectErr(t, e.do("DELETE", "/files?path=/d", nil), 400, CodeInvalidRequestBody)
	assert.True(t, e.exists("d/c"))
	expectErr(t, e.do("DELETE", "/files", nil), 400, CodeMissingQuery)
	expectErr(t, e.do("DELETE", "/files?path="+q("../outside/secret"), nil), 400, CodeInvalidPath)
}

func TestFilesPermissions(t *testing.T) {
	e := newFilesEnv(t, FilesOptions{})
	e.write("a.sh", "#!/bin/sh", 0o644)
	e.write("b", "", 0o644)
	uid := os.Getuid()
	e.write("etc/passwd", fmt.Sprintf("me:x:%d:%d::/:/bin/sh\nbob:x:4242:4242::/:/bin/sh\n", uid, os.Getgid()), 0o644)
	e.write("etc/group", "bobs:x:4343:\n", 0o644)

	r := e.do("POST", "/files/permissions", map[string]any{
		"/a.sh": map[string]any{"mode": 755, "owner": "me"},
		"b":     map[string]any{"mode": "4750"},
	})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	fi, err := os.Stat(filepath.Join(e.dir, "a.sh"))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o755), fi.Mode().Perm())
	fi, err = os.Stat(filepath.Join(e.dir, "b"))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o750)|fs.ModeSetuid, fi.Mode()&(fs.ModePerm|fs.ModeSetuid))

	var info map[string]FileInfo
	require.NoError(t, json.Unmarshal(e.do("GET", "/files/info?path=/b", nil).body, &info))
	assert.Equal(t, 4750, info["/b"].Mode)

	// Mode 0 / absent leaves the mode alone.
	require.Equal(t, 200, e.do("POST", "/files/permissions", `{"/a.sh":{"mode":null}}`).status)
	fi, _ = os.Stat(filepath.Join(e.dir, "a.sh"))
	assert.Equal(t, fs.FileMode(0o755), fi.Mode().Perm())

	if uid == 0 {
		r = e.do("POST", "/files/permissions", `{"/a.sh":{"owner":"bob","group":"bobs","mode":700}}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.NoError(t, json.Unmarshal(e.do("GET", "/files/info?path=/a.sh", nil).body, &info))
		assert.Equal(t, "bob", info["/a.sh"].Owner)
		assert.Equal(t, "bobs", info["/a.sh"].Group)
		assert.Equal(t, 700, info["/a.sh"].Mode)
	} else {
		expectErr(t, e.do("POST", "/files/permissions", `{"/a.sh":{"owner":"bob"}}`), 403, CodeInvalidPath)
	}

	tests := []struct {
		name   string
		body   string
		status int
		code   api.ErrorCode
	}{
		{"bad json", `{"/a.sh":`, 400, CodeInvalidRequestBody},
		{"not an object", `[1]`, 400, CodeInvalidRequestBody},
		{"trailing data", `{} {}`, 400, CodeInvalidRequestBody},
		{"non-octal mode", `{"/a.sh":{"mode":789}}`, 400, CodeInvalidRequestBody},
		{"mode too large", `{"/a.sh":{"mode":17777}}`, 400, CodeInvalidRequestBody},
		{"negative mode", `{"/a.sh":{"mode":-1}}`, 400, CodeInvalidRequestBody},
		{"unknown user", `{"/a.sh":{"owner":"nobody-here"}}`, 400, CodeInvalidRequestBody},
		{"missing file", `{"/nope":{"mode":644}}`, 404, CodeFileNotFound},
		{"escape", `{"/../outside/secret":{"mode":777}}`, 400, CodeInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectErr(t, e.do("POST", "/files/permissions", tt.body), tt.status, tt.code)
		})
	}
	fi, err = os.Stat(filepath.Join(e.outside, "secret"))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o644), fi.Mode().Perm())
}

func TestFilesMove(t *testing.T) {
	e := newFilesEnv(t, FilesOptions{})
	e.write("a", "A", 0o644)
	e.write("dir/x", "X", 0o644)
	e.write("taken", "T", 0o644)

	r := e.do("POST", "/files/mv", []map[string]string{
		{"src": "/a", "dest": "/new/deep/a2"},
		{"src": "dir", "dest": "/dir2"},
	})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, "A", e.read("new/deep/a2"))
	assert.Equal(t, "X", e.read("dir2/x"))
	assert.False(t, e.exists("a"))

	tests := []struct {
		name   string
		body   string
		status int
		code   api.ErrorCode
	}{
		{"dest exists", `[{"src":"/taken","dest":"/dir2/x"}]`, 409, CodeFileExists},
		{"src missing", `[{"src":"/nope","dest":"/x"}]`, 404, CodeFileNotFound},
		{"dest escapes", `[{"src":"/taken","dest":"/../outside/t"}]`, 400, CodeInvalidPath},
		{"src escapes", `[{"src":"../outside/secret","dest":"/stolen"}]`, 400, CodeInvalidPath},
		{"move root", `[{"src":"/","dest":"/r"}]`, 400, CodeInvalidRequestBody},
		{"into itself", `[{"src":"/dir2","dest":"/dir2/sub/dir2"}]`, 400, CodeInvalidRequestBody},
		{"empty src", `[{"src":"","dest":"/x"}]`, 400, CodeInvalidPath},
		{"bad json", `{"src":"/a"}`, 400, CodeInvalidRequestBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectErr(t, e.do("POST", "/files/mv", tt.body), tt.status, tt.code)
		})
	}
	assert.Equal(t, "T", e.read("taken"))
	assert.False(t, e.exists("stolen"))
}

func TestFilesSearch(t *testing.T) {
	e := newFilesEnv(t, FilesOptions{})
	for _, f := range []string{"src/main.go", "src/pkg/a.go", "src/pkg/a_test.go", "src/README.md", "top.go", "docs/x.txt"} {
		e.write(f, "x", 0o644)
	}
	require.NoError(t, os.Symlink(e.outside, filepath.Join(e.dir, "src/outlink")))

	search := func(path, pattern string) []string {
		t.Helper()
		target := "/files/search?path=" + q(path)
		if pattern != "" {
			target += "&pattern=" + q(pattern)
		}
		r := e.do("GET", target, nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var infos []FileInfo
		require.NoError(t, json.Unmarshal(r.body, &infos))
		out := []string{}
		for _, fi := range infos {
			out = append(out, fi.Path)
		}
		return out
	}
	tests := []struct {
		name, path, pattern string
		want                []string
	}{
		{"base name glob is recursive", "/src", "*.go", []string{"/src/main.go", "/src/pkg/a.go", "/src/pkg/a_test.go"}},
		{"default is everything", "/src", "", []string{"/src/README.md", "/src/main.go", "/src/outlink", "/src/pkg/a.go", "/src/pkg/a_test.go"}},
		{"double star", "/src", "**", []string{"/src/README.md", "/src/main.go", "/src/outlink", "/src/pkg/a.go", "/src/pkg/a_test.go"}},
		{"double star with dir", "/", "src/**/*_test.go", []string{"/src/pkg/a_test.go"}},
		{"leading double star", "/", "**/pkg/*.go", []string{"/src/pkg/a.go", "/src/pkg/a_test.go"}},
		{"anchored", "/", "*.go", []string{"/src/main.go", "/src/pkg/a.go", "/src/pkg/a_test.go", "/top.go"}},
		{"relative path dir", "src", "*.md", []string{"/src/README.md"}},
		{"no match", "/src", "*.rs", []string{}},
		{"symlink matched not followed", "/src", "secret", []string{}},
		{"file as root", "/top.go", "*.go", []string{"/top.go"}},
		{"char class", "/src", "[ab].go", []string{"/src/pkg/a.go"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, search(tt.path, tt.pattern))
		})
	}
	expectErr(t, e.do("GET", "/files/search?path=/src&pattern="+q("[a"), nil), 400, CodeInvalidRequestBody)
	expectErr(t, e.do("GET", "/files/search?path=/nope", nil), 404, CodeFileNotFound)
	expectErr(t, e.do("GET", "/files/search?pattern=*", nil), 400, CodeMissingQuery)
	expectErr(t, e.do("GET", "/files/search?path="+q("/../outside"), nil), 400, CodeInvalidPath)
}

func TestFilesReplace(t *testing.T) {
	e := newFilesEnv(t, FilesOptions{})
	e.write("cfg.yaml", "host: localhost:8080\nalt: localhost:8080\n", 0o600)
	e.write("app.py", "DEBUG = True\n", 0o755)
	e.write("etc/real", "a-a-a", 0o644)
	require.NoError(t, os.Symlink("real", filepath.Join(e.dir, "etc/alias")))
	before, err := os.Stat(filepath.Join(e.dir, "cfg.yaml"))
	require.NoError(t, err)

	r := e.do("POST", "/files/replace?verbose=true", map[string]any{
		"/cfg.yaml":  map[string]string{"old": "localhost:8080", "new": "0.0.0.0:9090"},
		"app.py":     map[string]string{"old": "nothing", "new": "x"},
		"/etc/alias": map[string]string{"old": "-", "new": "+"},
	})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var res map[string]replaceResult
	require.NoError(t, json.Unmarshal(r.body, &res))
	assert.Equal(t, map[string]replaceResult{"/cfg.yaml": {ReplacedCount: 2}, "app.py": {ReplacedCount: 0}, "/etc/alias": {ReplacedCount: 2}}, res)
	assert.Equal(t, "host: 0.0.0.0:9090\nalt: 0.0.0.0:9090\n", e.read("cfg.yaml"))
	assert.Equal(t, "a+a+a", e.read("etc/real"))
	fi, err := os.Lstat(filepath.Join(e.dir, "etc/alias"))
	require.NoError(t, err)
	assert.Equal(t, fs.ModeSymlink, fi.Mode().Type(), "the symlink stays a symlink")
	after, err := os.Stat(filepath.Join(e.dir, "cfg.yaml"))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o600), after.Mode().Perm())
	assert.True(t, os.SameFile(before, after), "same inode")
	ents, err := os.ReadDir(e.dir)
	require.NoError(t, err)
	for _, de := range ents {
		assert.False(t, strings.HasPrefix(de.Name(), ".hybox-"), "temporary file left: %s", de.Name())
	}

	r = e.do("POST", "/files/replace", `{"/app.py":{"old":"True","new":"False"}}`)
	require.Equal(t, http.StatusOK, r.status)
	assert.JSONEq(t, `{}`, string(r.body))
	assert.Equal(t, "DEBUG = False\n", e.read("app.py"))

	tests := []struct {
		name   string
		body   string
		status int
		code   api.ErrorCode
	}{
		{"empty old", `{"/app.py":{"old":"","new":"x"}}`, 400, CodeInvalidRequestBody},
		{"missing", `{"/nope":{"old":"a","new":"b"}}`, 404, CodeFileNotFound},
		{"directory", `{"/etc":{"old":"a","new":"b"}}`, 400, CodeInvalidRequestBody},
		{"escape", `{"/../outside/secret":{"old":"host","new":"pwned"}}`, 400, CodeInvalidPath},
		{"bad json", `nope`, 400, CodeInvalidRequestBody},
		{"no new", `{"/app.py":{"old":"True"}}`, 400, CodeInvalidRequestBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectErr(t, e.do("POST", "/files/replace", tt.body), tt.status, tt.code)
		})
	}
	t.Run("verbose not a boolean", func(t *testing.T) {
		r := e.do("POST", "/files/replace?verbose=2", `{"/app.py":{"old":"a","new":"b"}}`)
		expectErr(t, r, 400, CodeInvalidRequestBody)
		assert.Contains(t, r.errBody(t).Message, "verbose")
	})
}

func TestFilesReplaceStream(t *testing.T) {
	tests := []struct {
		name, in, old, new string
		chunk              int
	}{
		{"across chunks", "abcabcabc", "cab", "X", 2},
		{"overlapping candidates", "aaaa", "aa", "b", 1},
		{"at the end", "xxab", "ab", "", 3},
		{"none", "hello", "z", "y", 2},
		{"longer than chunk", "0123456789", "345678", "-", 2},
		{"empty input", "", "a", "b", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			n, err := replaceStream(&out, strings.NewReader(tt.in), []byte(tt.old), []byte(tt.new), tt.chunk)
			require.NoError(t, err)
			assert.Equal(t, strings.ReplaceAll(tt.in, tt.old, tt.new), out.String())
			assert.Equal(t, strings.Count(tt.in, tt.old), n)
		})
	}
}
