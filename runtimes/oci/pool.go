package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

var _ runtimes.Pooler = (*Runtime)(nil)

// Warm implements runtimes.Pooler: the container of spec with hybox-execd
// started --pooled (unix socket only, no entrypoint). Volumes cannot be
// added to a running container, so a member has none.
func (r *Runtime) Warm(ctx context.Context, spec runtimes.Spec) (runtimes.Sandbox, error) {
	if len(spec.Volumes) > 0 {
		return nil, fmt.Errorf("%w: a pool member cannot have volumes", runtimes.ErrInvalid)
	}
	sb, err := r.create(ctx, spec, true)
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// UpdatesLimits implements runtimes.Pooler: runc updates the cgroup of a
// running container; under gVisor the sandbox's own view of its limits is
// fixed at boot, so a claim there must ask for the member's limits.
func (r *Runtime) UpdatesLimits() bool { return r.name == "runc" }

// RestoreWarm implements runtimes.Pooler.
func (r *Runtime) RestoreWarm(ctx context.Context, spec runtimes.Spec) (runtimes.Sandbox, error) {
	spec.Egress = nil // nothing of a member's is enforced
	sbi, err := r.Restore(ctx, spec)
	if err != nil {
		return nil, err
	}
	sb := sbi.(*Sandbox)
	var st execd.ClaimStatus
	if err := sb.claimCall(ctx, http.MethodGet, execd.ClaimPath, nil, &st); err != nil {
		sb.unwatch()
		return nil, err
	}
	if st.State != execd.ClaimIdle {
		sb.unwatch()
		return nil, fmt.Errorf("pool member %s is %s, not idle", spec.ID, st.State)
	}
	return sb, nil
}

// Claim implements runtimes.Pooler: reserve, enforce the egress policy,
// set the limits, then give execd the environment, files and entrypoint.
// Nothing of the user's runs before its policy is in force.
func (r *Runtime) Claim(ctx context.Context, member runtimes.Sandbox, spec runtimes.Spec) error {
	sb, ok := member.(*Sandbox)
	if !ok || sb.spec.ID != spec.ID {
		return fmt.Errorf("%w: not a pool member of this runtime for %s", runtimes.ErrInvalid, spec.ID)
	}
	if len(spec.Volumes) > 0 {
		return fmt.Errorf("%w: a pool member cannot take volumes", runtimes.ErrInvalid)
	}
	if !r.UpdatesLimits() && !r.sameLimits(sb.spec, spec) {
		return fmt.Errorf("%w: %s cannot change the limits of a pool member; claim with the pool's limits", runtimes.ErrNotSupported, r.name)
	}
	ctx = r.b.ctx(ctx)
	begin := time.Now()
	stages := make([]any, 0, 10)
	stage := func(name string) { stages = append(stages, name, time.Since(begin).Round(10*time.Microsecond)) }
	defer func() {
		r.b.opts.Logger.Debug("pool member claimed", append([]any{"id", spec.ID, "runtime", r.name}, stages...)...)
	}()
	// Reserving the member and enforcing its policy (in its namespace,
	// not touching the container) run together; both are done before
	// anything of the user's is handed to it.
	reserved := make(chan error, 1)
	go func() { reserved <- sb.claimCall(ctx, http.MethodPost, execd.ClaimBeginPath, nil, nil) }()
	var enforced error
	if spec.Egress != nil && r.b.net.enabled {
		enforced = spec.Egress.Enforce(ctx, r.b.net.nsPath(spec.ID))
	}
	if err := errors.Join(<-reserved, enforced); err != nil {
		return err
	}
	stage("reserve+egress")
	var req execd.ClaimRequest
	if spec.Egress != nil && r.b.net.enabled {
		// Files mounted when the member started are rewritten in place on
		// the host (a bind mount shows the same inode); the others are
		// written by execd inside the sandbox.
		files := spec.Egress.Files()
		paths := make([]string, 0, len(files))
		for p := range files {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			host := egressHostFile(spec, p)
			if _, err := os.Stat(host); err == nil {
				if err := os.WriteFile(host, files[p], 0o644); err != nil {
					return fmt.Errorf("egress file %s: %w", p, err)
				}
				continue
			}
			req.Files = append(req.Files, execd.ClaimFile{Path: p, Data: files[p], Mode: 0o644})
		}
		req.Env = egressEnv(spec)
	}
	if err := r.updateLimits(ctx, sb.spec, spec); err != nil {
		return err
	}
	stage("limits")
	if len(spec.Env) > 0 && req.Env == nil {
		req.Env = map[string]string{}
	}
	for k, v := range spec.Env {
		req.Env[k] = v
	}
	req.Entrypoint = spec.Entrypoint
	err := sb.claimCall(ctx, http.MethodPost, execd.ClaimPath, req, nil)
	stage("execd")
	return err
}

// updateLimits sets the cgroup limits of spec on a member started with
// those of was, when they differ.
func (r *Runtime) updateLimits(ctx context.Context, was, spec runtimes.Spec) error {
	if r.sameLimits(was, spec) {
		return nil
	}
	mem := r.memory(spec)
	res := &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &mem, Swap: &mem}}
	const period = 100000
	quota, p := int64(-1), uint64(period)
	if spec.CPUMillis > 0 {
		quota = spec.CPUMillis * period / 1000
	}
	res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &p}
	c, err := r.b.client.LoadContainer(ctx, spec.ID)
	if err != nil {
		return err
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return err
	}
	if err := task.Update(ctx, containerd.WithResources(res)); err != nil {
		return fmt.Errorf("set the limits of %s: %w", spec.ID, err)
	}
	return nil
}

// memory is the memory limit spec gets.
func (r *Runtime) memory(spec runtimes.Spec) int64 {
	if spec.MemoryBytes > 0 {
		return spec.MemoryBytes
	}
	return r.b.opts.DefaultMemoryBytes
}

func (r *Runtime) sameLimits(a, b runtimes.Spec) bool {
	return r.memory(a) == r.memory(b) && a.CPUMillis == b.CPUMillis
}

// claimTimeout bounds each claim request to the member's execd.
const claimTimeout = 10 * time.Second

// claimCall sends one claim request to the member's execd over its socket.
func (s *Sandbox) claimCall(ctx context.Context, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://execd"+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// Not s.client: its 2 s timeout is for pings.
	resp, err := s.execd.Transport.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("%w: hybox-execd in %s: %v", errdefs.ErrUnreachable, s.spec.ID, err)
	}
	defer resp.Body.Close()
	if err := errdefs.Check(resp); err != nil {
		return err
	}
	if out != nil {
		return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out)
	}
	return nil
}
