package ocitest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"

	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

// containerID is unique per test and process, so test packages sharing
// the containerd never collide.
func containerID(t *testing.T, suffix string) string {
	n := strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name()))
	return fmt.Sprintf("%s-%s-%d", n, suffix, os.Getpid())
}

// assertGone fails t when containerd still knows container id or its
// snapshot, or the host still has anything of it.
func assertGone(t *testing.T, c *containerd.Client, rt ocitest.Runtime, id string) {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), ocitest.Namespace)
	if _, err := c.LoadContainer(ctx, id); !errdefs.IsNotFound(err) {
		t.Errorf("container %s still exists (err %v)", id, err)
	}
	if _, err := c.SnapshotService(ocitest.Snapshotter).Stat(ctx, id); !errdefs.IsNotFound(err) {
		t.Errorf("snapshot %s still exists (err %v)", id, err)
	}
	if left := ocitest.Leftovers(ocitest.Namespace, rt, id); len(left) > 0 {
		t.Errorf("left behind for %s:\n  %s", id, strings.Join(left, "\n  "))
	}
}

func TestContainerdAnswers(t *testing.T) {
	sock := ocitest.Containerd(t)
	if sock != ocitest.Socket() {
		t.Fatalf("socket %s, want %s", sock, ocitest.Socket())
	}
	c := ocitest.Client(t, sock, ocitest.Namespace)
	v, err := c.Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v.Version, "1.") && !strings.HasPrefix(v.Version, "2.") {
		t.Fatalf("containerd version %q", v.Version)
	}
	t.Logf("containerd %s (%s)", v.Version, v.Revision)
	// The script is idempotent: start again and status both succeed.
	g := ocitest.GVisor(t)
	if g.Dir == "" {
		t.Fatalf("no gVisor build: %v", g.Err)
	}
	for _, args := range [][]string{{"start", ocitest.DataDir(), g.Dir}, {"status", ocitest.DataDir()}} {
		out, err := exec.Command("bash", append([]string{ocitest.RepoRoot() + "/scripts/containers/containerd.sh"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("containerd.sh %v: %v\n%s", args, err, out)
		}
	}
	shim := filepath.Join(ocitest.DataDir(), "bin", "containerd-shim-runsc-v1")
	if fi, err := os.Stat(shim); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("gVisor shim wrapper %s: %v", shim, err)
	}
}

func TestPythonPrintUnderEachRuntime(t *testing.T) {
	sock := ocitest.Containerd(t)
	image := ocitest.Image(t, sock)
	c := ocitest.Client(t, sock, ocitest.Namespace)
	if ocitest.Runsc().Binary == "" {
		t.Fatalf("no gVisor build: %v", ocitest.GVisor(t).Err)
	}
	for _, tc := range []struct {
		name string
		rt   ocitest.Runtime
	}{
		{name: "runc", rt: ocitest.Runc()},
		{name: "runsc", rt: ocitest.Runsc()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			id := containerID(t, "py")
			// twice: the first run also starts the runtime's caches
			for i := range 2 {
				res, err := ocitest.Run(ctx, c, tc.rt, ocitest.Namespace, image, id, "python3", "-c", "print(6*7)")
				if err != nil {
					t.Fatal(err)
				}
				if res.ExitCode != 0 || res.Stdout != "42\n" {
					t.Fatalf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
				}
				t.Logf("run %d under %s: create %v, start→exit %v", i+1, tc.name, res.Create.Round(time.Millisecond), res.Run.Round(time.Millisecond))
				assertGone(t, c, tc.rt, id)
			}
		})
	}
}

func TestImageContents(t *testing.T) {
	sock := ocitest.Containerd(t)
	image := ocitest.Image(t, sock)
	c := ocitest.Client(t, sock, ocitest.Namespace)
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode uint32
		want     string
	}{
		{name: "node", args: []string{"node", "-e", "console.log(6*7)"}, want: "42\n"},
		{name: "bash", args: []string{"bash", "-c", "echo $BASH_VERSION | cut -d. -f1"}, want: "5\n"},
		{name: "curl and tls roots", args: []string{"sh", "-c", "curl --version >/dev/null && ls /etc/ssl/certs/ca-certificates.crt"}, want: "/etc/ssl/certs/ca-certificates.crt\n"},
		{name: "procps", args: []string{"sh", "-c", "ps -o comm= -p 1"}, want: "sh\n"},
		{name: "no docs or apt lists", args: []string{"sh", "-c", "find /usr/share/man /usr/share/doc /usr/share/locale /var/lib/apt/lists -type f ! -name copyright ! -name lock | wc -l"}, want: "0\n"},
		{name: "no host details", args: []string{"sh", "-c", "test ! -e /etc/hostname && test ! -s /etc/resolv.conf && grep -c localhost /etc/hosts"}, want: "2\n"},
		{name: "exit code is data", args: []string{"sh", "-c", "exit 3"}, wantCode: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := ocitest.Run(ctx, c, ocitest.Runc(), ocitest.Namespace, image, containerID(t, "img"), tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tc.wantCode || res.Stdout != tc.want {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q", res.ExitCode, res.Stdout, res.Stderr, tc.wantCode, tc.want)
			}
		})
	}
}

func TestRuntimesWorkHere(t *testing.T) {
	sock := ocitest.Containerd(t)
	got := ocitest.Runtimes(t, sock)
	for _, want := range []string{"runc", "runsc"} {
		if !slices.Contains(got, want) {
			t.Errorf("runtime %s does not work here (working: %v)", want, got)
		}
	}
}

// A runsc container whose program does not exist fails in Start, after its
// shim, gofer and sandbox process started and the rootfs was mounted:
// exactly the half-created state DESIGN.md warns about. Cleanup must
// remove it all.
func TestCleanupAfterFailedRunscStart(t *testing.T) {
	sock := ocitest.Containerd(t)
	image := ocitest.Image(t, sock)
	c := ocitest.Client(t, sock, ocitest.Namespace)
	plain := ocitest.Runsc()
	if plain.Binary == "" {
		t.Fatalf("no gVisor build: %v", ocitest.GVisor(t).Err)
	}
	const missing = "/no/such/program"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctx = namespaces.WithNamespace(ctx, ocitest.Namespace)

	t.Run("by hand", func(t *testing.T) {
		id := containerID(t, "bad")
		t.Cleanup(func() { _ = ocitest.Cleanup(context.Background(), c, ocitest.Namespace, plain, id) })
		img, err := c.GetImage(ctx, image)
		if err != nil {
			t.Fatal(err)
		}
		ctr, err := c.NewContainer(ctx, id, containerd.WithImage(img), containerd.WithSnapshotter(ocitest.Snapshotter),
			containerd.WithNewSnapshot(id, img), plain.ContainerOpt(),
			containerd.WithNewSpec(append([]oci.SpecOpts{oci.WithImageConfig(img), oci.WithProcessArgs(missing)}, plain.SpecOpts()...)...))
		if err != nil {
			t.Fatal(err)
		}
		task, err := ctr.NewTask(ctx, cio.NullIO)
		if err == nil {
			err = task.Start(ctx)
		}
		if err == nil {
			t.Fatal("runsc started a program that does not exist; this test needs a start that fails")
		}
		t.Logf("start failed as intended: %v", err)
		left := ocitest.Leftovers(ocitest.Namespace, plain, id)
		if len(left) == 0 {
			t.Fatal("the failed start left nothing behind; the failure mode this test guards against changed")
		}
		t.Logf("before cleanup:\n  %s", strings.Join(left, "\n  "))
		begin := time.Now()
		if err := ocitest.Cleanup(ctx, c, ocitest.Namespace, plain, id); err != nil {
			t.Fatal(err)
		}
		t.Logf("cleanup took %v", time.Since(begin).Round(time.Millisecond))
		assertGone(t, c, plain, id)
	})

	t.Run("through Run", func(t *testing.T) {
		id := containerID(t, "bad")
		// Run wraps a runsc program in sh (see Run), which reports 127.
		res, err := ocitest.Run(ctx, c, plain, ocitest.Namespace, image, id, missing)
		if err == nil && res.ExitCode == 0 {
			t.Fatal("Run of a program that does not exist succeeded")
		}
		assertGone(t, c, plain, id)
	})
}

// Cleanup of a container that is still running kills it.
func TestCleanupRunningContainer(t *testing.T) {
	sock := ocitest.Containerd(t)
	image := ocitest.Image(t, sock)
	c := ocitest.Client(t, sock, ocitest.Namespace)
	for _, rt := range []ocitest.Runtime{ocitest.Runc(), ocitest.Runsc()} {
		t.Run(rt.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ctx = namespaces.WithNamespace(ctx, ocitest.Namespace)
			id := containerID(t, "sleep")
			t.Cleanup(func() { _ = ocitest.Cleanup(context.Background(), c, ocitest.Namespace, rt, id) })
			img, err := c.GetImage(ctx, image)
			if err != nil {
				t.Fatal(err)
			}
			ctr, err := c.NewContainer(ctx, id, containerd.WithImage(img), containerd.WithSnapshotter(ocitest.Snapshotter),
				containerd.WithNewSnapshot(id, img), rt.ContainerOpt(),
				containerd.WithNewSpec(append([]oci.SpecOpts{oci.WithImageConfig(img), oci.WithProcessArgs("sleep", "600")}, rt.SpecOpts()...)...))
			if err != nil {
				t.Fatal(err)
			}
			task, err := ctr.NewTask(ctx, cio.NullIO)
			if err != nil {
				t.Fatal(err)
			}
			if err := task.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if err := ocitest.Cleanup(ctx, c, ocitest.Namespace, rt, id); err != nil {
				t.Fatal(err)
			}
			assertGone(t, c, rt, id)
		})
	}
}
