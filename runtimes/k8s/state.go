package k8s

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/yaml"

	manifests "github.com/hybox-dev/hybox/deploy/kubernetes"
	"github.com/hybox-dev/hybox/internal/shared"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// The shared state of hybox replicas on a cluster: each sandbox record a
// custom resource Sandbox (group hybox.dev, deploy/kubernetes/crd.yaml) in
// the backend's namespace, its sealed egress state a Secret beside it,
// shared keys one Secret each, and the lead a Lease.

// Names of the shared state's objects.
const (
	// SandboxGroup, SandboxVersion and SandboxResource name the CRD.
	SandboxGroup    = "hybox.dev"
	SandboxVersion  = "v1alpha1"
	SandboxResource = "sandboxes"
	// LeaseName is the Lease the replicas elect their leader with.
	LeaseName = "hybox-leader"
)

// SandboxGVR is the resource of the Sandbox records.
var SandboxGVR = schema.GroupVersionResource{Group: SandboxGroup, Version: SandboxVersion, Resource: SandboxResource}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// StateOptions configures the shared state.
type StateOptions struct {
	// Runtimes are the names of the runtimes whose sandboxes every replica
	// serves (this cluster's); their records are kept in the cluster.
	Runtimes []string
	// Identity names this replica in the Lease (unique per process).
	Identity string
	// LeaseDuration is how long a leader that stopped renewing keeps the
	// lead (default 15 s); renewals are due within two thirds of it.
	LeaseDuration time.Duration
}

// State is the replicas' shared state on the cluster (shared.Store).
type State struct {
	c        *Cluster
	identity string
	lease    time.Duration
	dyn      dynamic.NamespaceableResourceInterface
	poolDyn  dynamic.NamespaceableResourceInterface
	shares   map[string]bool
	leading  atomic.Bool
	stop     context.CancelFunc
	done     chan struct{}
	// beatDone is closed when the heartbeat has stopped.
	beatDone chan struct{}
	// lastBeat is when the last heartbeat that the API server took was
	// sent, in nanoseconds since origin (monotonic: a step of the wall
	// clock makes no lapse); lapses counts the gaps between two such that
	// were long enough to look gone (Lapses).
	origin   time.Time
	lastBeat atomic.Int64
	lapses   atomic.Uint64
	once     sync.Once
}

var _ shared.Store = (*State)(nil)

// SharedState opens the replicas' shared state: it installs the Sandbox CRD
// when it is missing (and the credentials may; a deployment applies
// deploy/kubernetes/crd.yaml itself) and joins the election of the leader.
//
// # Errors
// runtimes.ErrUnavailable when the API server does not answer or the CRD
// is missing and cannot be installed.
func (c *Cluster) SharedState(ctx context.Context, o StateOptions) (*State, error) {
	if o.Identity == "" {
		return nil, errors.New("k8s: StateOptions.Identity is required")
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = 15 * time.Second
	}
	dc, err := dynamic.NewForConfig(c.opts.Config)
	if err != nil {
		return nil, fmt.Errorf("k8s: dynamic client: %w", err)
	}
	if err := ensureCRD(ctx, dc); err != nil {
		return nil, err
	}
	st := &State{c: c, identity: o.Identity, lease: o.LeaseDuration, dyn: dc.Resource(SandboxGVR), poolDyn: dc.Resource(PoolGVR),
		shares: map[string]bool{}, done: make(chan struct{}), beatDone: make(chan struct{}), origin: time.Now()}
	for _, r := range o.Runtimes {
		st.shares[r] = true
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: LeaseName, Namespace: c.opts.Namespace},
		Client:     c.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
	}
	lctx, cancel := context.WithCancel(context.Background())
	st.stop = cancel
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.LeaseDuration,
		RenewDeadline:   o.LeaseDuration * 2 / 3,
		RetryPeriod:     o.LeaseDuration / 6,
		ReleaseOnCancel: true,
		Name:            LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				st.leading.Store(true)
				c.opts.Logger.Info("this replica leads (reaper of shared sandboxes)", "identity", o.Identity)
			},
			OnStoppedLeading: func() { st.leading.Store(false) },
			OnNewLeader: func(id string) {
				if id != o.Identity {
					c.opts.Logger.Info("another replica leads", "leader", id)
				}
			},
		},
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("k8s: leader election: %w", err)
	}
	if err := st.beat(ctx); err != nil {
		cancel()
		return nil, err
	}
	go st.heartbeat(lctx)
	go func() {
		defer close(st.done)
		// Run returns when the lead is lost; stand again until closed.
		for lctx.Err() == nil {
			le.Run(lctx)
			st.leading.Store(false)
		}
	}()
	return st, nil
}

// ensureCRD installs the CRDs of deploy/kubernetes/crd.yaml (Sandbox,
// SandboxPool) unless they are there, and waits until the API server
// serves them.
func ensureCRD(ctx context.Context, dc dynamic.Interface) error {
	crds := dc.Resource(crdGVR)
	for _, doc := range bytes.Split(manifests.CRD, []byte("\n---\n")) {
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			return fmt.Errorf("k8s: the embedded CRD: %w", err)
		}
		name := obj.GetName()
		_, err := crds.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if _, err = crds.Create(ctx, &obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("%w: the CRD %s is missing and could not be installed (apply deploy/kubernetes/crd.yaml): %v", runtimes.ErrUnavailable, name, err)
			}
		} else if err != nil && !apierrors.IsForbidden(err) {
			return fmt.Errorf("%w: get CRD %s: %v", runtimes.ErrUnavailable, name, err)
		}
	}
	// A replica that may not read CRDs learns whether the resources are
	// served from listing them.
	deadline := time.Now().Add(30 * time.Second)
	for _, gvr := range []schema.GroupVersionResource{SandboxGVR, PoolGVR} {
		for {
			_, err := dc.Resource(gvr).Namespace(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{Limit: 1})
			if err == nil || apierrors.IsForbidden(err) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%w: the resource %s.%s is not served: %v", runtimes.ErrUnavailable, gvr.Resource, gvr.Group, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// Shares implements shared.Store.
func (s *State) Shares(runtime string) bool { return s.shares[runtime] }

// Leading implements shared.Store.
func (s *State) Leading() bool { return s.leading.Load() }

// Close gives up the lead (the Lease is released), stops electing and
// deletes this replica's heartbeat.
func (s *State) Close() {
	s.once.Do(func() {
		s.stop()
		<-s.done
		<-s.beatDone
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.c.client.CoordinationV1().Leases(s.c.opts.Namespace).Delete(ctx, heartbeatName(s.identity), metav1.DeleteOptions{})
	})
}

// heartbeatName is the Lease a replica renews while it runs.
func heartbeatName(identity string) string {
	name := "hybox-replica-" + strings.ToLower(identity)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || len(name) > 63 {
		sum := sha256.Sum256([]byte(identity))
		name = "hybox-replica-" + hex.EncodeToString(sum[:8])
	}
	return name
}

// beat renews this replica's heartbeat Lease once (made when missing).
func (s *State) beat(ctx context.Context) error {
	leases := s.c.client.CoordinationV1().Leases(s.c.opts.Namespace)
	name := heartbeatName(s.identity)
	sent := time.Now()
	now := metav1.NewMicroTime(sent)
	secs := int32(s.lease / time.Second)
	if secs < 1 {
		secs = 1
	}
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelManagedBy: managedBy}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &s.identity, LeaseDurationSeconds: &secs,
				AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
	} else if err == nil {
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &s.identity, &secs, &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return s.apiError("renew Lease "+name, err)
	}
	at := int64(sent.Sub(s.origin)) + 1 // 0 is "never"
	if prev := s.lastBeat.Swap(at); prev != 0 && time.Duration(at-prev) > lapseAfter(s.lease) {
		s.lapses.Add(1)
	}
	return nil
}

// Lapses implements shared.Store. A gap of three quarters of the lease
// between two renewals (one is due every third, so one failed renewal is
// not a lapse) counts: the others see a replica gone after the whole
// lease, so this one stops what they could take over a quarter of the
// lease before they can take it (the replicas' clocks must agree to
// better than that).
func (s *State) Lapses() (uint64, bool) {
	n := s.lapses.Load()
	return n, time.Since(s.origin)-time.Duration(s.lastBeat.Load()) > lapseAfter(s.lease)
}

// lapseAfter is how long a replica may go without renewing its heartbeat
// before it counts as a lapse.
func lapseAfter(lease time.Duration) time.Duration { return lease * 3 / 4 }

// heartbeat renews the heartbeat every third of the lease until ctx ends.
func (s *State) heartbeat(ctx context.Context) {
	defer close(s.beatDone)
	t := time.NewTicker(s.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			bctx, cancel := context.WithTimeout(ctx, s.lease/3)
			if err := s.beat(bctx); err != nil && ctx.Err() == nil {
				s.c.opts.Logger.Warn("renew this replica's heartbeat", "err", err)
			}
			cancel()
		}
	}
}

// Alive implements shared.Store: the replica's heartbeat was renewed
// within its lease.
func (s *State) Alive(ctx context.Context, name string) (bool, error) {
	if name == s.identity {
		return true, nil
	}
	l, err := s.c.client.CoordinationV1().Leases(s.c.opts.Namespace).Get(ctx, heartbeatName(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, s.apiError("get Lease "+heartbeatName(name), err)
	}
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return false, nil
	}
	return time.Since(l.Spec.RenewTime.Time) < time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second, nil
}

func (s *State) res() dynamic.ResourceInterface { return s.dyn.Namespace(s.c.opts.Namespace) }

func (s *State) apiError(what string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %s: %v", runtimes.ErrNotFound, what, err)
	}
	return fmt.Errorf("%w: %s: %v", runtimes.ErrUnavailable, what, err)
}

// sandboxObject is the custom resource of r.
func (s *State) sandboxObject(r shared.Record) (spec, status map[string]any, err error) {
	var rec map[string]any
	if err := json.Unmarshal(r.Data, &rec); err != nil {
		return nil, nil, fmt.Errorf("record %s: %w", r.ID, err)
	}
	spec = map[string]any{"runtime": r.Runtime, "image": r.Image, "record": rec}
	if owner, _ := rec["owner"].(string); owner != "" {
		spec["owner"] = owner
	}
	ready, when := "False", r.LastTransitionAt.UTC().Format(time.RFC3339)
	if r.State == "Running" {
		ready = "True"
	}
	cond := map[string]any{"type": "Ready", "status": ready, "lastTransitionTime": when}
	if r.Reason != "" {
		cond["reason"] = r.Reason
	}
	if r.Message != "" {
		cond["message"] = r.Message
	}
	status = map[string]any{"state": r.State, "lastTransitionTime": when, "conditions": []any{cond}}
	if r.Reason != "" {
		status["reason"] = r.Reason
	}
	if r.Message != "" {
		status["message"] = r.Message
	}
	return spec, status, nil
}

// Create implements shared.Store.
func (s *State) Create(ctx context.Context, r shared.Record) error {
	spec, status, err := s.sandboxObject(r)
	if err != nil {
		return err
	}
	return s.createSandbox(ctx, r.ID, nil, spec, status, "create Sandbox "+r.ID)
}

// createSandbox creates the Sandbox resource id with labels (beside the
// managed-by and sandbox ones), spec and status; one that exists is
// errdefs.ErrConflict, other failures are what, with the API's reason.
func (s *State) createSandbox(ctx context.Context, id string, labels map[string]any, spec, status map[string]any, what string) error {
	all := map[string]any{LabelManagedBy: managedBy, LabelSandbox: id}
	maps.Copy(all, labels)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": SandboxGroup + "/" + SandboxVersion,
		"kind":       "Sandbox",
		"metadata":   map[string]any{"name": id, "labels": all},
		"spec":       spec,
		"status":     status,
	}}
	if _, err := s.res().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%w: Sandbox %s exists", errdefs.ErrConflict, id)
		}
		return s.apiError(what, err)
	}
	return nil
}

// Put implements shared.Store: one JSON patch that replaces spec and
// status (a patch, unlike an update, needs no resourceVersion: the last
// write wins), which fails on a record that is gone.
func (s *State) Put(ctx context.Context, r shared.Record) error {
	spec, status, err := s.sandboxObject(r)
	if err != nil {
		return err
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "replace", "path": "/spec", "value": spec},
		{"op": "replace", "path": "/status", "value": status},
	})
	if err != nil {
		return err
	}
	if _, err := s.res().Patch(ctx, r.ID, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return s.apiError("put Sandbox "+r.ID, err)
	}
	return nil
}

// TakeOver implements shared.Store: the same patch as Put, preceded by a
// test that spec.owner is still from and, with r.Version, one that
// metadata.resourceVersion is still that (the API server applies a JSON
// patch atomically and refuses it whole when a test fails, and every
// write changes the resourceVersion).
func (s *State) TakeOver(ctx context.Context, r shared.Record, from string) error {
	spec, status, err := s.sandboxObject(r)
	if err != nil {
		return err
	}
	ops := []map[string]any{{"op": "test", "path": "/spec/owner", "value": from}}
	if r.Version != "" {
		ops = append(ops, map[string]any{"op": "test", "path": "/metadata/resourceVersion", "value": r.Version})
	}
	ops = append(ops, map[string]any{"op": "replace", "path": "/spec", "value": spec},
		map[string]any{"op": "replace", "path": "/status", "value": status})
	patch, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	_, perr := s.res().Patch(ctx, r.ID, types.JSONPatchType, patch, metav1.PatchOptions{})
	if perr == nil {
		return nil
	}
	if !apierrors.IsInvalid(perr) {
		return s.apiError("take over Sandbox "+r.ID, perr)
	}
	// A failed test, or another invalid patch: only a record that has
	// really changed is a conflict.
	cur, err := s.Get(ctx, r.ID)
	if err != nil {
		return err
	}
	var now struct {
		Owner string `json:"owner"`
	}
	_ = json.Unmarshal(cur.Data, &now)
	if now.Owner != from || (r.Version != "" && cur.Version != r.Version) {
		return fmt.Errorf("%w: sandbox %s changed (owner %q, version %s) since it was read (owner %q, version %s)",
			errdefs.ErrConflict, r.ID, now.Owner, cur.Version, from, r.Version)
	}
	return s.apiError("take over Sandbox "+r.ID, perr)
}

// recordOf reads a Sandbox resource back.
func recordOf(obj *unstructured.Unstructured) (shared.Record, error) {
	r := shared.Record{ID: obj.GetName()}
	rec, ok, err := unstructured.NestedMap(obj.Object, "spec", "record")
	if err != nil || !ok {
		return r, fmt.Errorf("Sandbox %s has no spec.record (%v)", r.ID, err)
	}
	if r.Data, err = json.Marshal(rec); err != nil {
		return r, err
	}
	r.Version = obj.GetResourceVersion()
	r.Runtime, _, _ = unstructured.NestedString(obj.Object, "spec", "runtime")
	r.Image, _, _ = unstructured.NestedString(obj.Object, "spec", "image")
	r.State, _, _ = unstructured.NestedString(obj.Object, "status", "state")
	r.Reason, _, _ = unstructured.NestedString(obj.Object, "status", "reason")
	r.Message, _, _ = unstructured.NestedString(obj.Object, "status", "message")
	if t, _, _ := unstructured.NestedString(obj.Object, "status", "lastTransitionTime"); t != "" {
		r.LastTransitionAt, _ = time.Parse(time.RFC3339, t)
	}
	return r, nil
}

// Get implements shared.Store.
func (s *State) Get(ctx context.Context, id string) (shared.Record, error) {
	if !validID(id) {
		return shared.Record{}, fmt.Errorf("%w: sandbox %s", runtimes.ErrNotFound, id)
	}
	obj, err := s.res().Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		return shared.Record{}, s.apiError("get Sandbox "+id, err)
	}
	if _, member := obj.GetLabels()[LabelPoolMember]; member {
		return shared.Record{}, fmt.Errorf("%w: sandbox %s (an idle pool member)", runtimes.ErrNotFound, id)
	}
	return recordOf(obj)
}

// List implements shared.Store.
func (s *State) List(ctx context.Context) ([]shared.Record, error) {
	var out []shared.Record
	opts := metav1.ListOptions{Limit: 500, LabelSelector: "!" + LabelPoolMember}
	for {
		l, err := s.res().List(ctx, opts)
		if err != nil {
			return nil, s.apiError("list Sandboxes", err)
		}
		for i := range l.Items {
			r, err := recordOf(&l.Items[i])
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			return out, nil
		}
	}
}

// Delete implements shared.Store.
func (s *State) Delete(ctx context.Context, id string) error {
	if !validID(id) {
		return nil
	}
	if err := s.c.client.CoreV1().Secrets(s.c.opts.Namespace).Delete(ctx, blobName(id), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return s.apiError("delete Secret "+blobName(id), err)
	}
	if err := s.res().Delete(ctx, id, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return s.apiError("delete Sandbox "+id, err)
	}
	return nil
}

// validID reports whether id can name an object (sandbox ids are UUIDs; a
// request for anything else is simply not found).
func validID(id string) bool { return len(validation.IsDNS1123Subdomain(id)) == 0 }

// blobName is the Secret holding a sandbox's sealed egress state.
func blobName(id string) string { return "hybox-egress-" + id }

// blobKey is the key of the sealed state in that Secret.
const blobKey = "sealed"

// PutBlob implements shared.Store.
func (s *State) PutBlob(ctx context.Context, id string, b []byte) error {
	secrets := s.c.client.CoreV1().Secrets(s.c.opts.Namespace)
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: blobName(id), Labels: map[string]string{LabelManagedBy: managedBy, LabelSandbox: id}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{blobKey: b},
	}
	_, err := secrets.Update(ctx, sec, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
	}
	if err != nil {
		return s.apiError("put Secret "+sec.Name, err)
	}
	return nil
}

// GetBlob implements shared.Store.
func (s *State) GetBlob(ctx context.Context, id string) ([]byte, error) {
	sec, err := s.c.client.CoreV1().Secrets(s.c.opts.Namespace).Get(ctx, blobName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, s.apiError("get Secret "+blobName(id), err)
	}
	return sec.Data[blobKey], nil
}

// Key implements shared.Store: the Secret hybox-key-<name>, made by the
// first replica that asks (a create, so two replicas starting at once
// agree: the second one's create fails and it reads the first one's).
func (s *State) Key(ctx context.Context, name string, size int) ([]byte, error) {
	secrets := s.c.client.CoreV1().Secrets(s.c.opts.Namespace)
	secName := "hybox-key-" + strings.ToLower(name)
	for range 3 {
		sec, err := secrets.Get(ctx, secName, metav1.GetOptions{})
		if err == nil {
			if b := sec.Data["key"]; len(b) >= size {
				return b, nil
			}
			return nil, fmt.Errorf("%w: Secret %s holds no key of %d bytes", runtimes.ErrUnavailable, secName, size)
		}
		if !apierrors.IsNotFound(err) {
			return nil, s.apiError("get Secret "+secName, err)
		}
		b := make([]byte, size)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: secName, Labels: map[string]string{LabelManagedBy: managedBy}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{"key": b},
		}, metav1.CreateOptions{})
		if err == nil {
			return b, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, s.apiError("create Secret "+secName, err)
		}
	}
	return nil, fmt.Errorf("%w: Secret %s could not be read or made", runtimes.ErrUnavailable, secName)
}
