package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// LabelPool marks a Pod started for a warm pool: PoolIdle until a claim
// begins, PoolClaimed after it.
const LabelPool = "hybox.dev/pool"

// Values of LabelPool.
const (
	PoolIdle    = "idle"
	PoolClaimed = "claimed"
)

var _ runtimes.Pooler = (*Runtime)(nil)

// Warm implements runtimes.Pooler: the sandbox's Secret and Pod as Create
// makes them, but hybox-execd runs --pooled (its TCP port behind the
// token, no entrypoint) and the container has no user environment; the
// Pod is labelled LabelPool=idle. A Pod gets no new volumes once it runs,
// so a member has none.
//
// # Errors
// As Create; runtimes.ErrInvalid for volumes.
func (r *Runtime) Warm(ctx context.Context, spec runtimes.Spec) (runtimes.Sandbox, error) {
	if len(spec.Volumes) > 0 {
		return nil, fmt.Errorf("%w: a pool member cannot have volumes", runtimes.ErrInvalid)
	}
	if err := r.Validate(spec); err != nil {
		return nil, err
	}
	spec.Env, spec.Entrypoint = nil, nil
	sb, err := r.start(ctx, spec, func(eg *podEgress) (*corev1.Pod, error) {
		p := r.pod(spec, eg)
		p.Labels[LabelPool] = PoolIdle
		for i := range p.Spec.Containers {
			if c := &p.Spec.Containers[i]; c.Name == containerName {
				c.Args = execdArgs(true) // spec.Env is nil: only the egress files' variables
				// In-place resize (pods/resize) applies new limits to the
				// running container without restarting it.
				c.ResizePolicy = []corev1.ContainerResizePolicy{
					{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.NotRequired},
					{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
				}
			}
		}
		return p, nil
	})
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// UpdatesLimits implements runtimes.Pooler: runc Pods take new limits in
// place (pods/resize, which the kubelet applies to the running
// container's cgroup); gVisor fixes the sandbox's own view of its limits
// when it boots, so a claim there must ask for the member's limits, as on
// the local runsc tier. Any other RuntimeClass is treated like gVisor.
func (r *Runtime) UpdatesLimits() bool { return r.class == "runc" }

// RestoreWarm implements runtimes.Pooler: the member's Pod and token as
// Restore finds them, and its execd still idle.
//
// # Errors
// runtimes.ErrNotFound when the Pod is gone; errdefs.ErrConflict when its
// claim has begun (a claim in flight at another replica, or one that
// died: destroy it).
func (r *Runtime) RestoreWarm(ctx context.Context, spec runtimes.Spec) (runtimes.Sandbox, error) {
	spec.Egress = nil // nothing of a member's is enforced
	sbi, err := r.Restore(ctx, spec)
	if err != nil {
		return nil, err
	}
	sb := sbi.(*Sandbox)
	var st execd.ClaimStatus
	if err := sb.claimCall(ctx, http.MethodGet, execd.ClaimPath, nil, &st); err != nil {
		_ = sb.Close(ctx)
		return nil, err
	}
	if st.State != execd.ClaimIdle {
		_ = sb.Close(ctx)
		return nil, fmt.Errorf("%w: pool member %s is %s, not idle", errdefs.ErrConflict, spec.ID, st.State)
	}
	return sb, nil
}

// Claim implements runtimes.Pooler: reserve the member (its execd's
// ClaimBeginPath), set new limits in place when they differ (runc only),
// relabel the Pod LabelPool=claimed, then give execd the environment and
// the entrypoint (execd.ClaimPath). The claim's egress policy and vault go
// to the member's hybox-egress agent before the entrypoint starts, and
// with a vault execd writes the trust store holding the sandbox's CA and
// sets the variables that point at it, as a create's Pod has them.
//
// # Errors
// runtimes.ErrInvalid for a member of another runtime or volumes;
// runtimes.ErrNotSupported for other limits under a RuntimeClass that
// cannot change them; the member's execd's or the API server's refusal.
func (r *Runtime) Claim(ctx context.Context, member runtimes.Sandbox, spec runtimes.Spec) error {
	sb, ok := member.(*Sandbox)
	if !ok || sb.r != r || sb.spec.ID != spec.ID {
		return fmt.Errorf("%w: not a pool member of runtime %s for %s", runtimes.ErrInvalid, r.name, spec.ID)
	}
	if len(spec.Volumes) > 0 {
		return fmt.Errorf("%w: a pool member cannot take volumes", runtimes.ErrInvalid)
	}
	resize := !r.sameLimits(sb.spec, spec)
	if resize && !r.UpdatesLimits() {
		return fmt.Errorf("%w: RuntimeClass %s cannot change the limits of a pool member; claim with the pool's limits", runtimes.ErrNotSupported, r.class)
	}
	begin := time.Now()
	stages := make([]any, 0, 8)
	stage := func(name string) { stages = append(stages, name, time.Since(begin).Round(10*time.Microsecond)) }
	defer func() {
		r.c.opts.Logger.Debug("pool member claimed", append([]any{"id", spec.ID, "runtime", r.name}, stages...)...)
	}()
	if err := sb.claimCall(ctx, http.MethodPost, execd.ClaimBeginPath, nil, nil); err != nil {
		return err
	}
	stage("reserve")
	// The claim's policy and vault go to the member's egress agent before
	// its entrypoint starts (the agent was made at Warm and has enforced
	// nothing since; a vault starts its credential proxy there), and the
	// trust store with the sandbox's CA to execd.
	req := execd.ClaimRequest{Env: map[string]string{}}
	if spec.Egress != nil {
		if err := r.attachEgress(ctx, sb, spec, sb.secret); err != nil {
			return err
		}
		stage("agent")
		var err error
		if req.Files, err = claimTrust(spec, sb.secret); err != nil {
			return err
		}
		if len(req.Files) > 0 {
			maps.Copy(req.Env, spec.Egress.Env())
		}
		stage("egress")
	}
	maps.Copy(req.Env, spec.Env) // the user's environment wins
	req.Entrypoint = spec.Entrypoint
	if resize {
		if err := r.resize(ctx, spec); err != nil {
			return err
		}
		stage("resize")
	}
	// The label and execd's part do not depend on each other.
	labelled := make(chan error, 1)
	go func() {
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, LabelPool, PoolClaimed)
		_, err := r.c.client.CoreV1().Pods(r.c.opts.Namespace).Patch(ctx, podName(spec.ID), types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			err = r.apiError("label Pod "+podName(spec.ID), err)
		}
		labelled <- err
	}()
	err := sb.claimCall(ctx, http.MethodPost, execd.ClaimPath, req, nil)
	stage("execd")
	if lerr := <-labelled; err == nil {
		err = lerr
	}
	stage("label")
	return err
}

// claimTrust is what execd writes at a claim for the sandbox's credential
// proxy: its CA and the trust store holding it (a create mounts the same
// files from the Secret; a member has none, being made without a vault).
// The resolver needs nothing: a member's Pod has the agent's already.
//
// # Errors
// runtimes.ErrNotSupported for a member whose Secret mounts egress files
// (read-only where the claim would write).
func claimTrust(spec runtimes.Spec, member map[string][]byte) ([]execd.ClaimFile, error) {
	files := spec.Egress.Files()
	delete(files, resolvConf)
	if len(files) == 0 {
		return nil, nil
	}
	if _, mounted := member[egressFileKey+"0"]; mounted {
		return nil, fmt.Errorf("%w: pool member %s has egress files of its own mounted read-only; it cannot take a credential vault at claim",
			runtimes.ErrNotSupported, podName(spec.ID))
	}
	out := make([]execd.ClaimFile, 0, len(files))
	for _, p := range slices.Sorted(maps.Keys(files)) {
		out = append(out, execd.ClaimFile{Path: p, Data: files[p], Mode: 0o444})
	}
	return out, nil
}

// resize gives the member's container the limits of spec in place
// (pods/resize) and waits until the kubelet has applied them.
func (r *Runtime) resize(ctx context.Context, spec runtimes.Spec) error {
	pods := r.c.client.CoreV1().Pods(r.c.opts.Namespace)
	name := podName(spec.ID)
	want := r.limits(spec)
	var pod *corev1.Pod
	var apiErr error
	// The kubelet's status updates (and the claim's relabel) change the
	// Pod's resourceVersion under the resize: a conflict reads it again.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			apiErr = r.apiError("get Pod "+name, err)
			return apiErr
		}
		for i := range p.Spec.Containers {
			if c := &p.Spec.Containers[i]; c.Name == containerName {
				// Requests follow the limits as at create (resources): the
				// Pod's QoS class may not change.
				c.Resources = resources(want)
			}
		}
		pod, err = pods.UpdateResize(ctx, name, p, metav1.UpdateOptions{})
		return err
	})
	switch {
	case apiErr != nil:
		return apiErr
	case err != nil:
		return fmt.Errorf("%w: resize Pod %s to the claim's limits: %v", runtimes.ErrNotSupported, name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.c.opts.ReadyTimeout)
	defer cancel()
	var failed error
	werr := r.watchPod(ctx, pod, func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			switch {
			case c.Type == corev1.PodResizePending && c.Reason == corev1.PodReasonInfeasible,
				c.Type == corev1.PodResizeInProgress && c.Reason == corev1.PodReasonError:
				failed = fmt.Errorf("%w: the kubelet cannot resize Pod %s: %s", runtimes.ErrNotSupported, name, c.Message)
				return true
			}
		}
		return applied(p, want)
	})
	switch {
	case failed != nil:
		return failed
	case werr != nil:
		return werr
	case ctx.Err() != nil:
		return fmt.Errorf("%w: the kubelet did not resize Pod %s within %s", runtimes.ErrUnavailable, name, r.c.opts.ReadyTimeout)
	}
	return nil
}

// applied reports whether the kubelet reports limits want on the running
// sandbox container.
func applied(p *corev1.Pod, want corev1.ResourceList) bool {
	for _, c := range p.Status.Conditions {
		if (c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress) && c.Status == corev1.ConditionTrue {
			return false
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != containerName || cs.Resources == nil {
			continue
		}
		for k, q := range want {
			if have, ok := cs.Resources.Limits[k]; !ok || have.Cmp(q) != 0 {
				return false
			}
		}
		return true
	}
	return false
}

func (r *Runtime) sameLimits(a, b runtimes.Spec) bool {
	return r.memory(a) == r.memory(b) && a.CPUMillis == b.CPUMillis
}

// claimTimeout bounds each claim request to a member's execd.
const claimTimeout = 10 * time.Second

// claimCall sends one claim request to the member's execd, with its token.
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
	req, err := http.NewRequestWithContext(ctx, method, s.url(path), body)
	if err != nil {
		return err
	}
	req.Header.Set(execd.AccessTokenHeader, s.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: hybox-execd in Pod %s: %v", errdefs.ErrUnreachable, podName(s.spec.ID), err)
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
