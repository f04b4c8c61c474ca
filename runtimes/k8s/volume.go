package k8s

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/hybox-dev/hybox/internal/cleanup"
	"github.com/hybox-dev/hybox/runtimes"
)

// Labels and annotations of the PersistentVolumeClaims a create makes.
const (
	// LabelCreatedBy holds the id of the sandbox whose create made a
	// PersistentVolumeClaim.
	LabelCreatedBy = "hybox.dev/created-by"
	// AnnotationDeleteWithSandbox ("true") removes the claim when the
	// sandbox that made it is destroyed and no other sandbox's Pod uses
	// it (pvc.deleteOnSandboxTermination).
	AnnotationDeleteWithSandbox = "hybox.dev/delete-with-sandbox"
)

// defaultClaimSize is the storage a made claim asks for without
// pvc.storage.
var defaultClaimSize = resource.MustParse("1Gi")

// reservedMounts are the Pod's own directories, where no volume may go.
var reservedMounts = []string{"/.hybox"}

var _ runtimes.ClaimOwner = (*Runtime)(nil)

// OwnsClaims implements runtimes.ClaimOwner: a pvc volume of a Pod sandbox
// is a PersistentVolumeClaim of the namespace, not a directory of the
// server's.
func (r *Runtime) OwnsClaims() bool { return true }

// checkVolumes refuses volumes that cannot be mounted, with the reason,
// before anything is made: a mount path that is not absolute, reserved or
// used twice; a host path outside the allowed host paths (resolved on the
// server's filesystem, see Options.AllowedHostPaths); a subPath that
// climbs out; a claim name that is no object name, a storage size that is
// no quantity, and a claim that does not exist when the create may not
// make it.
func (r *Runtime) checkVolumes(ctx context.Context, spec runtimes.Spec) error {
	if _, err := runtimes.Targets(spec.Volumes, reservedMounts...); err != nil {
		return err
	}
	st := &storageLists{r: r}
	for i, v := range spec.Volumes {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: volume %s: %s", runtimes.ErrInvalid, v.Label(i), fmt.Sprintf(format, args...))
		}
		if v.Claim == "" {
			if v.Managed {
				return bad("a named volume without a claim name")
			}
			if _, err := v.Source(r.c.opts.AllowedHostPaths); err != nil {
				return bad("%v", err)
			}
			continue
		}
		if errs := validation.IsDNS1123Subdomain(v.Claim); len(errs) > 0 {
			return bad("pvc.claimName %q: %s", v.Claim, strings.Join(errs, "; "))
		}
		if err := runtimes.CheckSubPath(v.SubPath); err != nil {
			return bad("%v", err)
		}
		if v.Storage != "" {
			if q, err := resource.ParseQuantity(v.Storage); err != nil || q.Sign() <= 0 {
				return bad("pvc.storage %q is no positive quantity (for example 1Gi)", v.Storage)
			}
		}
		pvc, err := r.c.client.CoreV1().PersistentVolumeClaims(r.c.opts.Namespace).Get(ctx, v.Claim, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && !v.CreateClaim:
			return bad("PersistentVolumeClaim %s does not exist in namespace %s and createIfNotExists is false", v.Claim, r.c.opts.Namespace)
		case err != nil && !apierrors.IsNotFound(err):
			return r.apiError("get PersistentVolumeClaim "+v.Claim, err)
		}
		var class *string
		size := defaultClaimSize
		if v.Storage != "" {
			size = resource.MustParse(v.Storage)
		}
		if err == nil {
			if pvc.Status.Phase == corev1.ClaimBound {
				continue
			}
			class, size = pvc.Spec.StorageClassName, pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		}
		if why := st.unbindable(ctx, v.Claim, class, size); why != "" {
			return bad("PersistentVolumeClaim %s would never be bound: %s", v.Claim, why)
		}
	}
	return nil
}

// storageLists are the cluster's StorageClasses and PersistentVolumes,
// listed at most once per create (checkVolumes), and only when one of its
// claims is not bound.
type storageLists struct {
	r       *Runtime
	listed  bool
	ok      bool // both lists were read
	classes []storagev1.StorageClass
	pvs     []corev1.PersistentVolume
}

// list reads both lists the first time; false when the server may not
// (then nothing is checked).
func (st *storageLists) list(ctx context.Context) bool {
	if st.listed {
		return st.ok
	}
	st.listed = true
	classes, err := st.r.c.client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		st.r.c.opts.Logger.Debug("cannot list StorageClasses; not checking that a claim can be bound", "err", err)
		return false
	}
	pvs, err := st.r.c.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		st.r.c.opts.Logger.Debug("cannot list PersistentVolumes; not checking that a claim can be bound", "err", err)
		return false
	}
	st.classes, st.pvs, st.ok = classes.Items, pvs.Items, true
	return true
}

// unbindable says why the claim named claim, of StorageClass class (nil:
// the default class; "": none) for size, cannot be bound, "" when it can
// or when the server may not look: a class that exists (or the cluster's
// default) is trusted to provision; without one, an unbound
// PersistentVolume of the class, ReadWriteOnce, large enough and free or
// reserved for the claim, must wait for it. A Pod of such a claim would
// otherwise stay Pending until the create times out.
func (st *storageLists) unbindable(ctx context.Context, claim string, class *string, size resource.Quantity) string {
	if !st.list(ctx) {
		return ""
	}
	want := ""
	if class != nil {
		want = *class
	}
	for _, sc := range st.classes {
		if class == nil && sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			return ""
		}
		if class != nil && want != "" && sc.Name == want {
			return ""
		}
	}
	for _, pv := range st.pvs {
		c := pv.Spec.Capacity[corev1.ResourceStorage]
		ref := pv.Spec.ClaimRef
		free := ref == nil || (ref.Namespace == st.r.c.opts.Namespace && ref.Name == claim)
		// A volume just made has no phase until the controller sees it.
		open := pv.Status.Phase == corev1.VolumeAvailable || pv.Status.Phase == corev1.VolumePending || pv.Status.Phase == ""
		if free && open && pv.Spec.StorageClassName == want && c.Cmp(size) >= 0 &&
			slices.Contains(pv.Spec.AccessModes, corev1.ReadWriteOnce) {
			return ""
		}
	}
	what, pv := "the cluster has no default StorageClass", "without a class"
	if want != "" {
		what, pv = "the cluster has no StorageClass "+want, "of class "+want
	}
	return fmt.Sprintf("%s and no free ReadWriteOnce PersistentVolume %s of %s or more (StorageClasses: %s)",
		what, pv, size.String(), classNames(st.classes))
}

// classNames lists StorageClasses for a message.
func classNames(items []storagev1.StorageClass) string {
	if len(items) == 0 {
		return "none"
	}
	names := make([]string, 0, len(items))
	for _, sc := range items {
		names = append(names, sc.Name)
	}
	return strings.Join(names, ", ")
}

// addVolumes mounts spec's volumes into the sandbox container of p: a
// host volume as a hostPath volume of its resolved directory (subPath
// included, type Directory), a named volume as its
// PersistentVolumeClaim, once per claim, with subPath on the mount.
//
// # Errors
// runtimes.ErrInvalid when a host path no longer passes the allow-list.
func (r *Runtime) addVolumes(spec runtimes.Spec, p *corev1.Pod) error {
	dir := corev1.HostPathDirectory
	claims := map[string]string{} // claim -> Pod volume
	var mounts []corev1.VolumeMount
	for i, v := range spec.Volumes {
		name := fmt.Sprintf("vol-%d", i)
		m := corev1.VolumeMount{Name: name, MountPath: path.Clean(v.MountPath), ReadOnly: v.ReadOnly}
		switch {
		case v.Claim != "":
			if have, ok := claims[v.Claim]; ok {
				m.Name = have
			} else {
				claims[v.Claim] = name
				p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.Claim}}})
			}
			m.SubPath = v.SubPath
		default:
			src, err := v.Source(r.c.opts.AllowedHostPaths)
			if err != nil {
				return fmt.Errorf("%w: volume %s: %v", runtimes.ErrInvalid, v.Label(i), err)
			}
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: src, Type: &dir}}})
		}
		mounts = append(mounts, m)
	}
	for i := range p.Spec.Containers {
		if c := &p.Spec.Containers[i]; c.Name == containerName {
			c.VolumeMounts = append(c.VolumeMounts, mounts...)
		}
	}
	return nil
}

// ensureClaims makes the PersistentVolumeClaims of spec that do not exist
// and may be made (pvc.createIfNotExists): ReadWriteOnce, pvc.storage or
// 1Gi, the namespace's default StorageClass, labelled with the sandbox
// that made them. It returns an undo that deletes what it made.
func (r *Runtime) ensureClaims(ctx context.Context, spec runtimes.Spec) (func(), error) {
	pvcs := r.c.client.CoreV1().PersistentVolumeClaims(r.c.opts.Namespace)
	var made []string
	undo := func() {
		for _, n := range made {
			if err := pvcs.Delete(context.WithoutCancel(ctx), n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				r.c.opts.Logger.Warn("remove a PersistentVolumeClaim of a failed create", "claim", n, "err", err)
			}
		}
	}
	cu := cleanup.Make(undo)
	defer cu.Clean()
	seen := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Claim == "" || !v.CreateClaim || seen[v.Claim] {
			continue
		}
		seen[v.Claim] = true
		if _, err := pvcs.Get(ctx, v.Claim, metav1.GetOptions{}); err == nil {
			continue
		} else if !apierrors.IsNotFound(err) {
			return nil, r.apiError("get PersistentVolumeClaim "+v.Claim, err)
		}
		size := defaultClaimSize
		if v.Storage != "" {
			size = resource.MustParse(v.Storage) // checked by checkVolumes
		}
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: v.Claim, Namespace: r.c.opts.Namespace,
				Labels: map[string]string{LabelManagedBy: managedBy, LabelCreatedBy: spec.ID}},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			},
		}
		if v.DeleteClaim {
			pvc.Annotations = map[string]string{AnnotationDeleteWithSandbox: "true"}
		}
		_, err := pvcs.Create(ctx, pvc, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			continue // made meanwhile by another create: not ours
		case err != nil:
			return nil, r.apiError("create PersistentVolumeClaim "+v.Claim, err)
		}
		made = append(made, v.Claim)
	}
	cu.Release()
	return undo, nil
}

// releaseClaims deletes the PersistentVolumeClaims sandbox id made with
// AnnotationDeleteWithSandbox, unless the Pod of another sandbox uses
// them (the claim's own protection keeps it until the Pod is gone).
func (r *Runtime) releaseClaims(ctx context.Context, id string) error {
	ns := r.c.opts.Namespace
	pvcs := r.c.client.CoreV1().PersistentVolumeClaims(ns)
	list, err := pvcs.List(ctx, metav1.ListOptions{LabelSelector: LabelCreatedBy + "=" + id})
	if err != nil {
		return fmt.Errorf("%w: list PersistentVolumeClaims: %v", runtimes.ErrUnavailable, err)
	}
	var doomed []string
	for _, c := range list.Items {
		if c.Annotations[AnnotationDeleteWithSandbox] == "true" && c.DeletionTimestamp == nil {
			doomed = append(doomed, c.Name)
		}
	}
	if len(doomed) == 0 {
		return nil
	}
	pods, err := r.c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + managedBy})
	if err != nil {
		return fmt.Errorf("%w: list Pods: %v", runtimes.ErrUnavailable, err)
	}
	var errs []error
	for _, name := range doomed {
		var users []string
		for _, p := range pods.Items {
			if p.Labels[LabelSandbox] == id || p.DeletionTimestamp != nil {
				continue
			}
			for _, v := range p.Spec.Volumes {
				if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == name {
					users = append(users, p.Labels[LabelSandbox])
				}
			}
		}
		if len(users) > 0 {
			r.c.opts.Logger.Info("PersistentVolumeClaim kept: other sandboxes use it", "claim", name, "usedBy", users)
			continue
		}
		if err := pvcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("%w: delete PersistentVolumeClaim %s: %v", runtimes.ErrUnavailable, name, err))
		}
	}
	return errors.Join(errs...)
}
