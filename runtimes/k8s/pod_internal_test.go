package k8s

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"

	"github.com/hybox-dev/hybox/runtimes"
)

func testRuntime(t *testing.T) *Runtime {
	t.Helper()
	o := Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "ns", ExecdImage: "localhost/hybox/execd:abc", Logger: slog.Default()}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	return (&Cluster{opts: o}).Runtime("runsc", "gvisor")
}

func TestPod(t *testing.T) {
	r := testRuntime(t)
	p := r.pod(runtimes.Spec{ID: "abc", Image: "localhost/img:1", Entrypoint: []string{"sleep", "infinity"},
		Env: map[string]string{"B": "2", "A": "1"}, MemoryBytes: 256 << 20, CPUMillis: 500})
	if p.Name != "hybox-abc" || p.Namespace != "ns" || p.Labels[LabelSandbox] != "abc" || p.Labels[LabelManagedBy] != "hybox" ||
		p.Annotations[AnnotationRuntime] != "runsc" {
		t.Fatalf("metadata %+v", p.ObjectMeta)
	}
	s := p.Spec
	if *s.RuntimeClassName != "gvisor" || s.RestartPolicy != corev1.RestartPolicyNever || *s.AutomountServiceAccountToken ||
		*s.EnableServiceLinks || s.DNSPolicy != corev1.DNSDefault {
		t.Fatalf("pod spec %+v", s)
	}
	init, c := s.InitContainers[0], s.Containers[0]
	if init.Image != "localhost/hybox/execd:abc" || init.ImagePullPolicy != corev1.PullNever ||
		strings.Join(init.Command, " ") != "/hybox-execd --install-to /.hybox/bin/hybox-execd" {
		t.Fatalf("init container %+v", init)
	}
	if c.Image != "localhost/img:1" || c.ImagePullPolicy != corev1.PullNever || c.Command[0] != execdInPod {
		t.Fatalf("container %+v", c)
	}
	if got := strings.Join(c.Args, " "); !strings.HasSuffix(got, "--access-token-file /.hybox/token/token -- sleep infinity") {
		t.Fatalf("args %q", got)
	}
	if len(c.Env) != 2 || c.Env[0].Name != "A" || c.Env[1].Name != "B" {
		t.Fatalf("env %+v, want sorted", c.Env)
	}
	if m := c.Resources.Limits[corev1.ResourceMemory]; m.Cmp(resource.MustParse("256Mi")) != 0 {
		t.Fatalf("memory limit %v", m.String())
	}
	if cpu := c.Resources.Limits[corev1.ResourceCPU]; cpu.MilliValue() != 500 {
		t.Fatalf("cpu limit %v", cpu.String())
	}
	if *c.SecurityContext.AllowPrivilegeEscalation || !slices.Contains(c.SecurityContext.Capabilities.Drop, "NET_RAW") {
		t.Fatalf("security context %+v", c.SecurityContext)
	}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			t.Fatalf("the workload can write %s", m.MountPath)
		}
	}
	if d := r.pod(runtimes.Spec{ID: "x", Image: "i:1"}).Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; d.Value() != 1<<30 {
		t.Fatalf("default memory %v", d.String())
	}
}

func TestPodState(t *testing.T) {
	waiting := func(name, reason string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Image: "img:1", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}
	}
	cases := []struct {
		name    string
		status  corev1.PodStatus
		addr    bool
		wantErr error
	}{
		{name: "pending", status: corev1.PodStatus{Phase: corev1.PodPending}},
		{name: "creating", status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting(containerName, "ContainerCreating")}}},
		{name: "running without IP", status: corev1.PodStatus{Phase: corev1.PodRunning}},
		{name: "running", status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.2"}, addr: true},
		{name: "pending with an IP", status: corev1.PodStatus{Phase: corev1.PodPending, PodIP: "10.0.0.2"}, addr: true},
		{name: "image never pulled", status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting(containerName, "ErrImageNeverPull")}}, wantErr: runtimes.ErrInvalid},
		{name: "execd image missing", status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{waiting(initName, "ErrImageNeverPull")}}, wantErr: runtimes.ErrInvalid},
		{name: "cannot create", status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting(containerName, "CreateContainerError")}}, wantErr: runtimes.ErrUnavailable},
		{name: "failed", status: corev1.PodStatus{Phase: corev1.PodFailed}, wantErr: runtimes.ErrUnavailable},
		{name: "init done", status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{Name: initName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}}},
		{name: "init failed", status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{Name: initName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}}, wantErr: runtimes.ErrUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &corev1.Pod{Status: c.status}
			p.Name = "hybox-x"
			addr, err := podState(p)
			if addr.IsValid() != c.addr || (c.wantErr == nil) != (err == nil) || c.wantErr != nil && !errors.Is(err, c.wantErr) {
				t.Fatalf("podState = %v, %v; want an address %v, err %v", addr, err, c.addr, c.wantErr)
			}
		})
	}
}

func TestValidateID(t *testing.T) {
	r := testRuntime(t)
	for _, id := range []string{"UPPER", "a_b", strings.Repeat("x", 60)} {
		if err := r.Validate(runtimes.Spec{ID: id, Image: "i:1"}); !errors.Is(err, runtimes.ErrInvalid) {
			t.Errorf("id %q: %v, want ErrInvalid", id, err)
		}
	}
	if err := r.Validate(runtimes.Spec{ID: "ok", Image: "wasm://default"}); !errors.Is(err, runtimes.ErrInvalid) {
		t.Errorf("wasm image: %v", err)
	}
}
