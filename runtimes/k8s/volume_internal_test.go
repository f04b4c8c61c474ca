package k8s

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/hybox-dev/hybox/runtimes"
)

// TestAddVolumes: a host volume is a hostPath volume of its resolved
// directory (subPath included, type Directory); a claim used twice is one
// Pod volume with two mounts, each with its subPath; readOnly is on the
// mount.
func TestAddVolumes(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "share", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(filepath.Join(root, "share", "sub"))
	r := testRuntime(t)
	r.c.opts.AllowedHostPaths = []string{root}
	spec := runtimes.Spec{ID: "v", Image: "i:1", Volumes: []runtimes.Volume{
		{Name: "h", HostPath: filepath.Join(root, "share"), SubPath: "sub", MountPath: "/h/", ReadOnly: true},
		{Name: "a", Managed: true, Claim: "data", SubPath: "a", MountPath: "/a"},
		{Name: "b", Managed: true, Claim: "data", SubPath: "b", MountPath: "/b", ReadOnly: true},
	}}
	p := r.pod(spec, nil)
	base := len(p.Spec.Volumes)
	if err := r.addVolumes(spec, p); err != nil {
		t.Fatal(err)
	}
	vols := p.Spec.Volumes[base:]
	if len(vols) != 2 {
		t.Fatalf("Pod volumes %+v, want a hostPath and one claim", vols)
	}
	if hp := vols[0].HostPath; hp == nil || hp.Path != real || *hp.Type != corev1.HostPathDirectory {
		t.Fatalf("host volume %+v, want hostPath %s of type Directory", vols[0], real)
	}
	if c := vols[1].PersistentVolumeClaim; c == nil || c.ClaimName != "data" {
		t.Fatalf("claim volume %+v", vols[1])
	}
	mounts := p.Spec.Containers[0].VolumeMounts
	mounts = mounts[len(mounts)-3:]
	want := []corev1.VolumeMount{
		{Name: vols[0].Name, MountPath: "/h", ReadOnly: true},
		{Name: vols[1].Name, MountPath: "/a", SubPath: "a"},
		{Name: vols[1].Name, MountPath: "/b", SubPath: "b", ReadOnly: true},
	}
	for i := range want {
		if !reflect.DeepEqual(mounts[i], want[i]) {
			t.Errorf("mount %d: %+v, want %+v", i, mounts[i], want[i])
		}
	}
}
