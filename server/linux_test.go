package server

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// upload sends one file with the given metadata through the sandbox's
// execd endpoint.
func (h *harness) upload(id, meta, content string) (int, []byte) {
	h.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mf, _ := mw.CreateFormField("metadata")
	_, _ = mf.Write([]byte(meta))
	fw, _ := mw.CreateFormFile("file", "f")
	_, _ = fw.Write([]byte(content))
	require.NoError(h.t, mw.Close())
	st, b, _ := h.do("POST", "/v1/sandboxes/"+id+"/proxy/44772/files/upload", buf.Bytes(), "Content-Type", mw.FormDataContentType())
	return st, b
}

// TestWasmUsers checks that a wasm sandbox's users are those of its
// /etc/passwd and /etc/group for the files API as for its programs:
// uploads name owners as in a container, file info reports names.
func TestWasmUsers(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	sb := h.create(map[string]any{"env": map[string]string{"HOSTNAME": "agent-box"}})
	info := func(p string) api.FileInfo {
		t.Helper()
		st, b := h.execd(sb.ID, "GET", "/files/info?path="+p, nil)
		require.Equal(t, http.StatusOK, st, string(b))
		var m map[string]api.FileInfo
		require.NoError(t, json.Unmarshal(b, &m))
		return m[p]
	}
	fi := info("/etc/passwd")
	assert.Equal(t, 444, fi.Mode)
	if os.Geteuid() == 0 {
		assert.Equal(t, "root", fi.Owner)
		assert.Equal(t, "root", fi.Group)
	}
	for _, c := range []struct{ owner, group string }{{"nobody", "nogroup"}, {"root", "root"}, {"user", "user"}, {"65534", "65534"}} {
		t.Run(c.owner, func(t *testing.T) {
			p := "/workspace/" + c.owner + ".txt"
			st, b := h.upload(sb.ID, `{"path":"`+p+`","owner":"`+c.owner+`","group":"`+c.group+`"}`, "x")
			if os.Geteuid() != 0 && c.owner != "root" {
				assert.Equal(t, http.StatusForbidden, st, string(b)) // the OS refuses the chown
				return
			}
			require.Equal(t, http.StatusOK, st, string(b))
			fi := info(p)
			want := map[string]string{"65534": "nobody"}[c.owner]
			if want == "" {
				want = c.owner
			}
			wantGroup := map[string]string{"65534": "nogroup"}[c.group]
			if wantGroup == "" {
				wantGroup = c.group
			}
			assert.Equal(t, want, fi.Owner)
			assert.Equal(t, wantGroup, fi.Group)
		})
	}
	// Unknown names are a precise 400 and leave nothing behind.
	for _, meta := range []string{`{"path":"/workspace/bob.txt","owner":"bob"}`, `{"path":"/workspace/bob.txt","group":"bobs"}`} {
		st, b := h.upload(sb.ID, meta, "x")
		require.Equal(t, http.StatusBadRequest, st, string(b))
		var e api.Error
		require.NoError(t, json.Unmarshal(b, &e))
		assert.Contains(t, e.Message, "unknown")
		st, _ = h.execd(sb.ID, "GET", "/files/download?path=/workspace/bob.txt", nil)
		assert.Equal(t, http.StatusNotFound, st)
	}

	// What the sandbox's programs create is its user's, as `id` says: the
	// shell's, Python's and JavaScript's files, directories and links.
	if os.Geteuid() == 0 {
		o := h.command(sb.ID, "mkdir -p /workspace/sh/a/b && echo x > /workspace/sh/f && ln -s f /workspace/sh/l && cp /workspace/sh/f /workspace/sh/g && ls -l /workspace/sh/f")
		require.Nil(t, o.err, "%+v", o)
		assert.Contains(t, strings.Join(o.stdout, ""), " user user ", "ls -l names the user")
		h.code(sb.ID, "python", "import os\nos.makedirs('/workspace/py/d')\nopen('/workspace/py/f', 'w').write('x')\nos.symlink('f', '/workspace/py/l')")
		h.code(sb.ID, "javascript", "const fs = require('fs'); fs.mkdirSync('/workspace/js/d', {recursive: true}); fs.writeFileSync('/workspace/js/f', 'x'); fs.copyFileSync('/workspace/js/f', '/workspace/js/g')")
		for _, p := range []string{"/workspace/sh", "/workspace/sh/a", "/workspace/sh/a/b", "/workspace/sh/f", "/workspace/sh/l", "/workspace/sh/g",
			"/workspace/py/d", "/workspace/py/f", "/workspace/py/l", "/workspace/js", "/workspace/js/d", "/workspace/js/f", "/workspace/js/g"} {
			fi := info(p)
			assert.Equal(t, []string{"user", "user"}, []string{fi.Owner, fi.Group}, p)
		}
		// An existing file someone else owns stays theirs when written.
		o = h.command(sb.ID, "echo more >> /workspace/root.txt")
		require.Nil(t, o.err, "%+v", o)
		assert.Equal(t, "root", info("/workspace/root.txt").Owner)
	}

	o := h.command(sb.ID, "id -u nobody; whoami; hostname; . /etc/os-release; echo $ID")
	require.Nil(t, o.err)
	assert.Equal(t, []string{"65534", "user", "agent-box", "hybox"}, o.stdout)
	o = h.command(sb.ID, "id nosuchuser")
	require.NotNil(t, o.err)
	assert.Equal(t, "1", o.err.EValue)
	assert.Contains(t, strings.Join(o.stderr, ""), "id: ‘nosuchuser’: no such user")
	o = h.code(sb.ID, "python", "import pwd, grp; (pwd.getpwnam('nobody').pw_uid, grp.getgrgid(65534).gr_name, open('/etc/hostname').read())")
	require.Nil(t, o.err)
	assert.Equal(t, "(65534, 'nogroup', 'agent-box\\n')", o.results[0]["text"])
}
