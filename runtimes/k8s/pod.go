package k8s

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/hybox-dev/hybox/internal/cleanup"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Paths and names inside a sandbox's Pod.
const (
	containerName = "sandbox"
	initName      = "hybox-execd"
	execdDir      = "/.hybox/bin"
	execdInPod    = execdDir + "/hybox-execd"
	// ExecdInImage is where the hybox-execd image holds the binary.
	ExecdInImage = "/hybox-execd"
	tokenDir     = "/.hybox/token"
	tokenKey     = "token"
	// ExecdPort is the port hybox-execd serves on, on the Pod's IP.
	ExecdPort = 44772
)

// Create makes the sandbox's Secret (its execd token) and Pod, and waits
// until the Pod runs and its execd answers. A Pod that cannot start (an
// image the node does not have, a container that cannot be created) fails
// at once with the kubelet's reason, not after the timeout. On any failure
// everything created so far is deleted.
//
// # Errors
// runtimes.ErrInvalid for an image the node lacks or a RuntimeClass the
// cluster lacks; runtimes.ErrUnavailable when the API server or execd does
// not answer in time.
func (r *Runtime) Create(ctx context.Context, spec runtimes.Spec) (runtimes.Sandbox, error) {
	if err := r.Validate(spec); err != nil {
		return nil, err
	}
	if err := r.addVolumes(spec, r.pod(spec, nil)); err != nil {
		return nil, err // checked before any claim is made
	}
	undoClaims, err := r.ensureClaims(ctx, spec)
	if err != nil {
		return nil, err
	}
	sb, err := r.start(ctx, spec, func(eg *podEgress) (*corev1.Pod, error) {
		p := r.pod(spec, eg)
		return p, r.addVolumes(spec, p)
	})
	if err != nil {
		undoClaims()
		return nil, err // not a nil *Sandbox in an interface
	}
	return sb, nil
}

// start makes the sandbox's Secret and the Pod build returns for the
// sandbox's egress agent (nil: none), and waits for its execd (see Create).
func (r *Runtime) start(ctx context.Context, spec runtimes.Spec, build func(*podEgress) (*corev1.Pod, error)) (*Sandbox, error) {
	begin := time.Now()
	cu := cleanup.Make(func() {
		if err := r.Destroy(context.WithoutCancel(ctx), spec); err != nil {
			r.c.opts.Logger.Warn("cleanup after failed create", "id", spec.ID, "err", err)
		}
	})
	defer cu.Clean()
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	eg, err := r.egressOf(spec)
	if err != nil {
		return nil, err
	}
	if err := r.c.ensureNetworkPolicy(ctx); err != nil {
		return nil, err
	}
	name := podName(spec.ID)
	ns := r.c.opts.Namespace
	secret := &corev1.Secret{
		ObjectMeta: r.meta(spec),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{tokenKey: []byte(token)},
	}
	if err := eg.secretData(secret.Data); err != nil {
		return nil, err
	}
	secret, err = r.c.client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
	if err != nil {
		return nil, r.apiError("create Secret "+name, err)
	}
	podSpec, err := build(eg)
	if err != nil {
		return nil, err
	}
	pod, err := r.c.client.CoreV1().Pods(ns).Create(ctx, podSpec, metav1.CreateOptions{})
	if err != nil {
		return nil, r.apiError("create Pod "+name, err)
	}
	// The Secret goes with its Pod, whoever deletes the Pod.
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}
	secret.OwnerReferences = []metav1.OwnerReference{owner}
	if _, err := r.c.client.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		return nil, r.apiError("own Secret "+name, err)
	}
	created := time.Since(begin)
	sb, err := r.waitStarted(ctx, pod, token, spec)
	if err != nil {
		return nil, err
	}
	sb.secret = secret.Data
	if err := r.attachEgress(ctx, sb, spec, secret.Data); err != nil {
		_ = sb.Close(ctx)
		return nil, err
	}
	cu.Release()
	r.c.opts.Logger.Debug("sandbox created", "id", spec.ID, "runtime", r.name, "class", r.class,
		"objects", created.Round(time.Millisecond), "ready", time.Since(begin).Round(time.Millisecond))
	return sb, nil
}

// Restore finds the sandbox's Pod and its token again and waits until its
// execd answers.
//
// # Errors
// runtimes.ErrNotFound when the Pod, or its Secret, is gone or the Pod can
// no longer run; runtimes.ErrUnavailable when the API server or execd does
// not answer.
func (r *Runtime) Restore(ctx context.Context, spec runtimes.Spec) (runtimes.Sandbox, error) {
	name := podName(spec.ID)
	ns := r.c.opts.Namespace
	pod, err := r.c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && pod.DeletionTimestamp != nil {
		return nil, fmt.Errorf("%w: Pod %s of sandbox %s is gone", runtimes.ErrNotFound, name, spec.ID)
	}
	if err != nil {
		return nil, r.apiError("get Pod "+name, err)
	}
	if _, err := podState(pod); err != nil {
		return nil, fmt.Errorf("%w: Pod %s of sandbox %s can no longer run: %v", runtimes.ErrNotFound, name, spec.ID, err)
	}
	secret, err := r.c.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: Secret %s of sandbox %s is gone", runtimes.ErrNotFound, name, spec.ID)
	}
	if err != nil {
		return nil, r.apiError("get Secret "+name, err)
	}
	// A Pod that is still starting (a create that returned as soon as
	// execd answered, before the kubelet reported the Pod Running) is
	// waited for like a new one.
	sb, err := r.waitStarted(ctx, pod, string(secret.Data[tokenKey]), spec)
	if err != nil {
		return nil, err
	}
	sb.secret = secret.Data
	// The server's state, which the agent may not have (a change it
	// missed while no server ran), is pushed again.
	if err := r.attachEgress(ctx, sb, spec, secret.Data); err != nil {
		_ = sb.Close(ctx)
		return nil, err
	}
	return sb, nil
}

// apiError wraps an error of the API server: a RuntimeClass the admission
// refused is the user's (400), anything else means the API is not usable.
func (r *Runtime) apiError(what string, err error) error {
	switch {
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "RuntimeClass"):
		return fmt.Errorf("%w: %s: %v", runtimes.ErrInvalid, what, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return fmt.Errorf("%w: %s: %v", runtimes.ErrInvalid, what, err)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%w: %s: %v", errdefs.ErrConflict, what, err)
	}
	return fmt.Errorf("%w: %s: %v", runtimes.ErrUnavailable, what, err)
}

func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// meta is the metadata of the sandbox's Pod and Secret.
func (r *Runtime) meta(spec runtimes.Spec) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        podName(spec.ID),
		Namespace:   r.c.opts.Namespace,
		Labels:      map[string]string{LabelManagedBy: managedBy, LabelSandbox: spec.ID},
		Annotations: r.annotations(),
	}
}

// annotations are the annotations of every object of the runtime.
func (r *Runtime) annotations() map[string]string {
	a := map[string]string{AnnotationRuntime: r.name}
	if r.c.opts.Replica != "" {
		a[AnnotationReplica] = r.c.opts.Replica
	}
	return a
}

// limits are the container limits of spec.
func (r *Runtime) limits(spec runtimes.Spec) corev1.ResourceList {
	l := corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(r.memory(spec), resource.BinarySI)}
	if spec.CPUMillis > 0 {
		l[corev1.ResourceCPU] = *resource.NewMilliQuantity(spec.CPUMillis, resource.DecimalSI)
	}
	return l
}

// cpuRequestShare is the part of its CPU limit a sandbox's Pod requests:
// sandboxes mostly wait (for a model, for their user), so the scheduler
// places them by a tenth of what they may use at once, while the limit
// still bounds each one. Memory is requested in full: it is not
// overcommitted.
const cpuRequestShare = 10

// resources are a sandbox container's requests and limits for limits:
// the memory limit requested in full, a tenth of the CPU limit (at least
// 1m). Requests never equal every limit, so the Pod's QoS class is
// Burstable whatever the limits, and a resize keeps it.
func resources(limits corev1.ResourceList) corev1.ResourceRequirements {
	req := corev1.ResourceList{}
	if m, ok := limits[corev1.ResourceMemory]; ok {
		req[corev1.ResourceMemory] = m.DeepCopy()
	}
	if c, ok := limits[corev1.ResourceCPU]; ok {
		req[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(c.MilliValue()/cpuRequestShare, 1), resource.DecimalSI)
	}
	return corev1.ResourceRequirements{Limits: limits, Requests: req}
}

// memory is the memory limit spec gets.
func (r *Runtime) memory(spec runtimes.Spec) int64 {
	if spec.MemoryBytes > 0 {
		return spec.MemoryBytes
	}
	return r.c.opts.DefaultMemoryBytes
}

// execdArgs are hybox-execd's flags in a Pod: TCP on the Pod's IP behind
// the token; pooled, it waits there for its claim (see execd.ClaimPath).
func execdArgs(pooled bool) []string {
	args := []string{"--listen-unix", "", "--listen-tcp", fmt.Sprintf("0.0.0.0:%d", ExecdPort),
		"--access-token-file", tokenDir + "/" + tokenKey}
	if pooled {
		args = append(args, "--pooled")
	}
	return args
}

// pod is the sandbox's Pod: an init container that copies hybox-execd into
// a shared volume, and the workload container, whose command is that
// execd (it starts the entrypoint). Images are never pulled: they must be
// on the node. No service account token, no service links, the node's DNS.
func (r *Runtime) pod(spec runtimes.Spec, eg *podEgress) *corev1.Pod {
	args := append(execdArgs(false), "--")
	args = append(args, spec.Entrypoint...)
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	env := make([]corev1.EnvVar, 0, len(keys))
	for _, k := range keys {
		env = append(env, corev1.EnvVar{Name: k, Value: spec.Env[k]})
	}
	limits := r.limits(spec)
	no := false
	tokenMode := int32(0o400)
	class := r.class
	secure := &corev1.SecurityContext{
		AllowPrivilegeEscalation: &no,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW", "MKNOD", "AUDIT_WRITE"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	p := &corev1.Pod{
		ObjectMeta: r.meta(spec),
		Spec: corev1.PodSpec{
			RuntimeClassName:             &class,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			DNSPolicy:                    corev1.DNSDefault,
			Volumes: []corev1.Volume{
				{Name: "hybox-execd", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				// Only the execd token (and the egress files): the
				// agent's configuration is for its containers alone.
				{Name: "hybox-token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: podName(spec.ID), DefaultMode: &tokenMode,
					Items: []corev1.KeyToPath{{Key: tokenKey, Path: tokenKey}}}}},
			},
			InitContainers: []corev1.Container{{
				Name:            initName,
				Image:           r.c.opts.ExecdImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{ExecdInImage, "--install-to", execdInPod},
				VolumeMounts:    []corev1.VolumeMount{{Name: "hybox-execd", MountPath: execdDir}},
				SecurityContext: secure,
			}},
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           spec.Image,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{execdInPod},
				Args:            args,
				Env:             env,
				Resources:       resources(limits),
				VolumeMounts: []corev1.VolumeMount{
					{Name: "hybox-execd", MountPath: execdDir, ReadOnly: true},
					{Name: "hybox-token", MountPath: tokenDir, ReadOnly: true},
				},
				SecurityContext: secure,
				// hybox-execd writes no termination message: when it ends
				// with an error, the tail of its log is the reason a
				// create's error carries (podState).
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
		},
	}
	eg.addToPod(p, r.c.opts.ExecdImage, "hybox-token")
	return p
}

// waitReasons are container waiting reasons after which a Pod of
// imagePullPolicy Never never starts: Create fails at once with them.
var waitReasons = []string{
	"ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError",
	"CrashLoopBackOff", "ImageInspectError",
}

// waitStarted waits until the Pod has an IP and its execd answers there,
// watching the Pod all along: a state in which it can never run (see
// podState) ends the wait at once with the kubelet's reason. execd is
// polled as soon as the IP is known, not only once the kubelet reports the
// Pod Running, which it does up to a status sync later.
func (r *Runtime) waitStarted(ctx context.Context, pod *corev1.Pod, token string, spec runtimes.Spec) (*Sandbox, error) {
	sb, last, err := r.waitStartedPod(ctx, pod, token, spec)
	if err != nil {
		return nil, err
	}
	sb.watchExit(last)
	return sb, nil
}

// waitStartedPod is waitStarted without the exit watch; it also returns the
// last state of the Pod it saw.
func (r *Runtime) waitStartedPod(ctx context.Context, pod *corev1.Pod, token string, spec runtimes.Spec) (*Sandbox, *corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, r.c.opts.ReadyTimeout)
	defer cancel()
	addrC := make(chan netip.Addr, 1)
	fatalC := make(chan error, 1)
	var last atomic.Pointer[corev1.Pod]
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sent := false
		err := r.watchPod(ctx, pod, func(p *corev1.Pod) bool {
			last.Store(p)
			addr, err := podState(p)
			if err != nil {
				fatalC <- err
				return true
			}
			if addr.IsValid() && !sent {
				sent = true
				addrC <- addr
			}
			return false
		})
		if err != nil && ctx.Err() == nil {
			select {
			case fatalC <- err:
			default:
			}
		}
	}()
	defer wg.Wait()
	defer cancel()
	timeout := func() error {
		p := last.Load()
		if p == nil {
			p = pod
		}
		return r.notRunning(p)
	}
	var addr netip.Addr
	select {
	case addr = <-addrC:
	case err := <-fatalC:
		return nil, nil, err
	case <-ctx.Done():
		return nil, nil, timeout()
	}
	sb := newSandbox(r, spec, addr, token)
	readyC := make(chan error, 1)
	go func() { readyC <- sb.waitReady(ctx, r.c.opts.ReadyTimeout) }()
	select {
	case err := <-readyC:
		if err != nil {
			select {
			case ferr := <-fatalC:
				return nil, nil, ferr
			default:
			}
			return nil, nil, err
		}
		cancel()
		wg.Wait()
		p := last.Load()
		if p == nil {
			p = pod
		}
		return sb, p, nil
	case err := <-fatalC:
		return nil, nil, err
	}
}

// watchPod hands every state of pod to seen, from the one given on, until
// seen returns true or ctx is done (then it returns nil).
//
// # Errors
// When the Pod is deleted, or the API server does not answer.
func (r *Runtime) watchPod(ctx context.Context, pod *corev1.Pod, seen func(*corev1.Pod) bool) error {
	pods := r.c.client.CoreV1().Pods(pod.Namespace)
	rv := pod.ResourceVersion
	if seen(pod) {
		return nil
	}
	for ctx.Err() == nil {
		if rv == "" {
			fresh, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return r.apiError("get Pod "+pod.Name, err)
			}
			if seen(fresh) {
				return nil
			}
			rv = fresh.ResourceVersion
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", pod.Name).String(),
			ResourceVersion: rv,
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return r.apiError("watch Pod "+pod.Name, err)
		}
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Deleted:
				w.Stop()
				return fmt.Errorf("%w: Pod %s was deleted while it started", runtimes.ErrUnavailable, pod.Name)
			case watch.Error:
				rv = "" // an expired resource version: read afresh
				continue
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			rv = p.ResourceVersion
			if seen(p) {
				w.Stop()
				return nil
			}
		}
		w.Stop()
	}
	return nil
}

// notRunning says why a Pod did not run in time, with its last state.
func (r *Runtime) notRunning(p *corev1.Pod) error {
	why := string(p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			why += "; " + string(c.Type) + ": " + c.Message
		}
	}
	return fmt.Errorf("%w: Pod %s did not start within %s (%s)", runtimes.ErrUnavailable, p.Name, r.c.opts.ReadyTimeout, why)
}

// podState returns the Pod's IP once it has one, and an error when the Pod
// can never run: a container waits for a reason in waitReasons, the
// workload container (or a failed init container) ended, or the Pod did.
func podState(p *corev1.Pod) (netip.Addr, error) {
	statuses := append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && slices.Contains(waitReasons, w.Reason) {
			what := "container " + cs.Name
			if cs.Name == containerName {
				what = "the sandbox's container"
			}
			if strings.HasPrefix(w.Reason, "ErrImage") || w.Reason == "ImagePullBackOff" || w.Reason == "InvalidImageName" {
				return netip.Addr{}, fmt.Errorf("%w: image %s is not on the cluster's node and is never pulled (%s); import it into the node's containerd first",
					runtimes.ErrInvalid, cs.Image, w.Reason)
			}
			return netip.Addr{}, fmt.Errorf("%w: Pod %s cannot start: %s (image %s): %s: %s", runtimes.ErrUnavailable,
				p.Name, what, cs.Image, w.Reason, w.Message)
		}
		if t := cs.State.Terminated; t != nil && (cs.Name == containerName || t.ExitCode != 0) {
			return netip.Addr{}, fmt.Errorf("%w: Pod %s: container %s ended (exit code %d, %s): %s",
				runtimes.ErrUnavailable, p.Name, cs.Name, t.ExitCode, t.Reason, t.Message)
		}
	}
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return netip.Addr{}, fmt.Errorf("%w: Pod %s ended (%s): %s", runtimes.ErrUnavailable, p.Name, p.Status.Phase, p.Status.Message)
	}
	if p.Status.PodIP == "" {
		return netip.Addr{}, nil
	}
	addr, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: Pod %s has a bad IP %q", runtimes.ErrUnavailable, p.Name, p.Status.PodIP)
	}
	return addr, nil
}
