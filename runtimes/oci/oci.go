// Package oci is the container backend: sandboxes are OCI containers run by
// a real containerd under runc or gVisor (runsc), chosen per sandbox. Each
// sandbox has its own network namespace, cgroup limits and a host directory
// holding the unix socket of hybox-execd, the in-container daemon that
// serves the execd API; the server reaches it over that socket, so control
// traffic never depends on the sandbox's network.
package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hybox-dev/hybox/internal/cleanup"
	"github.com/hybox-dev/hybox/runtimes"
)

// Options configures the backend.
type Options struct {
	// Address is containerd's socket. Required.
	Address string
	// Namespace is the containerd namespace of hybox's containers (default "hybox").
	Namespace string
	// ExecdBinary is the host path of the static hybox-execd binary,
	// mounted read-only into every container. Required.
	ExecdBinary string
	// RuncBinary is the runc binary for "runc" sandboxes ("" = the shim's default).
	RuncBinary string
	// RunscBinary is gVisor's runsc, built from source by
	// scripts/containers/build-gvisor.sh ("" = no "runsc" runtime). "runsc"
	// sandboxes run through gVisor's own shim (containerd-shim-runsc-v1),
	// which must be on containerd's PATH (containerd.sh puts it there).
	RunscBinary string
	// RunscPlatform is gVisor's platform ("" = the first of RunscPlatforms
	// that works here, found by ProbeRunscPlatform when New runs).
	RunscPlatform string
	// CNIPluginDir holds the CNI plugins ("" = no network namespace setup).
	CNIPluginDir string
	// Bridge and Subnet of the sandbox network (defaults hybox0, 10.231.0.0/16).
	Bridge, Subnet string
	// StateDir keeps backend state that is not per sandbox (CNI leases). Required.
	StateDir string
	// ReadyTimeout bounds how long create waits for execd (default 30 s).
	ReadyTimeout time.Duration
	// DefaultMemoryBytes applies when a sandbox asks for none (default 1 GiB).
	DefaultMemoryBytes int64
	// PidsLimit caps processes per sandbox (default 1024).
	PidsLimit int64
	// AllowedHostPaths are the host directories under which volumes may
	// be mounted (after symlinks are resolved); none = no volumes.
	AllowedHostPaths []string
	// Logger; nil = slog.Default().
	Logger *slog.Logger
}

// Validate fills defaults and checks required fields.
//
// # Errors
// When a required field is missing or the execd binary does not exist.
func (o *Options) Validate() error {
	if o.Address == "" || o.ExecdBinary == "" || o.StateDir == "" {
		return errors.New("oci: Address, ExecdBinary and StateDir are required")
	}
	if _, err := os.Stat(o.ExecdBinary); err != nil {
		return fmt.Errorf("oci: hybox-execd binary: %w", err)
	}
	if o.Namespace == "" {
		o.Namespace = "hybox"
	}
	if o.Bridge == "" {
		o.Bridge = "hybox0"
	}
	if o.Subnet == "" {
		o.Subnet = "10.231.0.0/16"
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	if o.DefaultMemoryBytes <= 0 {
		o.DefaultMemoryBytes = 1 << 30
	}
	if o.PidsLimit <= 0 {
		o.PidsLimit = 1024
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// Containerd owns the containerd connection shared by the runc and runsc runtimes.
type Containerd struct {
	opts   Options
	client *containerd.Client
	net    *network

	// runsc is gVisor's configuration (Platform "" = no runsc runtime),
	// written to runscConfig for the shim.
	runsc       RunscConfig
	runscConfig string
	runscErr    error

	mu   sync.Mutex
	live map[string]*Sandbox // by id: sandboxes whose exit is watched
}

// New connects to containerd.
//
// # Errors
// runtimes.ErrUnavailable when containerd does not answer.
func New(ctx context.Context, opts Options) (*Containerd, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c, err := containerd.New(opts.Address, containerd.WithDefaultNamespace(opts.Namespace), containerd.WithTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("%w: containerd at %s: %v", runtimes.ErrUnavailable, opts.Address, err)
	}
	if _, err := c.Version(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("%w: containerd at %s: %v", runtimes.ErrUnavailable, opts.Address, err)
	}
	n, err := newNetwork(opts.CNIPluginDir, opts.Bridge, opts.Subnet, filepath.Join(opts.StateDir, "cni"))
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	b := &Containerd{opts: opts, client: c, net: n, live: map[string]*Sandbox{}}
	if opts.RunscBinary != "" {
		b.runscErr = b.setupRunsc(ctx)
	}
	return b, nil
}

// setupRunsc picks gVisor's platform (probing when none is configured) and
// writes the shim's config; an error leaves the backend without runsc.
func (b *Containerd) setupRunsc(ctx context.Context) error {
	platform := b.opts.RunscPlatform
	if platform == "" {
		if err := os.MkdirAll(b.opts.StateDir, 0o700); err != nil {
			return err
		}
		p, err := ProbeRunscPlatform(ctx, b.opts.RunscBinary, b.opts.ExecdBinary, b.opts.StateDir, RunscPlatforms)
		if err != nil {
			return fmt.Errorf("gVisor (%s) runs on no platform here: %w", b.opts.RunscBinary, err)
		}
		platform = p
	} else if !slices.Contains(RunscPlatforms, platform) {
		return fmt.Errorf("gVisor platform %q is not one hybox runs (%s)", platform, strings.Join(RunscPlatforms, ", "))
	} else if _, err := os.Stat(b.opts.RunscBinary); err != nil {
		return fmt.Errorf("runsc: %w", err)
	}
	cfg := RunscConfig{Binary: b.opts.RunscBinary, Platform: platform}
	path := filepath.Join(b.opts.StateDir, "runsc.toml")
	if err := cfg.WriteFile(path); err != nil {
		return fmt.Errorf("runsc config: %w", err)
	}
	b.runsc, b.runscConfig = cfg, path
	return nil
}

// Runsc reports gVisor's configuration, or why there is no "runsc"
// runtime (nil, nil when none was asked for).
func (b *Containerd) Runsc() (*RunscConfig, error) {
	if b.runsc.Platform == "" {
		return nil, b.runscErr
	}
	cfg := b.runsc
	return &cfg, nil
}

// Close closes the containerd connection; containers keep running.
func (b *Containerd) Close() error { return b.client.Close() }

// Client returns the containerd client (images are managed through it).
func (b *Containerd) Client() *containerd.Client { return b.client }

// Runtimes returns the runtimes this backend can serve: "runc", and
// "runsc" when gVisor is configured and works (see [Containerd.Runsc]).
func (b *Containerd) Runtimes() []runtimes.Runtime {
	out := []runtimes.Runtime{&Runtime{b: b, name: "runc", binary: b.opts.RuncBinary}}
	if b.runsc.Platform != "" {
		out = append(out, &Runtime{b: b, name: "runsc", binary: b.opts.RunscBinary})
	}
	return out
}

func (b *Containerd) ctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, b.opts.Namespace)
}

// Runtime is one OCI runtime (runc or runsc) behind the shared backend.
type Runtime struct {
	b      *Containerd
	name   string
	binary string
}

var _ runtimes.Runtime = (*Runtime)(nil)
var _ runtimes.CodeRunner = (*Sandbox)(nil)

// Name is "runc" or "runsc".
func (r *Runtime) Name() string { return r.name }

// Validate refuses images that are not usable as OCI references and
// volumes outside the allowed host paths.
//
// # Errors
// runtimes.ErrInvalid with a message for the user.
func (r *Runtime) Validate(spec runtimes.Spec) error {
	if strings.HasPrefix(spec.Image, "wasm://") {
		return fmt.Errorf("%w: %s is a wasm image; use the wasm runtime", runtimes.ErrInvalid, spec.Image)
	}
	_, err := r.b.volumeMounts(spec.Volumes, true)
	return err
}

// Paths inside the container.
const (
	execdMountDir  = "/.hybox"
	execdInBox     = execdMountDir + "/bin/hybox-execd"
	runMountDir    = "/run/hybox"
	execdSocketBox = runMountDir + "/execd.sock"
)

// host paths of a sandbox.
func runDir(spec runtimes.Spec) string     { return filepath.Join(spec.Dir, "run") }
func socketPath(spec runtimes.Spec) string { return filepath.Join(runDir(spec), "execd.sock") }
func logPath(spec runtimes.Spec) string    { return filepath.Join(spec.Dir, "container.log") }
func addrPath(spec runtimes.Spec) string   { return filepath.Join(spec.Dir, "address") }

// Create starts a container and waits until its execd answers. On any
// failure everything created so far is removed.
func (r *Runtime) Create(ctx context.Context, spec runtimes.Spec) (runtimes.Sandbox, error) {
	sb, err := r.create(ctx, spec, false)
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// create makes the container of spec; a pooled one (a warm-pool member,
// see Warm) gets no entrypoint and its egress is not enforced yet.
func (r *Runtime) create(ctx context.Context, spec runtimes.Spec, pooled bool) (*Sandbox, error) {
	ctx = r.b.ctx(ctx)
	volumes, err := r.b.volumeMounts(spec.Volumes, false)
	if err != nil {
		return nil, err
	}
	img, err := r.b.client.GetImage(ctx, spec.Image)
	if errdefs.IsNotFound(err) {
		// A short name ("python:3") is stored under its full reference.
		if full := normalizeRef(spec.Image); full != spec.Image {
			img, err = r.b.client.GetImage(ctx, full)
		}
	}
	if errdefs.IsNotFound(err) {
		pulled, perr := r.b.Pull(ctx, spec.Image, spec.ImageAuth)
		if perr != nil {
			return nil, fmt.Errorf("%w: image %s is not present and could not be pulled (%v); import it with `hybox image import FILE`", runtimes.ErrInvalid, spec.Image, perr)
		}
		img, err = r.b.client.GetImage(ctx, pulled.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Image, err)
	}
	// A failed create undoes what it made, newest first; the goroutines it
	// started are joined before anything is removed.
	cu := cleanup.Make(func() {
		if err := r.Destroy(context.WithoutCancel(ctx), spec); err != nil {
			r.b.opts.Logger.Warn("cleanup after failed create", "id", spec.ID, "err", err)
		}
	})
	defer cu.Clean()
	if err := r.b.mark(spec.ID); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(runDir(spec), 0o755); err != nil {
		return nil, fmt.Errorf("sandbox directory: %w", err)
	}
	begin := time.Now()
	stages := make([]any, 0, 12)
	stage := func(name string) {
		stages = append(stages, name, time.Since(begin).Round(time.Millisecond))
	}
	if err := r.b.net.create(ctx, spec.ID); err != nil {
		return nil, err
	}
	// The egress policy is installed in the namespace while the image is
	// prepared, and joined before the workload starts.
	enforced := make(chan error, 1)
	if spec.Egress != nil && r.b.net.enabled && !pooled {
		go func() { enforced <- spec.Egress.Enforce(ctx, r.b.net.nsPath(spec.ID)) }()
	} else {
		enforced <- nil
	}
	waitEnforced := sync.OnceValue(func() error { return <-enforced })
	cu.Add(func() { waitEnforced() })
	// Attaching the network (CNI) runs while the container starts; it is
	// joined before Create returns, and before any cleanup.
	type attached struct {
		addr netip.Addr
		err  error
	}
	netc := make(chan attached, 1)
	go func() {
		a, err := r.b.net.attach(ctx, spec.ID)
		netc <- attached{a, err}
	}()
	waitNet := sync.OnceValue(func() attached { return <-netc })
	cu.Add(func() { waitNet() })
	stage("netns")
	if unpacked, err := img.IsUnpacked(ctx, "overlayfs"); err == nil && !unpacked {
		if err := img.Unpack(ctx, "overlayfs"); err != nil {
			return nil, fmt.Errorf("unpack %s: %w", spec.Image, err)
		}
	}
	specOpts, err := r.specOpts(spec, img, volumes, pooled)
	if err != nil {
		return nil, err
	}
	runtimeOpt := containerd.WithRuntime("io.containerd.runc.v2", &options.Options{BinaryName: r.binary})
	if r.name == "runsc" {
		runtimeOpt = RunscContainerOpts(r.b.runscConfig)
		specOpts = append(specOpts, oci.WithAnnotations(RunscSandboxAnnotations()))
	}
	c, err := r.b.client.NewContainer(ctx, spec.ID,
		containerd.WithImage(img),
		containerd.WithSnapshotter("overlayfs"),
		containerd.WithNewSnapshot(spec.ID, img),
		runtimeOpt,
		containerd.WithNewSpec(specOpts...),
		containerd.WithContainerLabels(map[string]string{"hybox.io/runtime": r.name}),
	)
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	stage("container")
	logTo := cio.LogFile(logPath(spec))
	if r.name == "runsc" {
		logTo = runscLogFile(logPath(spec))
	}
	task, err := c.NewTask(ctx, logTo)
	if err != nil {
		return nil, fmt.Errorf("create task (%s): %w", r.name, err)
	}
	stage("task")
	if err := waitEnforced(); err != nil {
		return nil, err
	}
	stage("egress")
	sb := newSandbox(r, spec, netip.Addr{})
	// Wait before Start, so that even an exit at once is seen.
	if err := sb.watch(task); err != nil {
		return nil, err
	}
	cu.Add(sb.unwatch)
	if err := task.Start(ctx); err != nil {
		return nil, fmt.Errorf("start task (%s): %w", r.name, err)
	}
	stage("start")
	if err := sb.waitReady(ctx, r.b.opts.ReadyTimeout); err != nil {
		return nil, err
	}
	stage("ready")
	net := waitNet()
	if net.err != nil {
		return nil, net.err
	}
	if net.addr.IsValid() {
		if err := os.WriteFile(addrPath(spec), []byte(net.addr.String()), 0o644); err != nil {
			return nil, err
		}
	}
	sb.addr = net.addr
	stage("network")
	cu.Release()
	r.b.opts.Logger.Debug("sandbox created", append([]any{"id", spec.ID, "runtime", r.name}, stages...)...)
	return sb, nil
}

// specOpts builds the container's OCI spec: hybox-execd as PID 1 starting
// the user's entrypoint, the execd mounts, the sandbox's network
// namespace, limits and a reduced privilege set.
func (r *Runtime) specOpts(spec runtimes.Spec, img containerd.Image, volumes []specs.Mount, pooled bool) ([]oci.SpecOpts, error) {
	args := []string{execdInBox, "--listen-unix", execdSocketBox, "--listen-tcp", "0.0.0.0:44772", "--root", "/"}
	if pooled {
		args = append(args, "--pooled")
	} else {
		args = append(append(args, "--"), spec.Entrypoint...)
	}
	env := make([]string, 0, len(spec.Env))
	var egressMounts []specs.Mount
	if spec.Egress != nil && r.b.net.enabled {
		if !pooled {
			for k, v := range egressEnv(spec) {
				env = append(env, k+"="+v)
			}
		}
		var err error
		if egressMounts, err = writeEgressFiles(spec); err != nil {
			return nil, err
		}
	}
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	mem := spec.MemoryBytes
	if mem <= 0 {
		mem = r.b.opts.DefaultMemoryBytes
	}
	opts := []oci.SpecOpts{
		oci.WithImageConfig(img),
		oci.WithProcessArgs(args...),
		oci.WithEnv(env),
		oci.WithHostname("sandbox"),
		oci.WithMounts([]specs.Mount{
			{Destination: execdInBox, Type: "bind", Source: r.b.opts.ExecdBinary, Options: []string{"rbind", "ro", "nosuid", "nodev"}},
			{Destination: runMountDir, Type: "bind", Source: runDir(spec), Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}},
			// The sandbox's own cgroup, read-only: execd reads its
			// metrics, limits and OOM counters there.
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		}),
		oci.WithMounts(egressMounts),
		oci.WithMounts(volumes),
		oci.WithCgroup(cgroupPath(r.b.opts.Namespace, spec.ID)),
		oci.WithMemoryLimit(uint64(mem)),
		oci.WithMemorySwap(mem), // memory+swap = memory: no swap
		oci.WithPidsLimit(r.b.opts.PidsLimit),
		oci.WithNoNewPrivileges,
		oci.WithCapabilities(defaultCaps),
		seccomp.WithDefaultProfile(),
	}
	if spec.CPUMillis > 0 {
		const period = 100000
		opts = append(opts, oci.WithCPUCFS(spec.CPUMillis*period/1000, period))
	}
	if r.b.net.enabled {
		opts = append(opts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: r.b.net.nsPath(spec.ID)}))
	}
	return opts, nil
}

// defaultCaps is Docker's default set minus NET_RAW, MKNOD and AUDIT_WRITE.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_SETGID", "CAP_SETUID",
	"CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL",
}

// Restore re-attaches a running container after a server restart.
func (r *Runtime) Restore(ctx context.Context, spec runtimes.Spec) (runtimes.Sandbox, error) {
	ctx = r.b.ctx(ctx)
	c, err := r.b.client.LoadContainer(ctx, spec.ID)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: container %s", runtimes.ErrNotFound, spec.ID)
		}
		return nil, err
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: task of %s: %v", runtimes.ErrNotFound, spec.ID, err)
	}
	st, err := task.Status(ctx)
	if err != nil {
		return nil, err
	}
	var addr netip.Addr
	if b, err := os.ReadFile(addrPath(spec)); err == nil {
		addr, _ = netip.ParseAddr(strings.TrimSpace(string(b)))
	}
	if spec.Egress != nil && r.b.net.enabled {
		if err := spec.Egress.Enforce(ctx, r.b.net.nsPath(spec.ID)); err != nil {
			return nil, err
		}
	}
	sb := newSandbox(r, spec, addr)
	if err := sb.watch(task); err != nil {
		return nil, err
	}
	if st.Status == containerd.Paused {
		sb.setPaused(true)
		return sb, nil
	}
	if err := sb.waitReady(ctx, r.b.opts.ReadyTimeout); err != nil {
		sb.unwatch()
		return nil, err
	}
	return sb, nil
}

// Destroy kills the task and removes the container, its snapshot, its
// network namespace and its host directory contents.
func (r *Runtime) Destroy(ctx context.Context, spec runtimes.Spec) error {
	ctx = r.b.ctx(ctx)
	// An exit caused by Destroy is not the sandbox ending on its own.
	r.b.unwatch(spec.ID)
	err := r.b.remove(ctx, spec.ID)
	if err == nil {
		err = r.b.unmark(spec.ID)
	}
	if spec.Dir != "" {
		err = errors.Join(err, os.RemoveAll(runDir(spec)))
	}
	return err
}

// remove deletes the task, the container, its snapshot and its network.
func (b *Containerd) remove(ctx context.Context, id string) error {
	var errs []error
	c, err := b.client.LoadContainer(ctx, id)
	switch {
	case err == nil:
		if task, err := c.Task(ctx, nil); err == nil {
			st, serr := task.Status(ctx)
			if serr == nil && st.Status == containerd.Paused {
				_ = task.Resume(ctx)
			}
			// Kill only a live task: runsc answers a kill of an exited
			// task with an error the shim does not map to "not found".
			if serr == nil && st.Status != containerd.Stopped {
				_ = task.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll)
				if ch, err := task.Wait(ctx); err == nil {
					select {
					case <-ch:
					case <-time.After(5 * time.Second):
					}
				}
			}
			if _, err := task.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
				if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("delete task: %w", err))
				}
			}
		}
		if err := c.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete container: %w", err))
		}
	case !errdefs.IsNotFound(err):
		errs = append(errs, err)
	}
	// A snapshot may outlive a container whose creation failed half way.
	if err := b.client.SnapshotService(snapshotter).Remove(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("remove snapshot: %w", err))
	}
	if err := b.net.teardown(ctx, id); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// egressHostFile is where the host keeps the egress file of spec that
// is mounted at path inside the sandbox.
func egressHostFile(spec runtimes.Spec, path string) string {
	sum := sha256.Sum256([]byte(path))
	return filepath.Join(spec.Dir, "egress", hex.EncodeToString(sum[:6])+"-"+filepath.Base(path))
}

// egressEnv is the environment the egress controller gives the sandbox,
// without the variables the sandbox sets itself.
func egressEnv(spec runtimes.Spec) map[string]string {
	out := map[string]string{}
	for k, v := range spec.Egress.Env() {
		if _, ok := spec.Env[k]; !ok {
			out[k] = v
		}
	}
	return out
}

// writeEgressFiles writes the files the egress controller gives the
// sandbox (its resolv.conf, a trust store with its CA) into the sandbox's
// directory and returns read-only bind mounts for them.
func writeEgressFiles(spec runtimes.Spec) ([]specs.Mount, error) {
	files := spec.Egress.Files()
	if len(files) == 0 {
		return nil, nil
	}
	dir := filepath.Join(spec.Dir, "egress")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("egress files: %w", err)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	mounts := make([]specs.Mount, 0, len(paths))
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("egress file %q: not an absolute path", p)
		}
		src := egressHostFile(spec, p)
		if err := os.WriteFile(src, files[p], 0o644); err != nil {
			return nil, fmt.Errorf("egress files: %w", err)
		}
		mounts = append(mounts, specs.Mount{Destination: p, Type: "bind", Source: src,
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	return mounts, nil
}
