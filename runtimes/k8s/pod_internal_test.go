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

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
)

func testRuntime(t *testing.T) *Runtime {
	t.Helper()
	o := Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "ns", ExecdImage: "localhost/hybox/execd:abc", Logger: slog.Default()}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	return (&Cluster{opts: o, access: &podAccess{ns: o.Namespace}}).Runtime("runsc", "gvisor")
}

func TestPod(t *testing.T) {
	r := testRuntime(t)
	p := r.pod(runtimes.Spec{ID: "abc", Image: "localhost/img:1", Entrypoint: []string{"sleep", "infinity"},
		Env: map[string]string{"B": "2", "A": "1"}, MemoryBytes: 256 << 20, CPUMillis: 500}, nil)
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
	// The scheduler places a sandbox by its whole memory and a tenth of
	// its CPU.
	if m := c.Resources.Requests[corev1.ResourceMemory]; m.Cmp(resource.MustParse("256Mi")) != 0 {
		t.Fatalf("memory request %v, want the limit", m.String())
	}
	if cpu := c.Resources.Requests[corev1.ResourceCPU]; cpu.MilliValue() != 50 {
		t.Fatalf("cpu request %v, want 50m (a tenth of the limit)", cpu.String())
	}
	if *c.SecurityContext.AllowPrivilegeEscalation || !slices.Contains(c.SecurityContext.Capabilities.Drop, "NET_RAW") {
		t.Fatalf("security context %+v", c.SecurityContext)
	}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			t.Fatalf("the workload can write %s", m.MountPath)
		}
	}
	if d := r.pod(runtimes.Spec{ID: "x", Image: "i:1"}, nil).Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; d.Value() != 1<<30 {
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

// TestPodEgress: a sandbox with an egress controller gets hybox-egress as
// an init container and a native sidecar with CAP_NET_ADMIN, which the
// workload never has; the agent's configuration is mounted into them
// alone; the workload's resolver is the agent's DNS proxy and its trust
// store holds the sandbox's CA. Under gVisor the agent programs the
// netstack's iptables (--firewall xtables) and its containers also have
// CAP_NET_RAW, which the workload still lacks.
func TestPodEgress(t *testing.T) {
	m, err := egress.NewManager(egress.Options{DNSUpstreams: []string{"10.0.0.1:53"}, SystemBundle: []byte("# bundle\n")})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := tproxy.NewCA("pod test")
	if err != nil {
		t.Fatal(err)
	}
	p := &policy.Policy{DefaultAction: policy.Deny, Egress: []policy.Rule{{Action: policy.Allow, Target: "a.test"}}}
	ctl, err := m.New("abc", egress.Config{Policy: p, Vault: vault.New(), CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	o := Options{Config: &rest.Config{}, Namespace: "ns", ExecdImage: "localhost/hybox/execd:abc"}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{opts: o, access: &podAccess{ns: o.Namespace}, handlers: map[string]string{"runc": "runc", "gvisor": "gvisor"}}
	spec := runtimes.Spec{ID: "abc", Image: "localhost/img:1", Env: map[string]string{"SSL_CERT_FILE": "/mine"}, Egress: ctl}
	eg, err := c.Runtime("runc", "runc").egressOf(spec)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	if err := eg.secretData(data); err != nil {
		t.Fatal(err)
	}
	if _, err := egress.ParseAgentConfig(data[agentKey]); err != nil {
		t.Fatalf("the agent's configuration in the Secret: %v", err)
	}
	pod := c.Runtime("runc", "runc").pod(spec, eg)
	s := pod.Spec
	if len(s.InitContainers) != 2 || s.InitContainers[0].Name != egressInit || s.InitContainers[1].Name != egressSidecar ||
		s.InitContainers[1].RestartPolicy == nil || *s.InitContainers[1].RestartPolicy != corev1.ContainerRestartPolicyAlways ||
		s.InitContainers[1].Lifecycle.PostStart == nil {
		t.Fatalf("init containers %+v", s.InitContainers)
	}
	if got := strings.Join(s.InitContainers[0].Command, " "); got != EgressInImage+" init --config "+agentDir+"/"+agentFile+" -- "+ExecdInImage+" --install-to "+execdInPod {
		t.Fatalf("the init container runs %q: the firewall, then execd's install", got)
	}
	for _, ic := range s.InitContainers {
		if !slices.Contains(ic.SecurityContext.Capabilities.Add, "NET_ADMIN") || ic.Command[0] != EgressInImage {
			t.Fatalf("%s: %+v", ic.Name, ic)
		}
	}
	w := s.Containers[0]
	if sc := w.SecurityContext; sc.Capabilities != nil && slices.Contains(sc.Capabilities.Add, "NET_ADMIN") {
		t.Fatal("the workload has NET_ADMIN")
	}
	if s.DNSPolicy != corev1.DNSNone || s.DNSConfig == nil || s.DNSConfig.Nameservers[0] != "127.0.0.53" {
		t.Fatalf("dns %v %+v", s.DNSPolicy, s.DNSConfig)
	}
	for _, v := range s.Volumes {
		if v.Secret == nil {
			continue
		}
		var keys []string
		for _, it := range v.Secret.Items {
			keys = append(keys, it.Key)
		}
		switch v.Name {
		case "hybox-token":
			if slices.Contains(keys, agentKey) || !slices.Contains(keys, tokenKey) || len(keys) != 1+len(eg.files) {
				t.Fatalf("the workload's Secret volume holds %v", keys)
			}
		case agentVolume:
			if !slices.Equal(keys, []string{agentKey}) {
				t.Fatalf("the agent's volume holds %v", keys)
			}
		}
	}
	mounted := map[string]bool{}
	for _, vm := range w.VolumeMounts {
		mounted[vm.MountPath] = true
		if vm.Name == agentVolume {
			t.Fatal("the workload mounts the agent's configuration")
		}
	}
	for path := range ctl.Files() {
		if path != "/etc/resolv.conf" && !mounted[path] {
			t.Errorf("%s is not mounted into the workload", path)
		}
	}
	env := map[string]string{}
	for _, e := range w.Env {
		env[e.Name] = e.Value
	}
	if env["SSL_CERT_FILE"] != "/mine" || env["CURL_CA_BUNDLE"] == "" {
		t.Fatalf("env %v: the CA variables are set and the user's win", env)
	}

	// The server's loopback resolver is no use in a Pod: said, not
	// silently broken; kubernetes.dns_upstreams is the way out.
	lm, err := egress.NewManager(egress.Options{DNSUpstreams: []string{"127.0.0.53:53"}, SystemBundle: []byte{}})
	if err != nil {
		t.Fatal(err)
	}
	lctl, err := lm.New("lo", egress.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer lctl.Close()
	if _, err := c.Runtime("runc", "runc").egressOf(runtimes.Spec{ID: "lo", Egress: lctl}); !errors.Is(err, runtimes.ErrUnavailable) ||
		!strings.Contains(err.Error(), "kubernetes.dns_upstreams") {
		t.Fatalf("a loopback DNS upstream: %v", err)
	}
	c.opts.DNSUpstreams = []string{"10.0.0.2:53"}
	if pe, err := c.Runtime("runc", "runc").egressOf(runtimes.Spec{ID: "lo", Egress: lctl}); err != nil || pe.agent.DNSUpstreams[0] != "10.0.0.2:53" {
		t.Fatalf("kubernetes.dns_upstreams: %v", err)
	}
	c.opts.DNSUpstreams = []string{} // as an empty list in the config file
	if pe, err := c.Runtime("runc", "runc").egressOf(spec); err != nil || !slices.Equal(pe.agent.DNSUpstreams, []string{"10.0.0.1:53"}) {
		t.Fatalf("no kubernetes.dns_upstreams: the manager's, got %v", err)
	}
	c.opts.DNSUpstreams = nil

	for _, ic := range s.InitContainers {
		if slices.Contains(ic.SecurityContext.Capabilities.Add, "NET_RAW") || slices.Contains(ic.Command, "--firewall") {
			t.Fatalf("%s under runc: %v %v", ic.Name, ic.SecurityContext.Capabilities.Add, ic.Command)
		}
	}

	gv := c.Runtime("runsc", "gvisor")
	free, err := m.New("free", egress.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer free.Close()
	for _, ctl := range []*egress.Controller{ctl, free} {
		spec.Egress = ctl
		eg, err := gv.egressOf(spec)
		if err != nil {
			t.Fatalf("gVisor: %v", err)
		}
		pod := gv.pod(spec, eg)
		ps := pod.Spec
		if len(ps.InitContainers) != 2 || ps.DNSPolicy != corev1.DNSNone {
			t.Fatalf("a gVisor sandbox without its agent: %+v", ps.InitContainers)
		}
		for _, ic := range ps.InitContainers {
			caps := ic.SecurityContext.Capabilities.Add
			if !slices.Contains(caps, "NET_ADMIN") || !slices.Contains(caps, "NET_RAW") ||
				!strings.Contains(strings.Join(ic.Command, " "), "--firewall xtables") {
				t.Fatalf("%s under gVisor: %v %v", ic.Name, caps, ic.Command)
			}
		}
		w := ps.Containers[0].SecurityContext
		if !slices.Contains(w.Capabilities.Drop, "NET_RAW") || len(w.Capabilities.Add) != 0 {
			t.Fatalf("the gVisor workload's capabilities: %+v", w.Capabilities)
		}
	}
}
