package k8s_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
)

// volumeCluster is cluster with allowed host paths.
func volumeCluster(t *testing.T, allowed ...string) (*k8s.Cluster, *k8stest.Env, string) {
	t.Helper()
	env := k8stest.Cluster(t)
	execdImage := env.ExecdImage(t)
	image := env.Image(t)
	c, err := k8s.New(context.Background(), k8s.Options{
		Config: env.Config, Namespace: k8stest.Namespace, ExecdImage: execdImage,
		ReadyTimeout: 2 * time.Minute, AllowedHostPaths: allowed,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, env, image
}

// TestVolumes: host volumes under the allowed host paths are hostPath
// volumes (subPath and readOnly honoured); pvc volumes are the
// namespace's PersistentVolumeClaims: one is made when missing (and bound
// here to a PersistentVolume the test makes, as the cluster has no
// provisioner), another sandbox mounts the existing claim, and the claim
// goes with the sandbox that made it once no other uses it. Bad volumes
// are ErrInvalid with the reason and leave nothing behind.
func TestVolumes(t *testing.T) {
	root := t.TempDir()
	allowed := filepath.Join(root, "allowed")
	if err := os.MkdirAll(filepath.Join(allowed, "share", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "outside"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(allowed, "share", "sub", "hello.txt"), []byte("from-the-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, env, image := volumeCluster(t, allowed)
	rt := c.Runtime("runc", "runc")
	ctx := context.Background()
	pvcs := env.Client.CoreV1().PersistentVolumeClaims(k8stest.Namespace)
	create := func(t *testing.T, spec runtimes.Spec) runtimes.Sandbox {
		t.Helper()
		sb, err := rt.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = sb.Close(ctx)
			_ = rt.Destroy(ctx, spec)
		})
		return sb
	}

	t.Run("BadInput", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			vol  runtimes.Volume
			want string
		}{
			{"outside the allowed paths", runtimes.Volume{Name: "v", HostPath: filepath.Join(root, "outside"), MountPath: "/data"}, "not under an allowed host path"},
			{"relative host path", runtimes.Volume{Name: "v", HostPath: "share", MountPath: "/data"}, "absolute"},
			{"missing host path", runtimes.Volume{Name: "v", HostPath: filepath.Join(allowed, "none"), MountPath: "/data"}, "no such file"},
			{"subPath climbs out", runtimes.Volume{Name: "v", HostPath: filepath.Join(allowed, "share"), SubPath: "../..", MountPath: "/data"}, "subPath"},
			{"reserved mount path", runtimes.Volume{Name: "v", HostPath: filepath.Join(allowed, "share"), MountPath: "/.hybox/x"}, "reserved"},
			{"relative mount path", runtimes.Volume{Name: "v", HostPath: filepath.Join(allowed, "share"), MountPath: "data"}, "absolute"},
			{"claim missing, not to be made", runtimes.Volume{Name: "v", Managed: true, Claim: "no-such-claim", MountPath: "/data"}, "does not exist"},
			{"claim name", runtimes.Volume{Name: "v", Managed: true, Claim: "Bad_Name", CreateClaim: true, MountPath: "/data"}, "claimName"},
			{"claim subPath", runtimes.Volume{Name: "v", Managed: true, Claim: "c", CreateClaim: true, SubPath: "/abs", MountPath: "/data"}, "subPath"},
			{"claim storage", runtimes.Volume{Name: "v", Managed: true, Claim: "c", CreateClaim: true, Storage: "lots", MountPath: "/data"}, "storage"},
			// The test cluster has no StorageClass and no free volume.
			{"claim nothing can bind", runtimes.Volume{Name: "v", Managed: true, Claim: "never-bound", CreateClaim: true, MountPath: "/data"}, "would never be bound"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				spec := runtimes.Spec{ID: "badvol-" + suffix(), Image: image, Volumes: []runtimes.Volume{tc.vol}}
				_, err := rt.Create(ctx, spec)
				if !errors.Is(err, runtimes.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "volume v") {
					t.Fatalf("create: %v, want ErrInvalid naming volume v and %q", err, tc.want)
				}
				assertGone(t, env, spec.ID)
			})
		}
		if list, err := pvcs.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) > 0 {
			t.Fatalf("claims after bad creates: %v %v", list, err)
		}
	})

	t.Run("Host", func(t *testing.T) {
		spec := runtimes.Spec{ID: "hostvol-" + suffix(), Image: image, Entrypoint: []string{"sleep", "infinity"},
			Volumes: []runtimes.Volume{
				{Name: "ro", HostPath: filepath.Join(allowed, "share"), SubPath: "sub", MountPath: "/ro", ReadOnly: true},
				{Name: "rw", HostPath: filepath.Join(allowed, "share"), MountPath: "/rw"},
			}}
		sb := create(t, spec)
		if got := command(t, sb, "cat /ro/hello.txt"); got != "from-the-host" {
			t.Errorf("the subPath's file: %q", got)
		}
		if got := command(t, sb, "touch /ro/new 2>/dev/null && echo wrote || echo refused"); got != "refused" {
			t.Errorf("a write to the read-only volume: %s", got)
		}
		command(t, sb, "echo from-the-pod > /rw/back.txt")
		if got, err := os.ReadFile(filepath.Join(allowed, "share", "back.txt")); err != nil || string(got) != "from-the-pod\n" {
			t.Errorf("the Pod's write on the host: %q %v", got, err)
		}
	})

	t.Run("PVC", func(t *testing.T) {
		// The cluster has no provisioner: PersistentVolumes bound ahead to
		// the claims the creates are about to make.
		pvs := env.Client.CoreV1().PersistentVolumes()
		makePV := func(claim string) (dir string, pv *corev1.PersistentVolume) {
			dir = filepath.Join(root, claim)
			if err := os.MkdirAll(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			pv = &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: "hybox-test-" + claim},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
					ClaimRef:                      &corev1.ObjectReference{Namespace: k8stest.Namespace, Name: claim},
					PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
				},
			}
			if _, err := pvs.Create(ctx, pv, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = pvcs.Delete(ctx, claim, metav1.DeleteOptions{})
				waitClaimGone(t, pvcs.Get, claim)
				if err := pvs.Delete(ctx, pv.Name, metav1.DeleteOptions{}); err != nil {
					t.Error(err)
				}
			})
			return dir, pv
		}
		claim := "data-" + suffix()
		dir, pv := makePV(claim)
		maker := runtimes.Spec{ID: "pvcmaker-" + suffix(), Image: image, Entrypoint: []string{"sleep", "infinity"},
			Volumes: []runtimes.Volume{{Name: "data", Managed: true, Claim: claim, CreateClaim: true, DeleteClaim: true,
				SubPath: "work", MountPath: "/data"}}}
		sbA, err := rt.Create(ctx, maker)
		if err != nil {
			t.Fatal(err)
		}
		made, err := pvcs.Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if made.Labels[k8s.LabelCreatedBy] != maker.ID || made.Status.Phase != corev1.ClaimBound || made.Spec.VolumeName != pv.Name {
			t.Errorf("the made claim: labels %v, phase %s, volume %s", made.Labels, made.Status.Phase, made.Spec.VolumeName)
		}
		command(t, sbA, "echo kept > /data/file.txt")
		if got, err := os.ReadFile(filepath.Join(dir, "work", "file.txt")); err != nil || string(got) != "kept\n" {
			t.Errorf("the claim's volume on the host (subPath work): %q %v", got, err)
		}
		user := runtimes.Spec{ID: "pvcuser-" + suffix(), Image: image, Entrypoint: []string{"sleep", "infinity"},
			Volumes: []runtimes.Volume{{Name: "data", Managed: true, Claim: claim, MountPath: "/data", ReadOnly: true}}}
		sbB := create(t, user)
		if got := command(t, sbB, "cat /data/work/file.txt"); got != "kept" {
			t.Errorf("the existing claim in another sandbox: %q", got)
		}
		// The maker goes first: its claim stays while the user's Pod has it.
		_ = sbA.Close(ctx)
		if err := rt.Destroy(ctx, maker); err != nil {
			t.Fatal(err)
		}
		if got, err := pvcs.Get(ctx, claim, metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
			t.Fatalf("the claim another sandbox uses was removed: %v", err)
		}
		// The user did not make it: its destroy leaves the claim.
		_ = sbB.Close(ctx)
		if err := rt.Destroy(ctx, user); err != nil {
			t.Fatal(err)
		}
		if _, err := pvcs.Get(ctx, claim, metav1.GetOptions{}); err != nil {
			t.Fatalf("the claim after the user's destroy: %v", err)
		}
		// A sandbox that makes its claim and is alone with it takes it along.
		claim2 := "data2-" + suffix()
		makePV(claim2)
		alone := runtimes.Spec{ID: "pvcalone-" + suffix(), Image: image, Entrypoint: []string{"sleep", "infinity"},
			Volumes: []runtimes.Volume{{Name: "data", Managed: true, Claim: claim2, CreateClaim: true, DeleteClaim: true, MountPath: "/data"}}}
		sbC, err := rt.Create(ctx, alone)
		if err != nil {
			t.Fatal(err)
		}
		command(t, sbC, "echo alone > /data/file.txt")
		_ = sbC.Close(ctx)
		if err := rt.Destroy(ctx, alone); err != nil {
			t.Fatal(err)
		}
		waitClaimGone(t, pvcs.Get, claim2)
	})
}

// waitClaimGone waits until claim no longer exists (its protection holds it
// until the Pods that use it are gone).
func waitClaimGone(t *testing.T, get func(context.Context, string, metav1.GetOptions) (*corev1.PersistentVolumeClaim, error), claim string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := get(context.Background(), claim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %s is still there (err %v)", claim, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
