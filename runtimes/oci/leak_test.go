package oci_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tasks "github.com/containerd/containerd/api/services/tasks/v1"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"

	"github.com/hybox-dev/hybox/runtimes"
	hyoci "github.com/hybox-dev/hybox/runtimes/oci"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

// leftovers lists what is still on the machine of sandbox id: containerd
// records, the shim and runtime state (ocitest.Leftovers), mounts naming
// it, its network namespace, address leases, cgroups, and the host
// directories of spec and of the backend.
func leftovers(t testing.TB, c *containerd.Client, spec runtimes.Spec, stateDir string) []string {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), ocitest.Namespace)
	id := spec.ID
	var out []string
	if _, err := c.LoadContainer(ctx, id); !errdefs.IsNotFound(err) {
		out = append(out, "container record")
	}
	if _, err := c.TaskService().Get(ctx, &tasks.GetRequest{ContainerID: id}); err == nil {
		out = append(out, "task")
	}
	if _, err := c.SnapshotService(ocitest.Snapshotter).Stat(ctx, id); !errdefs.IsNotFound(err) {
		out = append(out, "snapshot")
	}
	out = append(out, ocitest.Leftovers(ocitest.Namespace, ocitest.Runc(), id)...)
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			if strings.Contains(line, id) {
				out = append(out, "mount: "+line)
			}
		}
	}
	sum := sha256.Sum256([]byte(id))
	if _, err := os.Stat(filepath.Join("/run/netns", "hybox-"+hex.EncodeToString(sum[:8]))); err == nil {
		out = append(out, "network namespace")
	}
	leases, _ := filepath.Glob(filepath.Join(stateDir, "cni", "*", "*"))
	for _, l := range leases {
		if b, err := os.ReadFile(l); err == nil && strings.Contains(string(b), id) {
			out = append(out, "address lease "+l)
		}
	}
	for _, ctl := range []string{"memory", "pids", "cpu"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctl, ocitest.Namespace, id)); err == nil {
			out = append(out, "cgroup "+ctl)
		}
	}
	if spec.Dir != "" {
		if _, err := os.Stat(filepath.Join(spec.Dir, "run")); err == nil {
			out = append(out, "host run directory")
		}
	}
	if _, err := os.Stat(filepath.Join(stateDir, "sandboxes", id)); err == nil {
		out = append(out, "creation marker")
	}
	return out
}

// TestNoLeaks runs 50 create/destroy cycles and finds nothing left.
func TestNoLeaks(t *testing.T) {
	if testing.Short() {
		t.Skip("50 container cycles")
	}
	stateDir := t.TempDir()
	b := newBackend(t, func(o *hyoci.Options) { o.StateDir = stateDir })
	rt := runtimeNamed(t, b, "runc")
	c := ocitest.Client(t, ocitest.Socket(), ocitest.Namespace)
	ctx := context.Background()
	const cycles = 50
	var specs []runtimes.Spec
	begin := time.Now()
	for i := 0; i < cycles; i++ {
		spec := testSpec(t, "leak")
		specs = append(specs, spec)
		sb, err := rt.Create(ctx, spec)
		if err != nil {
			t.Fatalf("cycle %d: create: %v", i, err)
		}
		if i%10 == 0 { // now and then, really use it
			if o := newExecClient(t, sb).run("echo ok"); o.Stdout != "ok" {
				t.Fatalf("cycle %d: %+v", i, o)
			}
		}
		_ = sb.Close(ctx)
		if err := rt.Destroy(ctx, spec); err != nil {
			t.Fatalf("cycle %d: destroy: %v", i, err)
		}
	}
	t.Logf("%d create/destroy cycles in %v", cycles, time.Since(begin).Round(time.Millisecond))
	for _, spec := range specs {
		if left := leftovers(t, c, spec, stateDir); len(left) > 0 {
			t.Errorf("%s left: %v", spec.ID, left)
		}
	}
}

// TestSweep removes sandboxes the server has no record of: one made by an
// earlier backend (a server that crashed), and a container made behind
// the backend's back; a kept sandbox survives.
func TestSweep(t *testing.T) {
	stateDir := t.TempDir()
	ctx := context.Background()
	first := newBackend(t, func(o *hyoci.Options) { o.StateDir = stateDir })
	rt := runtimeNamed(t, first, "runc")
	orphan := testSpec(t, "sweep-orphan")
	if _, err := rt.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	kept := testSpec(t, "sweep-kept")
	mustCreate(t, rt, kept)

	// A bare container with a running task, straight through containerd.
	c := ocitest.Client(t, ocitest.Socket(), ocitest.Namespace)
	nctx := namespaces.WithNamespace(ctx, ocitest.Namespace)
	bare := testSpec(t, "sweep-bare")
	bare.Dir = ""
	img, err := c.GetImage(nctx, ocitest.ImageName)
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := c.NewContainer(nctx, bare.ID, containerd.WithImage(img), containerd.WithSnapshotter(ocitest.Snapshotter),
		containerd.WithNewSnapshot(bare.ID, img), ocitest.Runc().ContainerOpt(),
		containerd.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("sleep", "infinity")))
	if err != nil {
		t.Fatal(err)
	}
	task, err := ctr.NewTask(nctx, cio.NullIO)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(nctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ocitest.Cleanup(ctx, c, ocitest.Namespace, ocitest.Runc(), bare.ID) })

	// The restarted server knows only the kept sandbox; everything else in
	// the namespace belongs to other tests and is kept too.
	second := newBackend(t, func(o *hyoci.Options) { o.StateDir = stateDir })
	mine := map[string]bool{orphan.ID: true, bare.ID: true}
	if err := second.Sweep(ctx, func(id string) bool { return !mine[id] }); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	for _, spec := range []runtimes.Spec{orphan, bare} {
		spec.Dir = "" // the server removes its own directories
		if left := leftovers(t, c, spec, stateDir); len(left) > 0 {
			t.Errorf("%s left after sweep: %v", spec.ID, left)
		}
	}
	sb, err := runtimeNamed(t, second, "runc").Restore(ctx, kept)
	if err != nil {
		t.Fatalf("the kept sandbox is gone: %v", err)
	}
	if o := newExecClient(t, sb).run("echo kept"); o.Stdout != "kept" {
		t.Fatalf("kept sandbox: %+v", o)
	}
	_ = sb.Close(ctx)
}

// TestNoLeaksPool: pool members warmed, some claimed (personalised with
// env, other limits and an entrypoint) and used, all destroyed: nothing
// is left, as for cold sandboxes.
func TestNoLeaksPool(t *testing.T) {
	if testing.Short() {
		t.Skip("container cycles")
	}
	stateDir := t.TempDir()
	b := newBackend(t, func(o *hyoci.Options) { o.StateDir = stateDir })
	rt := runtimeNamed(t, b, "runc")
	pooler := rt.(runtimes.Pooler)
	c := ocitest.Client(t, ocitest.Socket(), ocitest.Namespace)
	ctx := context.Background()
	const cycles = 10
	var specs []runtimes.Spec
	for i := 0; i < cycles; i++ {
		spec := testSpec(t, "leakpool")
		specs = append(specs, spec)
		sb, err := pooler.Warm(ctx, spec)
		if err != nil {
			t.Fatalf("cycle %d: warm: %v", i, err)
		}
		if i%2 == 0 {
			claim := spec
			claim.Env = map[string]string{"CYCLE": "claimed"}
			claim.Entrypoint = []string{"sleep", "infinity"}
			claim.MemoryBytes = 200 << 20
			if err := pooler.Claim(ctx, sb, claim); err != nil {
				t.Fatalf("cycle %d: claim: %v", i, err)
			}
			if o := newExecClient(t, sb).run("echo $CYCLE"); o.Stdout != "claimed" {
				t.Fatalf("cycle %d: %+v", i, o)
			}
			if err := pooler.Claim(ctx, sb, claim); err == nil {
				t.Fatalf("cycle %d: a second claim of one member succeeded", i)
			}
		}
		_ = sb.Close(ctx)
		if err := rt.Destroy(ctx, spec); err != nil {
			t.Fatalf("cycle %d: destroy: %v", i, err)
		}
	}
	for _, spec := range specs {
		if left := leftovers(t, c, spec, stateDir); len(left) > 0 {
			t.Errorf("%s left: %v", spec.ID, left)
		}
	}
}
