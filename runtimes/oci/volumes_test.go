package oci_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/oci"
)

// TestVolumes mounts allowed host directories (read-write, read-only, a
// subPath) and refuses everything outside the allow-list, in Validate and
// in Create.
func TestVolumes(t *testing.T) {
	allowed := t.TempDir()
	outside := t.TempDir()
	for _, d := range []string{"rw", "ro", "sub/inner"} {
		if err := os.MkdirAll(filepath.Join(allowed, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(allowed, "ro", "f.txt"), []byte("from host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(allowed, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A symlink inside the allowed tree that leads out of it.
	if err := os.Symlink(outside, filepath.Join(allowed, "escape")); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, func(o *oci.Options) { o.AllowedHostPaths = []string{allowed} })
	rt := runtimeNamed(t, b, "runc")

	refused := []struct {
		name string
		vol  runtimes.Volume
		want string
	}{
		{"relative host path", runtimes.Volume{Name: "v", HostPath: "data", MountPath: "/data"}, "absolute"},
		{"outside the allow-list", runtimes.Volume{Name: "v", HostPath: outside, MountPath: "/data"}, "not under an allowed"},
		{"missing", runtimes.Volume{Name: "v", HostPath: filepath.Join(allowed, "nope"), MountPath: "/data"}, "no such file"},
		{"a file", runtimes.Volume{Name: "v", HostPath: filepath.Join(allowed, "file"), MountPath: "/data"}, "not a directory"},
		{"dot-dot in hostPath", runtimes.Volume{Name: "v", HostPath: allowed + "/../" + filepath.Base(outside), MountPath: "/data"}, "not under an allowed"},
		{"dot-dot in subPath", runtimes.Volume{Name: "v", HostPath: allowed, SubPath: "../x", MountPath: "/data"}, "subPath"},
		{"absolute subPath", runtimes.Volume{Name: "v", HostPath: allowed, SubPath: "/etc", MountPath: "/data"}, "subPath"},
		{"symlink out", runtimes.Volume{Name: "v", HostPath: filepath.Join(allowed, "escape"), MountPath: "/data"}, "not under an allowed"},
		{"relative mountPath", runtimes.Volume{Name: "v", HostPath: allowed, MountPath: "data"}, "mountPath"},
		{"reserved mountPath", runtimes.Volume{Name: "v", HostPath: allowed, MountPath: "/.hybox/bin"}, "reserved"},
	}
	for _, tc := range refused {
		t.Run("refuse "+tc.name, func(t *testing.T) {
			spec := testSpec(t, "vol-refused")
			spec.Volumes = []runtimes.Volume{tc.vol}
			err := rt.Validate(spec)
			if !errors.Is(err, runtimes.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want ErrInvalid mentioning %q", err, tc.want)
			}
			if _, err := rt.Create(context.Background(), spec); !errors.Is(err, runtimes.ErrInvalid) {
				t.Fatalf("Create: %v, want ErrInvalid", err)
			}
		})
	}
	// No allow-list: no volumes at all.
	none := newBackend(t)
	spec := testSpec(t, "vol-none")
	spec.Volumes = []runtimes.Volume{{Name: "v", HostPath: allowed, MountPath: "/data"}}
	if err := runtimeNamed(t, none, "runc").Validate(spec); !errors.Is(err, runtimes.ErrInvalid) {
		t.Fatalf("without an allow-list: %v, want ErrInvalid", err)
	}

	spec = testSpec(t, "vol-ok")
	spec.Volumes = []runtimes.Volume{
		{Name: "rw", HostPath: filepath.Join(allowed, "rw"), MountPath: "/mnt/rw"},
		{Name: "ro", HostPath: filepath.Join(allowed, "ro"), MountPath: "/mnt/ro", ReadOnly: true},
		{Name: "sub", HostPath: allowed, SubPath: "sub/inner", MountPath: "/mnt/sub"},
	}
	if err := rt.Validate(spec); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	c := newExecClient(t, mustCreate(t, rt, spec))
	if o := c.run("echo written > /mnt/rw/out.txt && echo inner > /mnt/sub/i.txt"); !o.Complete {
		t.Fatalf("write to rw volumes: %+v", o)
	}
	if got, err := os.ReadFile(filepath.Join(allowed, "rw", "out.txt")); err != nil || string(got) != "written\n" {
		t.Errorf("host sees %q, %v", got, err)
	}
	if got, err := os.ReadFile(filepath.Join(allowed, "sub", "inner", "i.txt")); err != nil || string(got) != "inner\n" {
		t.Errorf("subPath: host sees %q, %v", got, err)
	}
	if o := c.run("cat /mnt/ro/f.txt"); o.Stdout != "from host" {
		t.Errorf("read-only volume: %+v", o)
	}
	if o := c.run("echo x > /mnt/ro/g.txt"); o.EValue == "" || !strings.Contains(o.Stderr, "Read-only") {
		t.Errorf("write to a read-only volume: %+v", o)
	}
	if o := c.run("ls -A /mnt/sub"); o.Stdout != "i.txt" {
		t.Errorf("the subPath mount shows %+v, want only i.txt", o)
	}
}
