package execd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// uploadPart is one part of a test upload body.
type uploadPart struct {
	name    string // form name: metadata, file, or anything
	content string
}

func metaPart(path string, mode int) uploadPart {
	b, _ := json.Marshal(map[string]any{"path": path, "mode": mode, "owner": nil, "group": nil})
	return uploadPart{"metadata", string(b)}
}

// multipartBody encodes parts the way the Python SDK does.
func multipartBody(t testing.TB, parts ...uploadPart) (body []byte, contentType string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, p.name, p.name))
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		require.NoError(t, err)
		_, err = io.WriteString(w, p.content)
		require.NoError(t, err)
	}
	require.NoError(t, mw.Close())
	return buf.Bytes(), mw.FormDataContentType()
}

func (e *filesEnv) upload(parts ...uploadPart) response {
	e.t.Helper()
	body, ct := multipartBody(e.t, parts...)
	return e.do("POST", "/files/upload", body, "Content-Type", ct)
}

// noTemps asserts that no temporary upload file is left anywhere in dir.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		assert.False(t, strings.HasPrefix(d.Name(), ".hybox-"), "left behind: %s", p)
		return nil
	}))
}

func TestFilesUpload(t *testing.T) {
	e := newFilesEnv(t, FilesOptions{})
	e.write("workspace/old.txt", "old content", 0o600)

	r := e.upload(
		metaPart("/workspace/deep/new/a.txt", 755), uploadPart{"file", "alpha"},
		uploadPart{"ignored", "zzz"},
		metaPart("workspace/old.txt", 0), uploadPart{"file", "replaced"},
	)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, "alpha", e.read("workspace/deep/new/a.txt"))
	fi, err := os.Stat(filepath.Join(e.dir, "workspace/deep/new/a.txt"))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o755), fi.Mode().Perm())
	assert.Equal(t, "replaced", e.read("workspace/old.txt"))
	fi, err = os.Stat(filepath.Join(e.dir, "workspace/old.txt"))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o644), fi.Mode().Perm(), "no mode means 644")
	noTemps(t, e.dir)

	if os.Getuid() == 0 {
		e.write("etc/passwd", "carol:x:3001:3001::/:/bin/sh\n", 0o644)
		r = e.upload(uploadPart{"metadata", `{"path":"/c.txt","owner":"carol","group":"3002","mode":"640"}`}, uploadPart{"file", "c"})
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var info map[string]FileInfo
		require.NoError(t, json.Unmarshal(e.do("GET", "/files/info?path=/c.txt", nil).body, &info))
		assert.Equal(t, "carol", info["/c.txt"].Owner)
		assert.Equal(t, "3002", info["/c.txt"].Group)
		assert.Equal(t, 640, info["/c.txt"].Mode)
	}

	tests := []struct {
		name   string
		parts  []uploadPart
		status int
		code   api.ErrorCode
	}{
		{"file before metadata", []uploadPart{{"file", "x"}}, 400, CodeInvalidFileMetadata},
		{"metadata without file", []uploadPart{metaPart("/m", 644)}, 400, CodeInvalidFileMetadata},
		{"two metadata", []uploadPart{metaPart("/m", 644), metaPart("/n", 644), {"file", "x"}}, 400, CodeInvalidFileMetadata},
		{"bad metadata json", []uploadPart{{"metadata", "{"}, {"file", "x"}}, 400, CodeInvalidFileMetadata},
		{"metadata without path", []uploadPart{{"metadata", `{"mode":644}`}, {"file", "x"}}, 400, CodeInvalidFileMetadata},
		{"bad mode", []uploadPart{metaPart("/m", 999), {"file", "x"}}, 400, CodeInvalidFileMetadata},
		{"no parts", nil, 400, CodeInvalidFileMetadata},
		{"onto a directory", []uploadPart{metaPart("/workspace", 644), {"file", "x"}}, 400, CodeInvalidRequestBody},
		{"onto root", []uploadPart{metaPart("/", 644), {"file", "x"}}, 400, CodeInvalidRequestBody},
		{"parent is a file", []uploadPart{metaPart("/workspace/old.txt/x", 644), {"file", "x"}}, 409, CodeFileExists},
		{"escape", []uploadPart{metaPart("/../outside/pwned", 644), {"file", "x"}}, 400, CodeInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectErr(t, e.upload(tt.parts...), tt.status, tt.code)
		})
	}
	expectErr(t, e.do("POST", "/files/upload", "plain", "Content-Type", "text/plain"), 400, CodeInvalidRequestBody)
	assert.NoFileExists(t, filepath.Join(e.outside, "pwned"))
	noTemps(t, e.dir)
}

func TestFilesUploadTooLarge(t *testing.T) {
	e := newFilesEnv(t, FilesOptions{MaxUploadBytes: 64 << 10})
	e.write("keep.bin", "original", 0o644)
	big := strings.Repeat("x", 200<<10)

	tests := []struct {
		name  string
		path  string
		check func(t *testing.T)
	}{
		{"new file", "/dir/big.bin", func(t *testing.T) { assert.False(t, e.exists("dir/big.bin")) }},
		{"existing file keeps its content", "/keep.bin", func(t *testing.T) { assert.Equal(t, "original", e.read("keep.bin")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectErr(t, e.upload(metaPart(tt.path, 644), uploadPart{"file", big}), http.StatusRequestEntityTooLarge, CodePayloadTooLarge)
			tt.check(t)
			noTemps(t, e.dir)
		})
	}

	// A streamed (chunked) body without Content-Length is capped too.
	body, ct := multipartBody(t, metaPart("/chunked.bin", 644), uploadPart{"file", big})
	pr, pw := io.Pipe()
	go func() {
		for b := body; len(b) > 0; b = b[min(len(b), 4096):] {
			if _, err := pw.Write(b[:min(len(b), 4096)]); err != nil {
				return
			}
		}
		pw.Close()
	}()
	r := e.do("POST", "/files/upload", pr, "Content-Type", ct)
	pr.Close()
	expectErr(t, r, http.StatusRequestEntityTooLarge, CodePayloadTooLarge)
	assert.False(t, e.exists("chunked.bin"))
	noTemps(t, e.dir)

	// Under the cap, streamed uploads work.
	small := strings.Repeat("y", 10<<10)
	body, ct = multipartBody(t, metaPart("/ok.bin", 644), uploadPart{"file", small})
	r = e.do("POST", "/files/upload", io.MultiReader(bytes.NewReader(body)), "Content-Type", ct)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, small, e.read("ok.bin"))
}

func TestFilesDownload(t *testing.T) {
	e := newFilesEnv(t, FilesOptions{})
	e.write("data/file.bin", "0123456789", 0o644)
	e.write("data/lines.txt", "one\ntwo\nthree\nfour\n", 0o644)
	e.write("data/crlf.txt", "a\r\nb\r\n\r\nc", 0o644)
	e.write("data/héllo wörld.txt", "x", 0o644)

	r := e.do("GET", "/files/download?path=/data/file.bin", nil)
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "0123456789", string(r.body))
	assert.Equal(t, "application/octet-stream", r.header.Get("Content-Type"))
	assert.Equal(t, "10", r.header.Get("Content-Length"))
	assert.Equal(t, `attachment; filename=file.bin`, r.header.Get("Content-Disposition"))
	assert.Equal(t, "bytes", r.header.Get("Accept-Ranges"))

	r = e.do("GET", "/files/download?path="+q("/data/héllo wörld.txt"), nil)
	require.Equal(t, http.StatusOK, r.status)
	assert.Contains(t, r.header.Get("Content-Disposition"), "filename*=utf-8''h%C3%A9llo%20w%C3%B6rld.txt")

	ranges := []struct {
		name, rng, want, contentRange string
	}{
		{"closed", "bytes=2-5", "2345", "bytes 2-5/10"},
		{"open", "bytes=7-", "789", "bytes 7-9/10"},
		{"suffix", "bytes=-3", "789", "bytes 7-9/10"},
		{"past the end is clipped", "bytes=8-100", "89", "bytes 8-9/10"},
	}
	for _, tt := range ranges {
		t.Run("range "+tt.name, func(t *testing.T) {
			r := e.do("GET", "/files/download?path=/data/file.bin", nil, "Range", tt.rng)
			require.Equal(t, http.StatusPartialContent, r.status)
			assert.Equal(t, tt.want, string(r.body))
			assert.Equal(t, tt.contentRange, r.header.Get("Content-Range"))
		})
	}
	r = e.do("GET", "/files/download?path=/data/file.bin", nil, "Range", "bytes=0-0,5-5")
	require.Equal(t, http.StatusPartialContent, r.status)
	assert.Contains(t, r.header.Get("Content-Type"), "multipart/byteranges")

	for _, rng := range []string{"bytes=20-", "bytes=x-y", "bytes=5-2", "pages=1-2"} {
		t.Run("bad range "+rng, func(t *testing.T) {
			r := e.do("GET", "/files/download?path=/data/file.bin", nil, "Range", rng)
			expectErr(t, r, http.StatusRequestedRangeNotSatisfiable, CodeInvalidRange)
			assert.Equal(t, "application/json", r.header.Get("Content-Type"))
		})
	}

	lines := []struct {
		name, query, want string
	}{
		// Lines go out without their \n or \r\n, joined by \n, with no
		// trailing newline (OpenSandbox's line reads).
		{"offset and limit", "&offset=2&limit=2", "two\nthree"},
		{"offset only", "&offset=3", "three\nfour"},
		{"limit only", "&limit=1", "one"},
		{"past the end", "&offset=10", ""},
	}
	for _, tt := range lines {
		t.Run("lines "+tt.name, func(t *testing.T) {
			r := e.do("GET", "/files/download?path=/data/lines.txt"+tt.query, nil)
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			assert.Equal(t, tt.want, string(r.body))
			assert.Equal(t, "text/plain; charset=utf-8", r.header.Get("Content-Type"))
		})
	}
	t.Run("lines with crlf, an empty line and no final newline", func(t *testing.T) {
		r := e.do("GET", "/files/download?path=/data/crlf.txt&offset=2&limit=3", nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		assert.Equal(t, "b\n\nc", string(r.body))
	})

	errs := []struct {
		name, query string
		header      []string
		status      int
		code        api.ErrorCode
	}{
		{"missing", "?path=/data/nope", nil, 404, CodeFileNotFound},
		{"directory", "?path=/data", nil, 400, CodeInvalidRequestBody},
		{"no path", "", nil, 400, CodeMissingQuery},
		{"escape", "?path=" + q("/../outside/secret"), nil, 400, CodeInvalidPath},
		{"bad offset", "?path=/data/lines.txt&offset=0", nil, 400, CodeInvalidRequestBody},
		{"bad limit", "?path=/data/lines.txt&limit=x", nil, 400, CodeInvalidRequestBody},
		{"lines and range", "?path=/data/lines.txt&offset=1", []string{"Range", "bytes=0-1"}, 400, CodeInvalidRequestBody},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			expectErr(t, e.do("GET", "/files/download"+tt.query, nil, tt.header...), tt.status, tt.code)
		})
	}
}

func TestDirList(t *testing.T) {
	e := newFilesEnv(t, FilesOptions{})
	for _, f := range []string{"w/b/z.txt", "w/b/c/deep.txt", "w/a.txt", "w/c.txt"} {
		e.write(f, "x", 0o644)
	}
	require.NoError(t, os.Symlink("b", filepath.Join(e.dir, "w/blink")))

	list := func(query string) []string {
		t.Helper()
		r := e.do("GET", "/directories/list"+query, nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var infos []FileInfo
		require.NoError(t, json.Unmarshal(r.body, &infos))
		out := []string{}
		for _, fi := range infos {
			out = append(out, fi.Path+":"+string(fi.Type))
		}
		return out
	}
	tests := []struct {
		name, query string
		want        []string
	}{
		{"default depth", "?path=/w", []string{"/w/a.txt:file", "/w/b:directory", "/w/blink:symlink", "/w/c.txt:file"}},
		{"depth 2", "?path=/w&depth=2", []string{"/w/a.txt:file", "/w/b:directory", "/w/b/c:directory", "/w/b/z.txt:file", "/w/blink:symlink", "/w/c.txt:file"}},
		{"unlimited enough", "?path=w/&depth=9", []string{"/w/a.txt:file", "/w/b:directory", "/w/b/c:directory", "/w/b/c/deep.txt:file", "/w/b/z.txt:file", "/w/blink:symlink", "/w/c.txt:file"}},
		{"depth 0", "?path=/w&depth=0", []string{}},
		{"root", "?path=/", []string{"/w:directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, list(tt.query))
		})
	}
	errs := []struct {
		name, query string
		status      int
		code        api.ErrorCode
	}{
		{"symlink path", "?path=/w/blink", 400, CodeInvalidRequestBody},
		{"file path", "?path=/w/a.txt", 400, CodeInvalidRequestBody},
		{"missing", "?path=/nope", 404, CodeFileNotFound},
		{"bad depth", "?path=/w&depth=-1", 400, CodeInvalidRequestBody},
		{"no path", "?depth=1", 400, CodeMissingQuery},
		{"escape", "?path=/w/../..", 400, CodeInvalidPath},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			expectErr(t, e.do("GET", "/directories/list"+tt.query, nil), tt.status, tt.code)
		})
	}
}

func TestDirMakeAndRemove(t *testing.T) {
	e := newFilesEnv(t, FilesOptions{})
	e.write("existing/f", "x", 0o644)
	require.NoError(t, os.Chmod(filepath.Join(e.dir, "existing"), 0o711))

	r := e.do("POST", "/directories", map[string]any{
		"/existing/new/deeper": map[string]any{"mode": 700},
		"/existing":            map[string]any{"mode": 755},
		"plain":                map[string]any{},
	})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	for _, tt := range []struct {
		rel  string
		mode fs.FileMode
	}{
		{"existing", 0o711}, // already there: untouched
		{"existing/new", 0o700},
		{"existing/new/deeper", 0o700},
		{"plain", 0o755},
	} {
		fi, err := os.Stat(filepath.Join(e.dir, tt.rel))
		require.NoError(t, err, tt.rel)
		assert.True(t, fi.IsDir(), tt.rel)
		assert.Equal(t, tt.mode, fi.Mode().Perm(), tt.rel)
	}

	mkErrs := []struct {
		name, body string
		status     int
		code       api.ErrorCode
	}{
		{"under a file", `{"/existing/f/sub":{"mode":755}}`, 409, CodeFileExists},
		{"over a file", `{"/existing/f":{"mode":755}}`, 409, CodeFileExists},
		{"bad mode", `{"/m":{"mode":8}}`, 400, CodeInvalidRequestBody},
		{"escape", `{"/../outside/newdir":{"mode":755}}`, 400, CodeInvalidPath},
		{"bad json", `[`, 400, CodeInvalidRequestBody},
	}
	for _, tt := range mkErrs {
		t.Run(tt.name, func(t *testing.T) {
			expectErr(t, e.do("POST", "/directories", tt.body), tt.status, tt.code)
		})
	}
	assert.NoDirExists(t, filepath.Join(e.outside, "newdir"))

	r = e.do("DELETE", "/directories?path=/existing&path=/missing&path=plain", nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.False(t, e.exists("existing"))
	assert.False(t, e.exists("plain"))
	expectErr(t, e.do("DELETE", "/directories?path=/", nil), 400, CodeInvalidRequestBody)
	expectErr(t, e.do("DELETE", "/directories?path="+q("/.."), nil), 400, CodeInvalidPath)
	expectErr(t, e.do("DELETE", "/directories", nil), 400, CodeMissingQuery)
	assert.FileExists(t, filepath.Join(e.outside, "secret"))
}

// TestFilesSymlinkEscape checks that symlinks inside the root that point
// outside it (absolute, as to /etc, or relative with ..) cannot be read,
// written, listed or searched through, by any route.
func TestFilesSymlinkEscape(t *testing.T) {
	e := newFilesEnv(t, FilesOptions{})
	require.NoError(t, os.Symlink("/etc", filepath.Join(e.dir, "etc")))
	require.NoError(t, os.Symlink("../outside", filepath.Join(e.dir, "out")))
	require.NoError(t, os.Symlink("../outside/secret", filepath.Join(e.dir, "secretlink")))
	hostSecret := filepath.Join(e.outside, "secret")

	type call struct {
		name, method, target string
		body                 any
		code                 api.ErrorCode
	}
	const symlinkRefused = CodeInvalidRequestBody // list refuses a path that is itself a symlink
	calls := []call{
		{"info through link", "GET", "/files/info?path=/etc/passwd", nil, CodeInvalidPath},
		{"info through relative link", "GET", "/files/info?path=/out/secret", nil, CodeInvalidPath},
		{"download /etc/passwd", "GET", "/files/download?path=/etc/passwd", nil, CodeInvalidPath},
		{"download file link", "GET", "/files/download?path=/secretlink", nil, CodeInvalidPath},
		{"download through relative link", "GET", "/files/download?path=/out/secret", nil, CodeInvalidPath},
		{"list link", "GET", "/directories/list?path=/etc", nil, symlinkRefused},
		{"list link with slash", "GET", "/directories/list?path=/out/.", nil, symlinkRefused},
		{"list through link", "GET", "/directories/list?path=/etc/ssl", nil, CodeInvalidPath},
		{"search through link", "GET", "/files/search?path=/out/x", nil, CodeInvalidPath},
		{"delete through link", "DELETE", "/files?path=/out/secret", nil, CodeInvalidPath},
		{"rm -rf through link", "DELETE", "/directories?path=/out/secret", nil, CodeInvalidPath},
		{"chmod through link", "POST", "/files/permissions", `{"/secretlink":{"mode":777}}`, CodeInvalidPath},
		{"replace through link", "POST", "/files/replace", `{"/out/secret":{"old":"host","new":"pwned"}}`, CodeInvalidPath},
		{"replace file link", "POST", "/files/replace", `{"/secretlink":{"old":"host","new":"pwned"}}`, CodeInvalidPath},
		{"mv out of link", "POST", "/files/mv", `[{"src":"/out/secret","dest":"/stolen"}]`, CodeInvalidPath},
		{"mv into link", "POST", "/files/mv", `[{"src":"/secretlink","dest":"/out/moved"}]`, CodeInvalidPath},
		{"mkdir through link", "POST", "/directories", `{"/out/newdir":{"mode":755}}`, CodeInvalidPath},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(c.method, c.target, c.body)
			expectErr(t, r, http.StatusBadRequest, c.code)
			assert.NotContains(t, string(r.body), "root:")
			assert.NotContains(t, string(r.body), e.dir, "host paths must not leak")
		})
	}
	t.Run("upload through link", func(t *testing.T) {
		expectErr(t, e.upload(metaPart("/out/pwned", 644), uploadPart{"file", "x"}), 400, CodeInvalidPath)
		expectErr(t, e.upload(metaPart("/etc/pwned/x", 644), uploadPart{"file", "x"}), 400, CodeInvalidPath)
	})
	t.Run("search does not follow links", func(t *testing.T) {
		r := e.do("GET", "/files/search?path=/&pattern=secret", nil)
		require.Equal(t, http.StatusOK, r.status)
		assert.Equal(t, "[]\n", string(r.body))
	})

	b, err := os.ReadFile(hostSecret)
	require.NoError(t, err)
	assert.Equal(t, "host secret", string(b))
	fi, err := os.Stat(hostSecret)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o644), fi.Mode().Perm())
	ents, err := os.ReadDir(e.outside)
	require.NoError(t, err)
	assert.Len(t, ents, 1, "nothing was created outside the root")

	// Removing the link itself is allowed and leaves its target alone.
	require.Equal(t, http.StatusOK, e.do("DELETE", "/directories?path=/out", nil).status)
	require.Equal(t, http.StatusOK, e.do("DELETE", "/files?path=/secretlink", nil).status)
	assert.FileExists(t, hostSecret)
}

func TestFilesRootUnavailable(t *testing.T) {
	mux := http.NewServeMux()
	RegisterFiles(mux, func() *os.Root { return nil }, FilesOptions{})
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/files/info?path=/", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
}
