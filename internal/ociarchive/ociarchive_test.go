package ociarchive_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/hybox-dev/hybox/internal/ociarchive"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

var created = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// rootfs builds a small rootfs tarball the way mmdebstrap writes one:
// "./" names, device nodes, a hard link, a symlink, an xattr and an mtime
// later than the image's creation time.
func rootfs(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	later := created.Add(48 * time.Hour)
	earlier := created.Add(-48 * time.Hour)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755, ModTime: later},
		{Typeflag: tar.TypeDir, Name: "./dev/", Mode: 0o755, ModTime: later},
		{Typeflag: tar.TypeChar, Name: "./dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3, ModTime: later},
		{Typeflag: tar.TypeDir, Name: "./usr/bin/", Mode: 0o755, ModTime: earlier},
		{Typeflag: tar.TypeReg, Name: "./usr/bin/hello", Mode: 0o755, Size: 6, ModTime: later,
			PAXRecords: map[string]string{"SCHILY.xattr.user.hybox": "x", "atime": "1.5"}},
		{Typeflag: tar.TypeLink, Name: "./usr/bin/hi", Linkname: "./usr/bin/hello", ModTime: later},
		{Typeflag: tar.TypeSymlink, Name: "./bin", Linkname: "usr/bin", ModTime: earlier},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte("hello\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func opts(name string) ociarchive.Options {
	return ociarchive.Options{Name: name, Created: created, Cmd: []string{"/bin/bash"}, TempDir: ""}
}

func pack(t *testing.T, name string) ([]byte, ociarchive.Result) {
	t.Helper()
	var out bytes.Buffer
	o := opts(name)
	o.TempDir = t.TempDir()
	res, err := ociarchive.Pack(context.Background(), &out, bytes.NewReader(rootfs(t)), o)
	if err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), res
}

// files reads a tar into name → content.
func files(t *testing.T, r io.Reader) (map[string][]byte, []*tar.Header) {
	t.Helper()
	tr := tar.NewReader(r)
	m := map[string][]byte{}
	var hs []*tar.Header
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return m, hs
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		m[h.Name] = b
		hs = append(hs, h)
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func blob(t *testing.T, fs map[string][]byte, digest string) []byte {
	t.Helper()
	b, ok := fs["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
	if !ok {
		t.Fatalf("blob %s missing", digest)
	}
	if got := sha(b); got != digest {
		t.Fatalf("blob %s has digest %s", digest, got)
	}
	return b
}

func TestPackIsReproducible(t *testing.T) {
	a, ra := pack(t, "localhost/hybox/test:1")
	b, rb := pack(t, "localhost/hybox/test:1")
	if !bytes.Equal(a, b) || ra != rb {
		t.Fatalf("two packs of the same rootfs differ: %+v vs %+v", ra, rb)
	}
	_, rc := pack(t, "localhost/hybox/test:2")
	if rc.ManifestDigest != ra.ManifestDigest || rc.LayerDigest != ra.LayerDigest {
		t.Fatal("the name changed the manifest; it belongs in the index only")
	}
	if int64(len(a)) != ra.ArchiveSize {
		t.Fatalf("ArchiveSize %d, wrote %d", ra.ArchiveSize, len(a))
	}
}

func TestPackLayout(t *testing.T) {
	archive, res := pack(t, "localhost/hybox/python:3-bookworm")
	fs, _ := files(t, bytes.NewReader(archive))
	if string(fs["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout %q", fs["oci-layout"])
	}
	var idx struct {
		MediaType string
		Manifests []struct {
			MediaType, Digest string
			Platform          struct{ Architecture, OS string }
			Annotations       map[string]string
		}
	}
	if err := json.Unmarshal(fs["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if idx.MediaType != ociarchive.MediaTypeIndex || len(idx.Manifests) != 1 {
		t.Fatalf("index %s", fs["index.json"])
	}
	m := idx.Manifests[0]
	if m.Digest != res.ManifestDigest || m.Platform.Architecture != "amd64" || m.Platform.OS != "linux" ||
		m.Annotations[ociarchive.AnnotationImageName] != "localhost/hybox/python:3-bookworm" ||
		m.Annotations[ociarchive.AnnotationRefName] != "3-bookworm" {
		t.Fatalf("index manifest entry %+v", m)
	}
	var man struct {
		Config struct{ MediaType, Digest string }
		Layers []struct {
			MediaType, Digest string
			Size              int64
		}
	}
	if err := json.Unmarshal(blob(t, fs, res.ManifestDigest), &man); err != nil {
		t.Fatal(err)
	}
	if man.Config.Digest != res.ConfigDigest || len(man.Layers) != 1 || man.Layers[0].Digest != res.LayerDigest ||
		man.Layers[0].MediaType != ociarchive.MediaTypeLayerGz || man.Layers[0].Size != res.LayerSize {
		t.Fatalf("manifest %+v", man)
	}
	var cfg struct {
		Architecture, OS string
		Config           struct {
			Env, Cmd []string
		}
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		}
	}
	if err := json.Unmarshal(blob(t, fs, res.ConfigDigest), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Architecture != "amd64" || cfg.OS != "linux" || len(cfg.Config.Env) != 1 || cfg.Config.Env[0] != ociarchive.DefaultPath ||
		len(cfg.Config.Cmd) != 1 || cfg.Config.Cmd[0] != "/bin/bash" || len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != res.DiffID {
		t.Fatalf("config %s", blob(t, fs, res.ConfigDigest))
	}
	gz, err := gzip.NewReader(bytes.NewReader(blob(t, fs, res.LayerDigest)))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	if sha(raw) != res.DiffID {
		t.Fatalf("diff id %s, layer holds %s", res.DiffID, sha(raw))
	}
	_, hs := files(t, bytes.NewReader(raw))
	type entry struct {
		name, link string
		mtime      time.Time
		xattr      string
	}
	var got []entry
	for _, h := range hs {
		got = append(got, entry{h.Name, h.Linkname, h.ModTime.UTC(), h.PAXRecords["SCHILY.xattr.user.hybox"]})
		if !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s keeps atime/ctime", h.Name)
		}
	}
	earlier := created.Add(-48 * time.Hour)
	want := []entry{
		{name: "dev/", mtime: created},
		{name: "usr/bin/", mtime: earlier},
		{name: "usr/bin/hello", mtime: created, xattr: "x"},
		{name: "usr/bin/hi", link: "usr/bin/hello", mtime: created},
		{name: "bin", link: "usr/bin", mtime: earlier},
	}
	if len(got) != len(want) {
		t.Fatalf("layer entries %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts ociarchive.Options
		ok   bool
	}{
		{name: "complete", opts: opts("localhost/hybox/python:3-bookworm"), ok: true},
		{name: "registry port, tag", opts: opts("localhost:5000/x:1"), ok: true},
		{name: "empty name", opts: opts("")},
		{name: "no tag", opts: opts("localhost/hybox/python")},
		{name: "registry port, no tag", opts: opts("localhost:5000/x")},
		{name: "zero time", opts: ociarchive.Options{Name: "a:b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if tc.ok != (err == nil) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ociarchive.ErrInvalidOptions) {
				t.Fatalf("%v does not wrap ErrInvalidOptions", err)
			}
		})
	}
}

func TestPackRejectsBadRootfs(t *testing.T) {
	bad := append(rootfs(t)[:700], bytes.Repeat([]byte{'x'}, 600)...)
	_, err := ociarchive.Pack(context.Background(), io.Discard, bytes.NewReader(bad), opts("a/b:c"))
	if err == nil {
		t.Fatal("Pack of a corrupt tar succeeded")
	}
}

func TestPackStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := ociarchive.Pack(ctx, io.Discard, bytes.NewReader(rootfs(t)), opts("a/b:c"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

// The archive imports into a real containerd under the name in the index
// and unpacks to overlayfs.
func TestContainerdImportsArchive(t *testing.T) {
	sock := ocitest.Containerd(t)
	const ns = "hybox-test-ociarchive"
	const name = "localhost/hybox/ociarchive-test:1"
	archive, res := pack(t, name)
	c := ocitest.Client(t, sock, ns)
	ctx := namespaces.WithNamespace(context.Background(), ns)
	t.Cleanup(func() {
		_ = c.ImageService().Delete(ctx, name, images.SynchronousDelete())
		_ = c.NamespaceService().Delete(ctx, ns)
	})
	imgs, err := c.Import(ctx, bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 || imgs[0].Name != name || imgs[0].Target.Digest.String() != res.ManifestDigest {
		t.Fatalf("imported %+v, want %s at %s", imgs, name, res.ManifestDigest)
	}
	img, err := c.GetImage(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := img.Unpack(ctx, ocitest.Snapshotter); err != nil {
		t.Fatal(err)
	}
	diffs, err := img.RootFS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 1 || diffs[0].String() != res.DiffID {
		t.Fatalf("rootfs %v, want [%s]", diffs, res.DiffID)
	}
}
