package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hybox-dev/hybox/internal/shared"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// The replicas' shared warm pools: a pool made through the API is a
// SandboxPool resource (its definition in spec.definition); an idle member
// is a Sandbox resource labelled LabelPoolMember with the member's record in
// spec.record and status.state StatePooled. A claim turns the member's
// resource into the sandbox's in one JSON patch whose first operation tests
// that the label is still there, so that of two replicas claiming the same
// member only one wins (the member's execd refuses the second reservation
// before that anyway).

const (
	// PoolResource names the SandboxPool resources.
	PoolResource = "sandboxpools"
	// LabelPoolMember marks a Sandbox resource that is an idle pool
	// member; its value is the pool's name.
	LabelPoolMember = "hybox.dev/pool-member"
	// StatePooled is the status.state of a member's resource.
	StatePooled = "Pooled"
)

// PoolGVR is the resource of the shared pool definitions.
var PoolGVR = schema.GroupVersionResource{Group: SandboxGroup, Version: SandboxVersion, Resource: PoolResource}

// PutPool implements shared.Store.
func (s *State) PutPool(ctx context.Context, name string, def []byte, create bool) error {
	var d map[string]any
	if err := json.Unmarshal(def, &d); err != nil {
		return fmt.Errorf("pool %s: %w", name, err)
	}
	res := s.poolDyn.Namespace(s.c.opts.Namespace)
	if !create {
		patch, err := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec", "value": map[string]any{"definition": d}}})
		if err != nil {
			return err
		}
		if _, err := res.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			return s.apiError("put SandboxPool "+name, err)
		}
		return nil
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": SandboxGroup + "/" + SandboxVersion,
		"kind":       "SandboxPool",
		"metadata":   map[string]any{"name": name, "labels": map[string]any{LabelManagedBy: managedBy}},
		"spec":       map[string]any{"definition": d},
	}}
	if _, err := res.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%w: pool %q exists", errdefs.ErrConflict, name)
		}
		return s.apiError("create SandboxPool "+name, err)
	}
	return nil
}

// DeletePool implements shared.Store.
func (s *State) DeletePool(ctx context.Context, name string) error {
	err := s.poolDyn.Namespace(s.c.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return s.apiError("delete SandboxPool "+name, err)
	}
	return nil
}

// Pools implements shared.Store.
func (s *State) Pools(ctx context.Context) (map[string][]byte, error) {
	l, err := s.poolDyn.Namespace(s.c.opts.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, s.apiError("list SandboxPools", err)
	}
	out := map[string][]byte{}
	for i := range l.Items {
		d, ok, err := unstructured.NestedMap(l.Items[i].Object, "spec", "definition")
		if err != nil || !ok {
			return nil, fmt.Errorf("SandboxPool %s has no spec.definition (%v)", l.Items[i].GetName(), err)
		}
		b, err := json.Marshal(d)
		if err != nil {
			return nil, err
		}
		out[l.Items[i].GetName()] = b
	}
	return out, nil
}

// memberSpec is the spec of member m's resource.
func memberSpec(m shared.Member) (map[string]any, error) {
	var rec map[string]any
	if err := json.Unmarshal(m.Data, &rec); err != nil {
		return nil, fmt.Errorf("pool member %s: %w", m.ID, err)
	}
	rt, _ := rec["runtime"].(string)
	img, _ := rec["image"].(string)
	return map[string]any{"runtime": rt, "image": img, "record": rec}, nil
}

// CreateMember implements shared.Store.
func (s *State) CreateMember(ctx context.Context, m shared.Member) error {
	spec, err := memberSpec(m)
	if err != nil {
		return err
	}
	return s.createSandbox(ctx, m.ID, map[string]any{LabelPoolMember: m.Pool}, spec, map[string]any{"state": StatePooled}, "create pool member "+m.ID)
}

// memberTest is the JSON patch operation that fails unless the resource is
// still a member of pool.
func memberTest(pool string) map[string]any {
	return map[string]any{"op": "test", "path": "/metadata/labels/" + strings.ReplaceAll(LabelPoolMember, "/", "~1"), "value": pool}
}

// PutMember implements shared.Store.
func (s *State) PutMember(ctx context.Context, m shared.Member) error {
	spec, err := memberSpec(m)
	if err != nil {
		return err
	}
	patch, err := json.Marshal([]map[string]any{memberTest(m.Pool), {"op": "replace", "path": "/spec", "value": spec}})
	if err != nil {
		return err
	}
	if _, err := s.res().Patch(ctx, m.ID, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: pool member %s: no longer a member", runtimes.ErrNotFound, m.ID)
		}
		return s.apiError("put pool member "+m.ID, err)
	}
	return nil
}

// Members implements shared.Store.
func (s *State) Members(ctx context.Context, pool string) ([]shared.Member, error) {
	sel := LabelPoolMember
	if pool != "" {
		sel += "=" + pool
	}
	l, err := s.res().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, s.apiError("list pool members", err)
	}
	out := make([]shared.Member, 0, len(l.Items))
	for i := range l.Items {
		r, err := recordOf(&l.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, shared.Member{ID: r.ID, Pool: l.Items[i].GetLabels()[LabelPoolMember], Data: r.Data})
	}
	return out, nil
}

// DeleteMember implements shared.Store: the member's resource, while it
// is one (errdefs.ErrConflict once it has become a sandbox's).
func (s *State) DeleteMember(ctx context.Context, id string) error {
	if !validID(id) {
		return nil
	}
	for range 3 {
		obj, err := s.res().Get(ctx, id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return s.apiError("get pool member "+id, err)
		}
		if _, member := obj.GetLabels()[LabelPoolMember]; !member {
			return fmt.Errorf("%w: pool member %s has been claimed", errdefs.ErrConflict, id)
		}
		rv := obj.GetResourceVersion()
		err = s.res().Delete(ctx, id, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		switch {
		case err == nil || apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err):
			return s.apiError("delete pool member "+id, err)
		}
		// Written meanwhile (marked ready, or claimed): look again.
	}
	return fmt.Errorf("%w: pool member %s keeps changing", runtimes.ErrUnavailable, id)
}

// ClaimMember implements shared.Store: one JSON patch that tests the
// member label, removes it and writes the sandbox's spec and status.
func (s *State) ClaimMember(ctx context.Context, r shared.Record) error {
	obj, err := s.res().Get(ctx, r.ID, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: pool member %s is gone", errdefs.ErrConflict, r.ID)
		}
		return s.apiError("get pool member "+r.ID, err)
	}
	pool, member := obj.GetLabels()[LabelPoolMember]
	if !member {
		return fmt.Errorf("%w: pool member %s was claimed by another replica", errdefs.ErrConflict, r.ID)
	}
	spec, status, err := s.sandboxObject(r)
	if err != nil {
		return err
	}
	patch, err := json.Marshal([]map[string]any{
		memberTest(pool),
		{"op": "remove", "path": "/metadata/labels/" + strings.ReplaceAll(LabelPoolMember, "/", "~1")},
		{"op": "replace", "path": "/spec", "value": spec},
		{"op": "replace", "path": "/status", "value": status},
	})
	if err != nil {
		return err
	}
	if _, err := s.res().Patch(ctx, r.ID, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: pool member %s was claimed by another replica", errdefs.ErrConflict, r.ID)
		}
		return s.apiError("claim pool member "+r.ID, err)
	}
	return nil
}
