// Package k8s is the Kubernetes backend: each container sandbox is a Pod
// whose RuntimeClass (runc, gvisor, or any other the cluster has) comes
// from the sandbox's runtime. An init container copies hybox-execd from a
// small image of its own into a volume the workload container shares; the
// workload container runs hybox-execd as its command, which starts the
// sandbox's entrypoint and serves the execd API on the Pod's IP, port
// 44772, behind a per-sandbox access token kept in a Secret beside the Pod.
// hybox reaches execd on the Pod IP, so the server must be able to route to
// the cluster's Pod network (true on the node itself and inside the
// cluster). Host volumes are hostPath volumes, pvc volumes the
// namespace's PersistentVolumeClaims (volume.go); warm pool members are
// Pods whose execd waits to be claimed (pool.go).
//
// A sandbox with an egress controller gets hybox-egress (egress.go): an
// init container that installs the firewall and a native sidecar that
// serves the DNS and credential proxies and takes every change of policy
// and vault from the server, all in the Pod's network namespace.
//
// Not done: pause and resume (ErrNotSupported: the Kubernetes API cannot
// freeze a Pod). Under gVisor the agent programs the netstack's iptables
// instead of nftables (policy/xt).
package k8s

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Labels and annotations on every object the backend makes.
const (
	// LabelManagedBy marks hybox's Pods and Secrets ("hybox").
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelSandbox holds the sandbox id (ids are valid label values).
	LabelSandbox = "hybox.dev/sandbox"
	// AnnotationRuntime names the hybox runtime that made the Pod.
	AnnotationRuntime = "hybox.dev/runtime"
	// AnnotationReplica names the server replica that made the Pod.
	AnnotationReplica = "hybox.dev/replica"
	managedBy         = "hybox"
)

// Options configures the backend.
type Options struct {
	// Config reaches the API server. Required.
	Config *rest.Config
	// Namespace of the sandboxes' Pods and Secrets. Required.
	Namespace string
	// ExecdImage is the image holding the static hybox-execd at
	// /hybox-execd and hybox-egress at /hybox-egress (see
	// ExecdImageArchive), present on every node: Pods use
	// imagePullPolicy Never. Required.
	ExecdImage string
	// ReadyTimeout bounds how long Create waits for execd (default 60 s).
	ReadyTimeout time.Duration
	// DefaultMemoryBytes is the memory limit of a sandbox that asks for
	// none (default 1 GiB).
	DefaultMemoryBytes int64
	// DNSUpstreams are the resolvers ("ip:port") the Pods' egress agents
	// forward allowed names to; empty: the egress manager's (the server's
	// egress.dns_upstreams). They must be reachable from the Pods.
	DNSUpstreams []string
	// IngressFrom, when set, are the addresses of the hybox servers: a
	// NetworkPolicy (NetworkPolicyName) then lets the sandboxes' Pods take
	// connections from them only, a second fence where the cluster's CNI
	// enforces NetworkPolicy (the test cluster's bridge plugin does not).
	IngressFrom []netip.Prefix
	// Replica names the server that makes the sandboxes when it is one of
	// several sharing the cluster (annotation hybox.dev/replica on every
	// Pod), for SweepReplicas.
	Replica string
	// AllowedHostPaths are the directories below which host volumes may
	// be mounted (the server's allowed_host_paths). They are resolved on
	// the server's filesystem, which is the node's only when the server
	// runs on the node: a hostPath volume names a directory of the node
	// the Pod runs on.
	AllowedHostPaths []string
	// Access is how the server reaches execd and the sandboxes' ports:
	// AccessPodIP (default) or AccessAPIProxy.
	Access string
	// Logger; nil = slog.Default().
	Logger *slog.Logger
}

// Validate fills defaults and checks required fields.
//
// # Errors
// When Config, Namespace or ExecdImage is missing.
func (o *Options) Validate() error {
	if o.Config == nil || o.Namespace == "" || o.ExecdImage == "" {
		return errors.New("k8s: Config, Namespace and ExecdImage are required")
	}
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return fmt.Errorf("k8s: namespace %q: %s", o.Namespace, strings.Join(errs, "; "))
	}
	if err := validPrefixes(o.IngressFrom); err != nil {
		return err
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 60 * time.Second
	}
	if o.DefaultMemoryBytes <= 0 {
		o.DefaultMemoryBytes = 1 << 30
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// Cluster is the connection to one cluster, shared by its runtimes.
type Cluster struct {
	opts   Options
	client kubernetes.Interface
	access *podAccess

	mu         sync.Mutex
	classes    []string          // RuntimeClass names, sorted
	handlers   map[string]string // RuntimeClass name → handler
	netpolDone bool              // the NetworkPolicy is in place
	classesAt  time.Time
}

// classesTTL is how long a list of RuntimeClasses is trusted for a class it
// contains; a class it lacks is always looked up again.
const classesTTL = 30 * time.Second

// New connects to the cluster and checks that its API answers.
//
// # Errors
// Invalid options; runtimes.ErrUnavailable when the API server does not
// answer.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	c, err := Open(opts)
	if err != nil {
		return nil, err
	}
	if _, err := c.RuntimeClasses(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Open is New without asking the API server anything: a cluster that does
// not answer yet makes every call fail with runtimes.ErrUnavailable and
// its reason, until it answers.
//
// # Errors
// Invalid options.
func Open(opts Options) (*Cluster, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("k8s: client: %w", err)
	}
	access, err := newPodAccess(opts)
	if err != nil {
		return nil, err
	}
	return &Cluster{opts: opts, client: client, access: access}, nil
}

// Access is how the server reaches the Pods (AccessPodIP or
// AccessAPIProxy).
func (c *Cluster) Access() string {
	if c.access.viaAPI {
		return AccessAPIProxy
	}
	return AccessPodIP
}

// Client is the cluster's clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// RuntimeClasses lists the RuntimeClasses of the cluster, sorted.
//
// # Errors
// runtimes.ErrUnavailable when the API server does not answer.
func (c *Cluster) RuntimeClasses(ctx context.Context) ([]string, error) {
	list, err := c.client.NodeV1().RuntimeClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		// The reason reaches the caller (a 503 says which part is down);
		// the address and the client's error go to the log.
		c.opts.Logger.Warn("the Kubernetes API server does not answer", "err", err)
		return nil, errdefs.New(api.ErrorCodeUNAVAILABLE, "the Kubernetes API server does not answer; container sandboxes on the cluster are unavailable until it does")
	}
	names := make([]string, 0, len(list.Items))
	handlers := map[string]string{}
	for _, rc := range list.Items {
		names = append(names, rc.Name)
		handlers[rc.Name] = rc.Handler
	}
	slices.Sort(names)
	c.mu.Lock()
	c.classes, c.handlers, c.classesAt = names, handlers, time.Now()
	c.mu.Unlock()
	return names, nil
}

// checkClass reports whether the cluster has RuntimeClass class.
func (c *Cluster) checkClass(ctx context.Context, class string) error {
	c.mu.Lock()
	known, fresh := slices.Contains(c.classes, class), time.Since(c.classesAt) < classesTTL
	c.mu.Unlock()
	if known && fresh {
		return nil
	}
	names, err := c.RuntimeClasses(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(names, class) {
		has := "none"
		if len(names) > 0 {
			has = strings.Join(names, ", ")
		}
		return fmt.Errorf("%w: the cluster has no RuntimeClass %q (it has: %s)", runtimes.ErrInvalid, class, has)
	}
	return nil
}

// gvisor reports whether RuntimeClass class runs gVisor (its handler, or
// its name when the classes were not listed yet, names gvisor or runsc).
func (c *Cluster) gvisor(class string) bool {
	c.mu.Lock()
	h, ok := c.handlers[class]
	c.mu.Unlock()
	if !ok {
		h = class
	}
	return strings.Contains(h, "gvisor") || strings.Contains(h, "runsc")
}

// Runtime returns the runtime called name (the value of
// extensions["hybox.io/runtime"] that selects it) whose Pods run under
// RuntimeClass class, for example Runtime("runsc", "gvisor").
func (c *Cluster) Runtime(name, class string) *Runtime {
	return &Runtime{c: c, name: name, class: class}
}

// Runtime runs sandboxes as Pods of one RuntimeClass.
type Runtime struct {
	c     *Cluster
	name  string
	class string
}

var (
	_ runtimes.Runtime    = (*Runtime)(nil)
	_ runtimes.Sweeper    = (*Runtime)(nil)
	_ runtimes.CodeRunner = (*Sandbox)(nil)
)

// Name is the runtime's name.
func (r *Runtime) Name() string { return r.name }

// Class is the RuntimeClass of the runtime's Pods.
func (r *Runtime) Class() string { return r.class }

// validateTimeout bounds the API calls of Validate, which has no context.
const validateTimeout = 10 * time.Second

// Validate refuses what the backend cannot run: wasm images, ids that are
// no valid Pod name, volumes it cannot mount (see checkVolumes), an egress
// policy or vault on Pods the server reaches through the API server's
// proxy, and a RuntimeClass the cluster lacks (the message names those it
// has).
//
// # Errors
// runtimes.ErrInvalid or runtimes.ErrNotSupported with a message for the
// user; runtimes.ErrUnavailable when the API server does not answer.
func (r *Runtime) Validate(spec runtimes.Spec) error {
	if strings.HasPrefix(spec.Image, "wasm://") {
		return fmt.Errorf("%w: %s is a wasm image; use the wasm runtime", runtimes.ErrInvalid, spec.Image)
	}
	// A spec without an id is a pool's template (the server checks it
	// before any member has an id).
	if errs := validation.IsDNS1123Label(podName(spec.ID)); spec.ID != "" && len(errs) > 0 {
		return fmt.Errorf("%w: sandbox id %q makes no Pod name: %s", runtimes.ErrInvalid, spec.ID, strings.Join(errs, "; "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), validateTimeout)
	defer cancel()
	if err := r.checkVolumes(ctx, spec); err != nil {
		return err
	}
	if err := r.c.checkClass(ctx, r.class); err != nil {
		return err
	}
	if eg, ok := spec.Egress.(agentEgress); ok {
		if why := r.noAgent(); why != nil {
			if st := eg.State(); st.Policy != nil || st.Vault != nil {
				return why
			}
		}
	}
	return nil
}

// podName is the name of a sandbox's Pod and of its Secret.
func podName(id string) string { return "hybox-" + id }

// Sweep deletes the Pods and Secrets of this runtime whose sandbox id keep
// rejects (a crash during create leaves them), and the lone Secrets of
// sandboxes that have no Pod.
func (r *Runtime) Sweep(ctx context.Context, keep func(id string) bool) error {
	return r.SweepReplicas(ctx, func(id, _ string) bool { return keep(id) })
}

// SweepReplicas implements runtimes.ReplicaSweeper: Sweep, told which
// replica made each Pod (AnnotationReplica, "" when none).
func (r *Runtime) SweepReplicas(ctx context.Context, keep func(id, maker string) bool) error {
	sel := metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + managedBy}
	pods, err := r.c.client.CoreV1().Pods(r.c.opts.Namespace).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("%w: list Pods: %v", runtimes.ErrUnavailable, err)
	}
	var errs []error
	withPod := map[string]bool{}
	for _, p := range pods.Items {
		id := p.Labels[LabelSandbox]
		withPod[id] = true
		if id == "" || p.Annotations[AnnotationRuntime] != r.name || keep(id, p.Annotations[AnnotationReplica]) {
			continue
		}
		r.c.opts.Logger.Info("sweeping a Pod with no sandbox record", "pod", p.Name)
		errs = append(errs, r.Destroy(ctx, runtimes.Spec{ID: id}))
	}
	// A Secret whose Pod was never made: a create that failed, or whose
	// Secret landed after its clean-up had deleted it (a cancelled request
	// the API server still carried out). Once its Pod exists the Secret is
	// the Pod's (an owner reference), so only Pod-less ones are looked at.
	secrets, err := r.c.client.CoreV1().Secrets(r.c.opts.Namespace).List(ctx, sel)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("%w: list Secrets: %v", runtimes.ErrUnavailable, err))...)
	}
	for _, sec := range secrets.Items {
		id := sec.Labels[LabelSandbox]
		if id == "" || withPod[id] || sec.Name != podName(id) || sec.Annotations[AnnotationRuntime] != r.name ||
			len(sec.OwnerReferences) > 0 || keep(id, sec.Annotations[AnnotationReplica]) {
			continue
		}
		r.c.opts.Logger.Info("sweeping a Secret whose sandbox has no Pod and no record", "secret", sec.Name)
		err := r.c.client.CoreV1().Secrets(r.c.opts.Namespace).Delete(ctx, sec.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("%w: delete Secret %s: %v", runtimes.ErrUnavailable, sec.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Destroy deletes the sandbox's Pod (grace period 0) and its Secret, and
// the PersistentVolumeClaims its create made to go with it (see
// releaseClaims). It succeeds when they are gone already. The kubelet stops the Pod's
// containers after the API object is gone.
//
// # Errors
// runtimes.ErrUnavailable when the API server does not answer.
func (r *Runtime) Destroy(ctx context.Context, spec runtimes.Spec) error {
	name := podName(spec.ID)
	var errs []error
	grace := int64(0)
	err := r.c.client.CoreV1().Pods(r.c.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("%w: delete Pod %s: %v", runtimes.ErrUnavailable, name, err))
	}
	err = r.c.client.CoreV1().Secrets(r.c.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("%w: delete Secret %s: %v", runtimes.ErrUnavailable, name, err))
	}
	errs = append(errs, r.releaseClaims(ctx, spec.ID))
	return errors.Join(errs...)
}
