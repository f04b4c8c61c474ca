package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func (h *harness) volume(name string) (int, api.NamedVolume) {
	h.t.Helper()
	st, b, _ := h.do("GET", "/v1/volumes/"+name, nil)
	var v api.NamedVolume
	if st == 200 {
		require.NoError(h.t, json.Unmarshal(b, &v))
	}
	return st, v
}

func pvc(name, mount string, extra map[string]any) map[string]any {
	p := map[string]any{"claimName": name}
	for k, v := range extra {
		p[k] = v
	}
	return map[string]any{"name": "v", "mountPath": mount, "pvc": p}
}

// Named volumes: made on first use, shared by a runc and a gVisor
// sandbox, listed with their users, not deletable while used, removed
// with the sandbox that made them when asked.
func TestNamedVolumes(t *testing.T) {
	h := newHarness(t, "", harnessOpts{containers: true})
	box := func(runtime string, vols ...map[string]any) api.Sandbox {
		sb := h.create(map[string]any{"image": map[string]string{"uri": ocitest.ImageName},
			"extensions": map[string]string{"hybox.io/runtime": runtime}, "entrypoint": []string{"sleep", "infinity"},
			"volumes": vols})
		t.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil) })
		return sb
	}
	a := box("runc", pvc("shared", "/data", map[string]any{"deleteOnSandboxTermination": true}))
	b := box("runsc", pvc("shared", "/mnt/shared", nil), map[string]any{"mountPath": "/logs", "subPath": "logs/b", "pvc": map[string]any{"claimName": "shared"}})
	require.Equal(t, "a.txt\nlogs", lines(h.command(a.ID, "echo from-a > /data/a.txt && ls /data")), "b made its subPath in the volume")
	assert.Equal(t, "from-a", lines(h.command(b.ID, "cat /mnt/shared/a.txt")))
	h.command(b.ID, "echo from-b > /logs/b.log")
	assert.Equal(t, "from-b", lines(h.command(a.ID, "cat /data/logs/b/b.log")), "the subPath was made inside the volume")
	st, v := h.volume("shared")
	require.Equal(t, 200, st)
	assert.ElementsMatch(t, []string{a.ID, b.ID}, v.UsedBy)
	assert.Positive(t, v.SizeBytes)
	st, body, _ := h.do("DELETE", "/v1/volumes/shared", nil)
	assert.Equal(t, 409, st, string(body))
	// a made it and asked for its removal, but b still uses it.
	st, _, _ = h.do("DELETE", "/v1/sandboxes/"+a.ID, nil)
	require.Equal(t, 204, st)
	st, v = h.volume("shared")
	require.Equal(t, 200, st, "kept while b uses it")
	assert.Equal(t, []string{b.ID}, v.UsedBy)
	st, _, _ = h.do("DELETE", "/v1/sandboxes/"+b.ID, nil)
	require.Equal(t, 204, st)
	st, body, _ = h.do("DELETE", "/v1/volumes/shared", nil)
	require.Equal(t, 204, st, string(body))
	_, err := os.Stat(filepath.Join(h.dataDir, "volumes", "shared"))
	assert.True(t, os.IsNotExist(err))

	// A volume its sandbox made and alone uses goes with it.
	c := box("runc", pvc("scratch", "/scratch", map[string]any{"deleteOnSandboxTermination": true}))
	h.command(c.ID, "echo x > /scratch/x")
	st, _, _ = h.do("DELETE", "/v1/sandboxes/"+c.ID, nil)
	require.Equal(t, 204, st)
	st, _ = h.volume("scratch")
	assert.Equal(t, 404, st)
	// Without deleteOnSandboxTermination it stays, files and all.
	d := box("runc", pvc("kept", "/k", nil))
	h.command(d.ID, "echo keep > /k/f")
	st, _, _ = h.do("DELETE", "/v1/sandboxes/"+d.ID, nil)
	require.Equal(t, 204, st)
	st, v = h.volume("kept")
	require.Equal(t, 200, st)
	assert.Empty(t, v.UsedBy)
	got, err := os.ReadFile(filepath.Join(h.dataDir, "volumes", "kept", "f"))
	require.NoError(t, err)
	assert.Equal(t, "keep\n", string(got))
}

func TestNamedVolumesBadInput(t *testing.T) {
	h := newHarness(t, "", harnessOpts{containers: true})
	create := func(body map[string]any) (int, api.Error) {
		st, b, _ := h.do("POST", "/v1/sandboxes", body)
		var e api.Error
		_ = json.Unmarshal(b, &e)
		return st, e
	}
	oci := func(vols ...map[string]any) map[string]any {
		return map[string]any{"image": map[string]string{"uri": ocitest.ImageName}, "extensions": map[string]string{"hybox.io/runtime": "runc"},
			"entrypoint": []string{"sleep", "infinity"}, "volumes": vols}
	}
	st, e := create(oci(pvc("missing", "/m", map[string]any{"createIfNotExists": false})))
	assert.Equal(t, 400, st)
	assert.Contains(t, e.Message, "volume missing does not exist and createIfNotExists is false")
	st, e = create(oci(map[string]any{"mountPath": "/m", "host": map[string]string{"path": "/tmp"}, "pvc": map[string]string{"claimName": "x"}}))
	assert.Equal(t, 400, st)
	assert.Contains(t, e.Message, "not both")
	st, e = create(oci(pvc("Bad_Name", "/m", nil)))
	assert.Equal(t, 400, st)
	assert.Contains(t, e.Message, "claimName")
	// A create refused by the runtime makes no volume.
	st, _ = create(map[string]any{"image": map[string]string{"uri": "wasm://default"}, "volumes": []map[string]any{pvc("w", "/proc", nil)}})
	assert.Equal(t, 400, st)
	st, _ = h.volume("w")
	assert.Equal(t, 404, st, "a refused create made no volume")
	// The volumes API.
	st, b, _ := h.do("POST", "/v1/volumes", map[string]string{"name": "made"})
	require.Equal(t, 201, st, string(b))
	st, _, _ = h.do("POST", "/v1/volumes", map[string]string{"name": "made"})
	assert.Equal(t, 409, st)
	st, _, _ = h.do("POST", "/v1/volumes", map[string]string{"name": "../x"})
	assert.Equal(t, 400, st)
	st, _, _ = h.do("DELETE", "/v1/volumes/none", nil)
	assert.Equal(t, 404, st)
	st, b, _ = h.do("GET", "/v1/volumes", nil)
	require.Equal(t, 200, st)
	var list api.NamedVolumeList
	require.NoError(t, json.Unmarshal(b, &list))
	require.Len(t, list.Items, 1)
	assert.Equal(t, "made", list.Items[0].Name)
	st, _, _ = h.do("DELETE", "/v1/volumes/made", nil)
	assert.Equal(t, 204, st)
}
