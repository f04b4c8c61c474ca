// Package ocitest gives tests of the container backend a real environment: a
// private containerd (started once per machine through
// scripts/containers/containerd.sh and shared by every test package), the
// test image localhost/hybox/python:3-bookworm (built by
// scripts/containers/build-image.sh into a cache that survives between
// runs, then imported), the OCI runtimes that really work here (runc, and
// gVisor's runsc through its own shim, built by
// scripts/containers/build-gvisor.sh), one-shot container runs and
// explicit cleanup.
//
// Tests that need it skip, with the reason, when not run as root or when
// Debian's packages are missing; with HYBOX_REQUIRE_CONTAINERS set (CI) they
// fail instead, so a misconfigured machine never passes silently.
package ocitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
)

// Fixed locations, shared by every test package on a machine.
const (
	// DefaultDataDir holds the test containerd (DataDir/containerd), the
	// gVisor shim on its PATH (DataDir/bin) and runsc's config
	// (DataDir/runsc.toml), unless [DataDirEnv] names another directory.
	DefaultDataDir = "/var/lib/hybox-test"
	// DataDirEnv names a data directory to use instead of
	// [DefaultDataDir], so that two test runs on one machine (say, two
	// branches with different runtimes) each have their own containerd.
	DataDirEnv = "HYBOX_TEST_DATA_DIR"
	// CacheDir holds the built image archive and gVisor builds; it
	// survives between runs.
	CacheDir = "/var/cache/hybox"
	// ImageCacheEnv names a directory for the image archive instead of
	// [CacheDir], for a run whose build-image.sh differs from the one
	// that made the shared archive (its inputs record would not match,
	// and each run would rebuild the other's).
	ImageCacheEnv = "HYBOX_TEST_IMAGE_CACHE"
	// ImageName is the test image.
	ImageName = "localhost/hybox/python:3-bookworm"
	// Namespace is the containerd namespace [Image] imports into.
	Namespace = "hybox-test"
	// Snapshotter is the snapshotter images are unpacked for.
	Snapshotter = "overlayfs"
	// RequireEnv, when set to anything, turns every skip of this package
	// into a failure (CI sets it).
	RequireEnv = "HYBOX_REQUIRE_CONTAINERS"
)

// DataDir is the test containerd's data directory: [DataDirEnv] or
// [DefaultDataDir].
func DataDir() string {
	if d := os.Getenv(DataDirEnv); d != "" {
		return d
	}
	return DefaultDataDir
}

// ImageArchive is the OCI archive of [ImageName] in [CacheDir] (or
// [ImageCacheEnv]).
func ImageArchive() string {
	dir := CacheDir
	if d := os.Getenv(ImageCacheEnv); d != "" {
		dir = d
	}
	return filepath.Join(dir, "python-3-bookworm.oci.tar")
}

// Socket is the test containerd's socket (running or not).
func Socket() string { return filepath.Join(DataDir(), "containerd", "containerd.sock") }

// StateDir is the test containerd's state directory: task bundles (and
// their rootfs mounts) live under StateDir/io.containerd.runtime.v2.task.
func StateDir() string { return filepath.Join(DataDir(), "containerd", "state") }

// RunscConfig is the gVisor shim's config file [Containerd] writes.
func RunscConfig() string { return filepath.Join(DataDir(), "runsc.toml") }

// RepoRoot is the repository holding this package: found from this
// source file's path, or (under -trimpath) by walking up from the working
// directory to go.mod.
func RepoRoot() string {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
	}
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

// unavailable skips t, or fails it when [RequireEnv] is set.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("%s (%s is set, so this is a failure)", msg, RequireEnv)
	}
	t.Skip(msg)
}

var (
	startMu  sync.Mutex
	started  bool
	imported = map[string]bool{} // namespace → image checked this process
)

// Containerd returns the socket of the private test containerd, starting it
// (once per machine; later calls and other packages reuse it) with
// scripts/containers/containerd.sh under [DataDir], with gVisor's shim
// (see [GVisor]) on its PATH. It skips t when not root or when containerd,
// runc or ctr are missing ("run make containers-deps"), and fails t when
// containerd does not start.
func Containerd(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "needs root: containerd, runc and runsc run as root")
	}
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			unavailable(t, "needs %s: run `make containers-deps` (scripts/containers/install-deps.sh) as root", bin)
		}
	}
	startMu.Lock()
	defer startMu.Unlock()
	if started {
		return Socket()
	}
	args := []string{"start", DataDir()}
	if g := GVisor(t); g.Dir != "" {
		args = append(args, g.Dir)
	}
	begin := time.Now()
	out, err := script(t, 60*time.Second, "containerd.sh", args...)
	if err != nil {
		t.Fatalf("start containerd: %v\n%s", err, out)
	}
	t.Logf("containerd ready at %s in %v", Socket(), time.Since(begin).Round(time.Millisecond))
	started = true
	return Socket()
}

// Client connects to the containerd at socket with namespace as default;
// the connection closes when t ends.
func Client(t testing.TB, socket, namespace string) *containerd.Client {
	t.Helper()
	c, err := containerd.New(socket, containerd.WithDefaultNamespace(namespace), containerd.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("connect containerd at %s: %v", socket, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Image ensures [ImageName] is in [Namespace] of the containerd at socket,
// unpacked for overlayfs, and returns its name. See [ImageIn].
func Image(t testing.TB, socket string) string {
	t.Helper()
	return ImageIn(t, socket, Namespace)
}

// ImageIn ensures [ImageName] is in namespace, unpacked for overlayfs: it
// builds the archive with scripts/containers/build-image.sh when missing or
// stale (cached in [CacheDir]; the first build takes about a minute), and
// imports it when the namespace lacks it or holds another digest. Callers in
// other processes are serialized by a lock file.
func ImageIn(t testing.TB, socket, namespace string) string {
	t.Helper()
	startMu.Lock()
	done := imported[namespace]
	startMu.Unlock()
	if done {
		return ImageName
	}
	unlock := lockFile(t, filepath.Join(DataDir(), "image.lock"))
	defer unlock()

	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		if _, err := os.Stat(ImageArchive()); err != nil {
			unavailable(t, "needs mmdebstrap to build %s: run `make containers-deps`", ImageName)
		}
	}
	begin := time.Now()
	out, err := script(t, 15*time.Minute, "build-image.sh", ImageArchive())
	if err != nil {
		t.Fatalf("build %s: %v\n%s", ImageArchive(), err, out)
	}
	if len(bytes.TrimSpace(out)) > 0 {
		t.Logf("image archive ready in %v:\n%s", time.Since(begin).Round(time.Millisecond), bytes.TrimSpace(out))
	}
	want, err := archiveDigest(ImageArchive())
	if err != nil {
		t.Fatal(err)
	}

	c := Client(t, socket, namespace)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := c.GetImage(ctx, ImageName)
	switch {
	case err == nil && img.Target().Digest.String() == want:
	case err == nil || errdefs.IsNotFound(err):
		begin = time.Now()
		if err := importArchive(ctx, c, ImageArchive()); err != nil {
			t.Fatal(err)
		}
		t.Logf("imported %s into namespace %s in %v", ImageName, namespace, time.Since(begin).Round(time.Millisecond))
		if img, err = c.GetImage(ctx, ImageName); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("look up %s: %v", ImageName, err)
	}
	ok, err := img.IsUnpacked(ctx, Snapshotter)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		begin = time.Now()
		if err := img.Unpack(ctx, Snapshotter); err != nil {
			t.Fatalf("unpack %s: %v", ImageName, err)
		}
		t.Logf("unpacked %s in %v", ImageName, time.Since(begin).Round(time.Millisecond))
	}
	startMu.Lock()
	imported[namespace] = true
	startMu.Unlock()
	return ImageName
}

// importArchive imports an OCI or docker image archive.
func importArchive(ctx context.Context, c *containerd.Client, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	imgs, err := c.Import(ctx, f)
	if err != nil {
		return fmt.Errorf("import %s: %w", path, err)
	}
	if len(imgs) == 0 {
		return fmt.Errorf("import %s: the archive names no image", path)
	}
	return nil
}

// archiveDigest reads the manifest digest build-image.sh recorded beside
// the archive.
func archiveDigest(archive string) (string, error) {
	b, err := os.ReadFile(archive + ".json")
	if err != nil {
		return "", fmt.Errorf("image archive record: %w", err)
	}
	var r struct {
		ManifestDigest string `json:"manifestDigest"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.ManifestDigest == "" {
		return "", fmt.Errorf("image archive record %s.json: no manifestDigest (%v)", archive, err)
	}
	return r.ManifestDigest, nil
}

// script runs scripts/containers/NAME with args and returns its combined
// output.
func script(t testing.TB, timeout time.Duration, name string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(RepoRoot(), "scripts", "containers", name)}, args...)...)
	cmd.Dir = RepoRoot()
	return cmd.CombinedOutput()
}

// lockFile takes an exclusive flock on path (created if needed).
func lockFile(t testing.TB, path string) (unlock func()) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		t.Fatal(err)
	}
	return func() { _ = f.Close() }
}
