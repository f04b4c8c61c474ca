package ocitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	ocispec "github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"

	"github.com/hybox-dev/hybox/runtimes/oci"
)

// RuncShim is the containerd runtime runc runs under.
const RuncShim = "io.containerd.runc.v2"

// Runtime is an OCI runtime as a containerd shim runs it.
type Runtime struct {
	// Name is "runc" or "runsc".
	Name string
	// Shim is the containerd runtime type: [RuncShim] or [oci.RunscShim].
	Shim string
	// Binary is the runtime binary.
	Binary string
	// Root is the runtime's state root; the shim appends the namespace.
	Root string
	// Config is gVisor's shim config (runsc.toml), for [oci.RunscShim].
	Config string
}

// Runc is Debian's runc through the runc shim.
func Runc() Runtime {
	return Runtime{Name: "runc", Shim: RuncShim, Binary: "/usr/sbin/runc", Root: "/run/containerd/runc"}
}

// Runsc is gVisor's runsc of [GVisor] through gVisor's shim, with the
// config [GVisor] wrote; Binary is "" until [GVisor] (or [Containerd])
// found a build.
func Runsc() Runtime {
	return Runtime{Name: "runsc", Shim: oci.RunscShim, Binary: gvisorRes.Runsc(), Root: oci.RunscRoot, Config: RunscConfig()}
}

// ContainerOpt selects this runtime for a new container.
func (r Runtime) ContainerOpt() containerd.NewContainerOpts {
	if r.Shim == oci.RunscShim {
		return oci.RunscContainerOpts(r.Config)
	}
	return containerd.WithRuntime(r.Shim, &options.Options{BinaryName: r.Binary, Root: r.Root})
}

// SpecOpts are what the runtime needs in a container's spec.
func (r Runtime) SpecOpts() []ocispec.SpecOpts {
	if r.Shim == oci.RunscShim {
		return []ocispec.SpecOpts{ocispec.WithAnnotations(oci.RunscSandboxAnnotations())}
	}
	return nil
}

// RunResult is the outcome of [Run].
type RunResult struct {
	Stdout, Stderr string
	ExitCode       uint32
	// Create is NewContainer plus NewTask (the runtime's create); Run is
	// task start to exit.
	Create, Run time.Duration
}

// Run creates container id from image in the client's namespace under rt,
// runs args to completion (bounded by ctx) and removes everything it made
// with [Cleanup], also when it fails half-way. A non-zero exit code is a
// result, not an error.
//
// # Errors
//
// Errors of creating or starting the container (a runtime that does not
// work here fails in NewTask or Start), ctx's error, and cleanup errors.
func Run(ctx context.Context, c *containerd.Client, rt Runtime, namespace, image, id string, args ...string) (res RunResult, err error) {
	ctx = namespaceCtx(ctx, namespace)
	img, err := c.GetImage(ctx, image)
	if err != nil {
		return res, fmt.Errorf("image %s: %w", image, err)
	}
	if rt.Shim == oci.RunscShim {
		// gVisor's shim learns a container's exit status from a `runsc
		// wait` it starts after the start; when the container has already
		// exited by then, the status is lost (exit 128, "sandbox no longer
		// running and its exit status is unavailable"). hybox's own init
		// (hybox-execd) lives as long as its sandbox; a one-shot run here
		// lives at least 300 ms.
		args = append([]string{"/bin/sh", "-c", `"$@"; s=$?; sleep 0.3; exit $s`, "sh"}, args...)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := Cleanup(cctx, c, namespace, rt, id); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup %s: %w", id, cerr))
		}
	}()
	begin := time.Now()
	ctr, err := c.NewContainer(ctx, id,
		containerd.WithImage(img),
		containerd.WithSnapshotter(Snapshotter),
		containerd.WithNewSnapshot(id, img),
		rt.ContainerOpt(),
		containerd.WithNewSpec(append([]ocispec.SpecOpts{ocispec.WithImageConfig(img), ocispec.WithProcessArgs(args...)}, rt.SpecOpts()...)...),
	)
	if err != nil {
		return res, fmt.Errorf("new container: %w", err)
	}
	var stdout, stderr bytes.Buffer
	task, err := ctr.NewTask(ctx, cio.NewCreator(cio.WithStreams(nil, &stdout, &stderr)))
	if err != nil {
		return res, fmt.Errorf("new task (%s): %w", rt.Name, err)
	}
	res.Create = time.Since(begin)
	exitC, err := task.Wait(ctx)
	if err != nil {
		return res, err
	}
	begin = time.Now()
	if err := task.Start(ctx); err != nil {
		return res, fmt.Errorf("start task (%s): %w", rt.Name, err)
	}
	select {
	case st := <-exitC:
		res.Run = time.Since(begin)
		code, _, err := st.Result()
		if err != nil {
			return res, err
		}
		res.ExitCode = code
	case <-ctx.Done():
		return res, ctx.Err()
	}
	task.IO().Wait() // all output copied
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	return res, nil
}

// Cleanup removes everything container id may have left, whether its
// create succeeded or not, in three stages:
//
//  1. through containerd: kill a running task, delete it, delete the
//     container with its snapshot;
//  2. by force, for what containerd could not remove (a failed runsc start
//     leaves a task in state "created" that neither kill nor delete
//     moves): `runtime --root ROOT/NS delete --force ID`, then SIGKILL to
//     the shim, sandbox and gofer processes still naming id, then
//     containerd again (it notices the dead shim and drops the task);
//  3. on the host: unmount what is still mounted under the bundle and
//     remove the bundle and the runtime's state files.
//
// Missing pieces are not errors; [Leftovers] reports what is still there.
//
// # Errors
//
// The joined errors of the final attempt at each piece that still exists.
func Cleanup(ctx context.Context, c *containerd.Client, namespace string, rt Runtime, id string) error {
	ctx = namespaceCtx(ctx, namespace)
	if removeRecords(ctx, c, id) == nil && len(processes(namespace, id)) == 0 {
		return hostCleanup(namespace, rt, id)
	}
	if rt.Binary != "" && rt.Root != "" {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = exec.CommandContext(dctx, rt.Binary, "--root", filepath.Join(rt.Root, namespace), "delete", "--force", id).Run()
		cancel()
	}
	var errs []error
	for _, p := range processes(namespace, id) {
		if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d (%s): %w", p.pid, p.cmd, err))
		}
	}
	// containerd reaps the dead shim and runs the shim's own "delete"
	// for the bundle; retry until the records go.
	var err error
	for i := 0; i < 50; i++ {
		if err = removeRecords(ctx, c, id); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return errors.Join(append(errs, err, ctx.Err())...)
		case <-time.After(100 * time.Millisecond):
		}
	}
	errs = append(errs, err)
	waitGone(ctx, namespace, id)
	errs = append(errs, hostCleanup(namespace, rt, id))
	return errors.Join(errs...)
}

// removeRecords deletes task, container and snapshot id through
// containerd; what does not exist is fine.
func removeRecords(ctx context.Context, c *containerd.Client, id string) error {
	var errs []error
	keep := func(err error) {
		if err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	ctr, err := c.LoadContainer(ctx, id)
	if err == nil {
		if task, err := ctr.Task(ctx, nil); err == nil {
			keep(deleteTask(ctx, task))
		} else {
			keep(err)
		}
		keep(ctr.Delete(ctx, containerd.WithSnapshotCleanup))
	} else {
		keep(err)
	}
	keep(c.SnapshotService(Snapshotter).Remove(ctx, id))
	return errors.Join(errs...)
}

// deleteTask kills the task when it still runs and deletes it. It does not
// use WithProcessKill: runsc answers a kill of an exited or never started
// container with an error the shim does not map to "not found", and the
// delete would fail.
func deleteTask(ctx context.Context, task containerd.Task) error {
	st, err := task.Status(ctx)
	if err != nil {
		return err
	}
	switch st.Status {
	case containerd.Paused, containerd.Pausing:
		_ = task.Resume(ctx)
		fallthrough
	case containerd.Running:
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		exitC, err := task.Wait(wctx)
		if err != nil {
			return err
		}
		_ = task.Kill(wctx, syscall.SIGKILL, containerd.WithKillAll)
		select {
		case <-exitC:
		case <-wctx.Done():
			return fmt.Errorf("task %s did not exit after SIGKILL: %w", task.ID(), wctx.Err())
		}
	}
	_, err = task.Delete(ctx)
	return err
}

// hostCleanup unmounts and removes what is left of id on the host.
func hostCleanup(namespace string, rt Runtime, id string) error {
	var errs []error
	bundle := bundleDir(namespace, id)
	for _, m := range mountsUnder(bundle) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	if len(mountsUnder(bundle)) == 0 {
		if err := os.RemoveAll(bundle); err != nil {
			errs = append(errs, err)
		}
	}
	for _, m := range runtimeState(rt, namespace, id) {
		if err := os.RemoveAll(m); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists what of container id is still on the machine besides
// containerd's records: processes naming it, mounts and files under its
// bundle, and runtime state under rt.Root. Empty means clean.
func Leftovers(namespace string, rt Runtime, id string) []string {
	var out []string
	for _, p := range processes(namespace, id) {
		out = append(out, fmt.Sprintf("process %d: %s", p.pid, p.cmd))
	}
	bundle := bundleDir(namespace, id)
	for _, m := range mountsUnder(bundle) {
		out = append(out, "mount "+m)
	}
	if _, err := os.Stat(bundle); err == nil {
		out = append(out, "bundle "+bundle)
	}
	for _, m := range runtimeState(rt, namespace, id) {
		out = append(out, "runtime state "+m)
	}
	return out
}

// Runtimes reports which OCI runtimes work on this machine ("runc",
// "runsc"), by running /bin/true from the test image under each once per
// process; it logs why a runtime does not work. It needs [Containerd] and
// [Image], and skips like them.
func Runtimes(t testing.TB, socket string) []string {
	t.Helper()
	image := Image(t, socket)
	rtMu.Lock()
	defer rtMu.Unlock()
	if rtWorking != nil {
		return rtWorking
	}
	c := Client(t, socket, Namespace)
	working := []string{}
	for _, rt := range []Runtime{Runc(), Runsc()} {
		if _, err := os.Stat(rt.Binary); err != nil {
			t.Logf("runtime %s: %v", rt.Name, err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := Run(ctx, c, rt, Namespace, image, fmt.Sprintf("ocienv-smoke-%s-%d", rt.Name, os.Getpid()), "/bin/true")
		cancel()
		switch {
		case err != nil:
			t.Logf("runtime %s does not work here: %v", rt.Name, err)
		case res.ExitCode != 0:
			t.Logf("runtime %s: /bin/true exited %d: %s", rt.Name, res.ExitCode, res.Stderr)
		default:
			working = append(working, rt.Name)
		}
	}
	rtWorking = working
	return working
}

var (
	rtMu      sync.Mutex
	rtWorking []string
)

type proc struct {
	pid int
	cmd string
}

// processes finds processes whose command line names container id: the
// runc shim started for (namespace, id), and runsc's sandbox and gofer,
// whose arguments end with the id.
func processes(namespace, id string) []proc {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var out []proc
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if namesContainer(args, namespace, id) {
			out = append(out, proc{pid: pid, cmd: strings.Join(args, " ")})
		}
	}
	return out
}

func namesContainer(args []string, namespace, id string) bool {
	base := filepath.Base(args[0])
	switch {
	case strings.HasPrefix(base, "containerd-shim"):
		var ns, cid string
		for i := 1; i+1 < len(args); i++ {
			switch args[i] {
			case "-namespace", "--namespace":
				ns = args[i+1]
			case "-id", "--id":
				cid = args[i+1]
			}
		}
		return ns == namespace && cid == id
	case strings.HasPrefix(base, "runsc"):
		// runsc-sandbox, runsc-gofer and runsc itself take the container
		// id as their last argument.
		return args[len(args)-1] == id
	}
	return false
}

// waitGone waits (at most 5 s) until no process of container id is left.
// Gone means gone for 200 ms: after the records go, containerd may still
// start the shim's own "delete" for the bundle (a clean-clone run saw one
// appear just after the shim's other processes had ended).
func waitGone(ctx context.Context, namespace, id string) {
	quiet := 0
	for i := 0; i < 250 && quiet < 10; i++ {
		if len(processes(namespace, id)) == 0 {
			quiet++
		} else {
			quiet = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// bundleDir is where containerd's runc shim keeps container id's bundle.
func bundleDir(namespace, id string) string {
	return filepath.Join(StateDir(), "io.containerd.runtime.v2.task", namespace, id)
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func namespaceCtx(ctx context.Context, namespace string) context.Context {
	return namespaces.WithNamespace(ctx, namespace)
}

// runtimeState lists the runtime's state entries for id under rt.Root/NS:
// runc's directory ID, runsc's files ID_sandbox:ID.state and .lock.
func runtimeState(rt Runtime, namespace, id string) []string {
	if rt.Root == "" {
		return nil
	}
	dir := filepath.Join(rt.Root, namespace)
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if n := e.Name(); n == id || strings.HasPrefix(n, id+"_sandbox:") {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out
}
