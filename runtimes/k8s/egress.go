package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/runtimes"
)

// The egress agent in a Pod (hybox-egress, from the hybox-execd image):
// an init container installs the firewall before anything else runs, a
// native sidecar (an init container with restartPolicy Always) serves the
// DNS and credential proxies and the control API the server pushes
// changes to. Both have CAP_NET_ADMIN; the workload container does not.
// Under gVisor the firewall is the iptables of its netstack (policy/xt,
// hybox-egress --firewall xtables), programmed through a raw socket: the
// two egress containers also have CAP_NET_RAW there (runsc must run with
// net-raw), and the workload has it dropped, as everywhere.
const (
	// AgentPort is the agent's control port (HTTPS) on the Pod's IP.
	AgentPort = 44773
	// EgressInImage is where the hybox-execd image holds hybox-egress.
	EgressInImage = "/hybox-egress"
	// agentMark is the socket mark of the agent's own connections, which
	// its firewall lets pass ("hybx").
	agentMark     = 0x68796278
	egressInit    = "hybox-egress-init"
	egressSidecar = "hybox-egress"
	agentVolume   = "hybox-egress"
	agentDir      = "/.hybox/egress"
	agentKey      = "egress-agent.json"
	agentFile     = "agent.json"
	// egressFileKey prefixes the Secret keys of the files the egress
	// controller gives the workload (its CA, the trust store with it).
	egressFileKey = "egress-file-"
	// resolvConf is given by the Pod's dnsConfig instead of a file.
	resolvConf = "/etc/resolv.conf"
)

// agentEgress is the egress controller a Pod's agent enforces
// (*egress.Controller).
type agentEgress interface {
	runtimes.Egress
	State() egress.State
	NewAgentConfig(controlPort uint16, mark uint32, dnsUpstreams []string) (*egress.AgentConfig, error)
	Attach(ctx context.Context, r egress.Remote) error
}

// podEgress is what a Pod gets of its sandbox's egress controller.
type podEgress struct {
	agent  *egress.AgentConfig // nil: no agent (an unrestricted sandbox reached through the API server's proxy)
	files  map[string][]byte   // path in the workload → content
	env    map[string]string
	gvisor bool // the Pod runs under gVisor: its netstack's iptables
}

// egressOf prepares the Pod's part of spec's egress controller: the
// agent's configuration, the workload's files and environment. A
// sandbox without a controller has no network fence at all (nil).
//
// # Errors
// runtimes.ErrNotSupported for a controller the backend cannot give an
// agent, and for a restricted policy or a vault on Pods reached through
// the API server's proxy, which cannot carry the agent's channel.
func (r *Runtime) egressOf(spec runtimes.Spec) (*podEgress, error) {
	if spec.Egress == nil {
		return nil, nil
	}
	eg, ok := spec.Egress.(agentEgress)
	if !ok {
		return nil, fmt.Errorf("%w: the Kubernetes runtime %q enforces only hybox's own egress controller", runtimes.ErrNotSupported, r.name)
	}
	if why := r.noAgent(); why != nil {
		if st := eg.State(); st.Policy != nil || st.Vault != nil {
			return nil, why
		}
		return &podEgress{}, nil
	}
	agent, err := eg.NewAgentConfig(AgentPort, agentMark, r.c.opts.DNSUpstreams)
	if err != nil {
		return nil, err
	}
	for _, u := range agent.DNSUpstreams {
		if ap, err := netip.ParseAddrPort(u); err == nil && ap.Addr().IsLoopback() {
			// The server's own resolver: inside a Pod it is the Pod's
			// loopback, where nothing answers.
			return nil, fmt.Errorf("%w: the DNS upstream %s is a loopback address, which a Pod cannot reach; configure kubernetes.dns_upstreams with resolvers the Pods reach",
				runtimes.ErrUnavailable, u)
		}
	}
	pe := &podEgress{agent: agent, files: map[string][]byte{}, env: eg.Env(), gvisor: r.c.gvisor(r.class)}
	for p, b := range eg.Files() {
		if p != resolvConf {
			pe.files[p] = b
		}
	}
	return pe, nil
}

// noAgent says why this runtime's Pods get no egress agent, nil when they
// do: the API server's Pod proxy cannot carry its control channel.
func (r *Runtime) noAgent() error {
	return r.c.access.agentRefusal(r.name)
}

// secretData adds the agent's configuration and the workload's files to
// the Secret's data.
func (pe *podEgress) secretData(data map[string][]byte) error {
	if pe == nil || pe.agent == nil {
		return nil
	}
	b, err := json.Marshal(pe.agent)
	if err != nil {
		return err
	}
	data[agentKey] = b
	for i, p := range pe.paths() {
		data[egressFileKey+strconv.Itoa(i)] = pe.files[p]
	}
	return nil
}

// paths are the workload's egress files in a fixed order (their Secret
// keys are numbered by it).
func (pe *podEgress) paths() []string {
	ps := make([]string, 0, len(pe.files))
	for p := range pe.files {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// addToPod puts the agent into p: its init container and sidecar, their
// volume, the workload's files, environment and resolver. tokenVolume is
// the workload's Secret volume, whose items get the files.
func (pe *podEgress) addToPod(p *corev1.Pod, image string, tokenVolume string) {
	if pe == nil || pe.agent == nil {
		return
	}
	spec := &p.Spec
	agentMode := int32(0o400)
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: agentVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: p.Name, DefaultMode: &agentMode, Items: []corev1.KeyToPath{{Key: agentKey, Path: agentFile}}}}})
	no, root := false, int64(0)
	sec := func(caps ...corev1.Capability) *corev1.SecurityContext {
		return &corev1.SecurityContext{
			AllowPrivilegeEscalation: &no,
			RunAsUser:                &root,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: caps},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
	}
	mounts := []corev1.VolumeMount{{Name: agentVolume, MountPath: agentDir, ReadOnly: true}}
	config := agentDir + "/" + agentFile
	// The Pod's packet filter: the node kernel's nftables (hybox-egress's
	// default), or, under gVisor, its netstack's iptables, replaced
	// through a raw socket.
	var firewall []string
	initCaps, sidecarCaps := []corev1.Capability{"NET_ADMIN"}, []corev1.Capability{"NET_ADMIN", "NET_BIND_SERVICE"}
	if pe.gvisor {
		firewall = []string{"--firewall", egress.XTables.Name()}
		initCaps = append(initCaps, "NET_RAW")
		sidecarCaps = append(sidecarCaps, "NET_RAW")
	}
	always := corev1.ContainerRestartPolicyAlways
	// The firewall first, then hybox-execd's own install (one init
	// container instead of two: the kubelet starts the next container a
	// relist, about a second, after one ends).
	for i, ic := range spec.InitContainers {
		if ic.Name != initName {
			continue
		}
		spec.InitContainers[i] = corev1.Container{
			Name: egressInit, Image: image, ImagePullPolicy: corev1.PullNever,
			Command:      slices.Concat([]string{EgressInImage, "init", "--config", config}, firewall, []string{"--"}, ic.Command),
			VolumeMounts: append(slices.Clone(ic.VolumeMounts), mounts...), SecurityContext: sec(initCaps...),
			// A failure's reason reaches Create's error (podState).
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		}
	}
	spec.InitContainers = append(spec.InitContainers,
		corev1.Container{
			Name: egressSidecar, Image: image, ImagePullPolicy: corev1.PullNever,
			RestartPolicy: &always,
			Command:       slices.Concat([]string{EgressInImage, "serve", "--config", config, "--listen", "$(POD_IP)"}, firewall),
			Env: []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
			VolumeMounts: mounts,
			// The workload starts once the DNS proxy answers.
			Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
				Exec: &corev1.ExecAction{Command: []string{EgressInImage, "wait", "--timeout", "30s"}}}},
			SecurityContext:          sec(sidecarCaps...),
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		})
	// The workload: the resolver is the agent's DNS proxy; the CA files
	// come from the Secret, readable by every user of the sandbox.
	spec.DNSPolicy = corev1.DNSNone
	spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{strings.Split(egress.DNSAddr, ":")[0]},
		Options: []corev1.PodDNSConfigOption{{Name: "edns0"}}}
	fileMode := int32(0o444)
	var vol *corev1.SecretVolumeSource
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == tokenVolume {
			vol = spec.Volumes[i].Secret
		}
	}
	c := &spec.Containers[0]
	for i, path := range pe.paths() {
		key := egressFileKey + strconv.Itoa(i)
		vol.Items = append(vol.Items, corev1.KeyToPath{Key: key, Path: key, Mode: &fileMode})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: tokenVolume, MountPath: path, SubPath: key, ReadOnly: true})
	}
	have := map[string]bool{}
	for _, e := range c.Env {
		have[e.Name] = true
	}
	keys := make([]string, 0, len(pe.env))
	for k := range pe.env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !have[k] { // the user's environment wins
			c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: pe.env[k]})
		}
	}
}

// refusingRemote is the remote of a sandbox whose Pod has no agent (an
// unrestricted sandbox reached through the API server's proxy): it takes
// only the unrestricted state.
type refusingRemote struct{ why error }

func (r refusingRemote) Push(_ context.Context, st egress.State) error {
	if st.Policy == nil && st.Vault == nil {
		return nil
	}
	return r.why
}

// attachEgress attaches spec's egress controller to the agent of the Pod
// at sb's address, configured by the Secret's data, and pushes its
// current state (at create: the same as the Secret's; at restore: the
// server's, which may be newer).
//
// # Errors
// When the agent does not answer or refuses the state.
func (r *Runtime) attachEgress(ctx context.Context, sb *Sandbox, spec runtimes.Spec, data map[string][]byte) error {
	if spec.Egress == nil {
		return nil
	}
	eg, ok := spec.Egress.(agentEgress)
	if !ok {
		return fmt.Errorf("%w: the Kubernetes runtime %q enforces only hybox's own egress controller", runtimes.ErrNotSupported, r.name)
	}
	if why := r.noAgent(); why != nil {
		return eg.Attach(ctx, refusingRemote{why})
	}
	b, ok := data[agentKey]
	if !ok {
		why := r.noAgent()
		if why == nil {
			why = fmt.Errorf("%w: Pod %s has no egress agent (made before hybox enforced egress in Pods); create the sandbox again to give it a policy",
				runtimes.ErrNotSupported, podName(spec.ID))
		}
		return eg.Attach(ctx, refusingRemote{why})
	}
	cfg, err := egress.ParseAgentConfig(b)
	if err != nil {
		return fmt.Errorf("%w: Secret %s: %v", runtimes.ErrUnavailable, podName(spec.ID), err)
	}
	client, err := egress.NewAgentClient(net.JoinHostPort(sb.addr.String(), strconv.Itoa(AgentPort)), cfg)
	if err != nil {
		return err
	}
	sb.agent = client
	return eg.Attach(ctx, &podRemote{r: r, name: podName(spec.ID), cfg: cfg, client: client, stored: cfg.State})
}

// podRemote pushes to a Pod's agent and keeps the state in the Pod's
// Secret current, so that a sidecar that restarts starts from the latest
// state. The Secret is written after the push answers, in the background
// and in order (one writer, the latest state pending): the state is in
// force once the agent has it, and the kubelet refreshes a mounted Secret
// only within about a minute anyway, so waiting for the write (an etcd
// commit, 40–80 ms here, up to 160) would only slow the change pushed.
type podRemote struct {
	r      *Runtime
	name   string
	cfg    *egress.AgentConfig
	client *egress.AgentClient

	mu      sync.Mutex
	stored  []byte // the state in the Secret
	pending []byte // the state to write next, nil for none
	writing bool   // a writer runs
}

// secretWriteTimeout bounds one write of a Pod's Secret.
const secretWriteTimeout = 15 * time.Second

func (p *podRemote) Push(ctx context.Context, st egress.State) error {
	if err := p.client.Push(ctx, st); err != nil {
		return err
	}
	b, err := egress.EncodeState(p.cfg.Key, p.cfg.ID, st)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = b
	if !p.writing {
		p.writing = true
		go p.store()
	}
	return nil
}

// store writes the pending states into the Secret until none is left.
func (p *podRemote) store() {
	for {
		p.mu.Lock()
		b := p.pending
		p.pending = nil
		if b == nil || bytes.Equal(b, p.stored) {
			p.writing = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		err := p.write(b)
		p.mu.Lock()
		if err == nil {
			p.stored = b
		}
		p.mu.Unlock()
	}
}

// write puts state b into the agent's configuration in the Secret.
func (p *podRemote) write(b []byte) error {
	cfg := *p.cfg
	cfg.State = b
	conf, err := json.Marshal(&cfg)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"data": map[string][]byte{agentKey: conf}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), secretWriteTimeout)
	defer cancel()
	begin := time.Now()
	_, err = p.r.c.client.CoreV1().Secrets(p.r.c.opts.Namespace).Patch(ctx, p.name, types.MergePatchType, patch, metav1.PatchOptions{})
	p.r.c.opts.Logger.Debug("egress state written to the Pod's Secret", "pod", p.name, "took", time.Since(begin).Round(10*time.Microsecond), "err", err)
	switch {
	case apierrors.IsNotFound(err):
		return nil // the sandbox is gone
	case err != nil:
		// In force in the Pod already: a Secret that lags is logged.
		p.r.c.opts.Logger.Warn("the egress state in the Pod's Secret is behind the Pod's", "pod", p.name, "err", err)
	}
	return err
}
