package oci_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/oci"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

// pullNamespace keeps the images these tests pull and import apart from
// every other test's.
const pullNamespace = "hybox-test-pull"

// dockerArchiveName is the tag of the docker-format archive test.
const dockerArchiveName = "localhost/hybox/docker-archive:1"

// pullBackend is a backend on the test containerd in pullNamespace, with
// images left there by an interrupted earlier run removed first.
func pullBackend(t *testing.T) *oci.Containerd {
	t.Helper()
	b := newBackend(t, func(o *oci.Options) { o.Namespace = pullNamespace })
	ctx := context.Background()
	imgs, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range imgs {
		if strings.HasPrefix(im.Name, "127.0.0.1:") || im.Name == dockerArchiveName {
			if err := b.Remove(ctx, im.Name); err != nil {
				t.Fatalf("remove stale %s: %v", im.Name, err)
			}
		}
	}
	return b
}

// testImage reads the test image from its OCI archive (ocitest.Image builds
// the archive when missing).
func testImage(t *testing.T) v1.Image {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(ocitest.ImageArchive())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(dst, dir+string(filepath.Separator)) {
			t.Fatalf("archive entry %q escapes the layout", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := os.Create(dst)
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("test image layout holds %d manifests, want 1", len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// freshImage is img with one more small random layer: its config and that
// layer are in no content store yet, so a pull must really download blobs
// (the base layer may be shared with the test image of other namespaces).
func freshImage(t *testing.T, img v1.Image) v1.Image {
	t.Helper()
	l, err := random.Layer(4096, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	out, err := mutate.AppendLayers(img, l)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// authRegistry is an in-memory registry on loopback that answers only
// requests carrying its basic-auth credentials.
type authRegistry struct {
	host       string // 127.0.0.1:PORT
	user, pass string
	refused    atomic.Int64 // requests answered 401
	blobGets   atomic.Int64 // authorized blob downloads
}

// startRegistry starts an authRegistry. With blobsTo set, authorized blob
// downloads are redirected there (as registries redirect to storage).
func startRegistry(t *testing.T, blobsTo string) *authRegistry {
	t.Helper()
	r := &authRegistry{user: "hybox", pass: "s3cret-pull"}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, p, ok := req.BasicAuth()
		if !ok || u != r.user || p != r.pass {
			r.refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="hybox-test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			r.blobGets.Add(1)
		}
		if blobsTo != "" && req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			http.Redirect(w, req, blobsTo+req.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		reg.ServeHTTP(w, req)
	}))
	t.Cleanup(ts.Close)
	r.host = strings.TrimPrefix(ts.URL, "http://")
	return r
}

// push stores img in the registry as repo:tag and returns the reference.
func (r *authRegistry) push(t *testing.T, img v1.Image, repoTag string) string {
	t.Helper()
	ref := r.host + "/" + repoTag
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := remote.Write(tag, img, remote.WithContext(ctx),
		remote.WithAuth(&authn.Basic{Username: r.user, Password: r.pass})); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref
}

// listed reports whether the backend lists an image named ref.
func listed(t *testing.T, b *oci.Containerd, ref string) (runtimes.Image, bool) {
	t.Helper()
	imgs, err := b.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range imgs {
		if im.Name == ref {
			return im, true
		}
	}
	return runtimes.Image{}, false
}

// removeAtEnd removes image ref when t ends (it may not exist).
func removeAtEnd(t *testing.T, b *oci.Containerd, ref string) {
	t.Cleanup(func() {
		if err := b.Remove(context.Background(), ref); err != nil && !errors.Is(err, runtimes.ErrNotFound) {
			t.Errorf("remove %s: %v", ref, err)
		}
	})
}

// runPython creates a runc sandbox from image (pulling it with auth when
// missing) and checks that python3 in it computes 6*7.
func runPython(t *testing.T, b *oci.Containerd, image string, auth *runtimes.RegistryAuth) {
	t.Helper()
	spec := testSpec(t, "pull")
	spec.Image, spec.ImageAuth = image, auth
	sb := mustCreate(t, runtimeNamed(t, b, "runc"), spec)
	o := newExecClient(t, sb).run(`python3 -c 'print(6*7)'`)
	if o.Stdout != "42" || o.EName != "" || !o.Complete {
		t.Fatalf("python3 in a sandbox from %s: stdout %q stderr %q error %s %s complete %v",
			image, o.Stdout, o.Stderr, o.EName, o.EValue, o.Complete)
	}
}

func TestPullWithAuth(t *testing.T) {
	b := pullBackend(t)
	img := freshImage(t, testImage(t))
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	reg := startRegistry(t, "")
	pulled := reg.push(t, img, "hybox/python:pulled")
	onCreate := reg.push(t, img, "hybox/python:create")
	removeAtEnd(t, b, pulled)
	removeAtEnd(t, b, onCreate)
	good := &runtimes.RegistryAuth{Username: reg.user, Password: reg.pass}

	// Refused pulls first, while nothing of the image is in the namespace.
	refusals := []struct {
		name string
		auth *runtimes.RegistryAuth
		hint string
	}{
		{name: "no credentials", auth: nil, hint: "requires credentials: set image.auth"},
		{name: "wrong password", auth: &runtimes.RegistryAuth{Username: reg.user, Password: "wrong"}, hint: "refused the credentials of image.auth"},
		{name: "wrong user", auth: &runtimes.RegistryAuth{Username: "someone", Password: reg.pass}, hint: "refused the credentials of image.auth"},
		{name: "empty password", auth: &runtimes.RegistryAuth{Username: reg.user}, hint: "refused the credentials of image.auth"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			before := reg.refused.Load()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := b.Pull(ctx, pulled, tc.auth)
			if err == nil {
				t.Fatal("pull succeeded")
			}
			if !errors.Is(err, runtimes.ErrUnavailable) {
				t.Errorf("error %v does not wrap runtimes.ErrUnavailable", err)
			}
			if !strings.Contains(err.Error(), tc.hint) || !strings.Contains(err.Error(), pulled) {
				t.Errorf("error %q does not name %s and say %q", err, pulled, tc.hint)
			}
			if reg.refused.Load() == before {
				t.Error("the registry refused no request: the pull did not reach it")
			}
			if _, ok := listed(t, b, pulled); ok {
				t.Errorf("%s is listed after a refused pull", pulled)
			}
		})
	}

	t.Run("create with wrong credentials", func(t *testing.T) {
		spec := testSpec(t, "pull")
		spec.Image = onCreate
		spec.ImageAuth = &runtimes.RegistryAuth{Username: reg.user, Password: "wrong"}
		rt := runtimeNamed(t, b, "runc")
		sb, err := rt.Create(context.Background(), spec)
		if err == nil {
			_ = sb.Close(context.Background())
			_ = rt.Destroy(context.Background(), spec)
			t.Fatal("create succeeded")
		}
		if !errors.Is(err, runtimes.ErrInvalid) || !strings.Contains(err.Error(), "could not be pulled") ||
			!strings.Contains(err.Error(), "refused the credentials") {
			t.Errorf("create error %q: want ErrInvalid saying the image could not be pulled and why", err)
		}
		if _, ok := listed(t, b, onCreate); ok {
			t.Errorf("%s is listed after a refused pull", onCreate)
		}
		ctx := namespaces.WithNamespace(context.Background(), pullNamespace)
		if _, err := b.Client().LoadContainer(ctx, spec.ID); !errdefs.IsNotFound(err) {
			t.Errorf("container %s after a failed create: %v", spec.ID, err)
		}
	})

	t.Run("pull", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		gets := reg.blobGets.Load()
		got, err := b.Pull(ctx, pulled, good)
		if err != nil {
			t.Fatal(err)
		}
		if reg.blobGets.Load() == gets {
			t.Error("the pull downloaded no blob from the registry")
		}
		if got.Name != pulled || got.Digest != want.String() || got.Size <= 0 {
			t.Errorf("pulled %+v, want name %s digest %s", got, pulled, want)
		}
		if im, ok := listed(t, b, pulled); !ok || im.Digest != want.String() {
			t.Errorf("%s not listed with digest %s (listed: %v, %+v)", pulled, want, ok, im)
		}
		nctx := namespaces.WithNamespace(ctx, pullNamespace)
		cimg, err := b.Client().GetImage(nctx, pulled)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := cimg.IsUnpacked(nctx, ocitest.Snapshotter); err != nil || !ok {
			t.Errorf("%s unpacked for %s: %v %v", pulled, ocitest.Snapshotter, ok, err)
		}
		runPython(t, b, pulled, nil)
	})

	t.Run("create pulls the missing image", func(t *testing.T) {
		if _, ok := listed(t, b, onCreate); ok {
			t.Fatalf("%s is already present: create would not pull", onCreate)
		}
		runPython(t, b, onCreate, good)
		if im, ok := listed(t, b, onCreate); !ok || im.Digest != want.String() {
			t.Errorf("%s not listed with digest %s after create (listed: %v, %+v)", onCreate, want, ok, im)
		}
	})
}

// dockerSave writes img as `docker save` does for tag: the legacy docker
// archive (manifest.json, the config and layer files) plus its
// "repositories" file, and no OCI layout.
func dockerSave(t *testing.T, img v1.Image, tag string) string {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	top := m.Layers[len(m.Layers)-1].Digest.Hex

	path := filepath.Join(t.TempDir(), "docker-archive.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarball.Write(ref, img, pw)) }()
	tr := tar.NewReader(pr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	repos, err := json.Marshal(map[string]map[string]string{ref.Context().Name(): {ref.TagStr(): top}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.WriteHeader(&tar.Header{Name: "repositories", Mode: 0o644, Size: int64(len(repos)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(repos); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	has := func(n string) bool {
		for _, x := range names {
			if x == n {
				return true
			}
		}
		return false
	}
	if !has("manifest.json") || has("index.json") || has("oci-layout") {
		t.Fatalf("archive is not a plain docker archive: %v", names)
	}
	return path
}

func TestImportDockerArchive(t *testing.T) {
	b := pullBackend(t)
	archive := dockerSave(t, freshImage(t, testImage(t)), dockerArchiveName)
	removeAtEnd(t, b, dockerArchiveName)

	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	imgs, err := b.Import(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 || imgs[0].Name != dockerArchiveName || imgs[0].Size <= 0 {
		t.Fatalf("imported %+v, want one image %s", imgs, dockerArchiveName)
	}
	if im, ok := listed(t, b, dockerArchiveName); !ok || im.Digest != imgs[0].Digest {
		t.Errorf("%s not listed with digest %s (listed: %v, %+v)", dockerArchiveName, imgs[0].Digest, ok, im)
	}
	runPython(t, b, dockerArchiveName, nil)
}

// The credentials of image.auth go to the registry the reference names
// only: another host that challenges the pull (here a "storage" host the
// registry redirects blob downloads to) never receives them.
func TestPullCredentialsStayWithTheirRegistry(t *testing.T) {
	b := pullBackend(t)
	var leaked atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, p, ok := req.BasicAuth(); ok && strings.Contains(p, "s3cret") {
			leaked.Add(1)
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="elsewhere"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	}))
	t.Cleanup(other.Close)
	// Another host name than the registry's 127.0.0.1, so that Go's HTTP
	// client itself drops the registry's Authorization on the redirect.
	otherURL := strings.Replace(other.URL, "127.0.0.1", "localhost", 1)
	reg := startRegistry(t, otherURL)
	ref := reg.push(t, freshImage(t, testImage(t)), "hybox/python:redirected")
	removeAtEnd(t, b, ref)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := b.Pull(ctx, ref, &runtimes.RegistryAuth{Username: reg.user, Password: reg.pass})
	if err == nil {
		t.Fatal("pull succeeded although the blob host refuses every request")
	}
	if !errors.Is(err, runtimes.ErrUnavailable) {
		t.Errorf("error %v does not wrap runtimes.ErrUnavailable", err)
	}
	if n := leaked.Load(); n > 0 {
		t.Fatalf("the credentials of %s were sent to %s (%d requests)", reg.host, otherURL, n)
	}
	if _, ok := listed(t, b, ref); ok {
		t.Errorf("%s is listed after a failed pull", ref)
	}
}
