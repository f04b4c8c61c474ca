package k8s_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
)

// nodeAddr is the test cluster's bridge address on the node: the one
// address off the Pod network that Pods reach (scripts/k8s/cluster.sh).
const nodeAddr = "10.248.0.1"

// Names of the upstream zone; all resolve to nodeAddr.
const (
	allowedName = "allowed.test"
	deniedName  = "denied.test"
	boundName   = "api.test"
	vaultSecret = "k8s-egress-secret-value"
)

// upstream is the tests' small internet on the node: a DNS zone on
// nodeAddr:53, an HTTP server, an HTTPS server that records the
// Authorization header it gets, and a TCP server that holds connections.
type upstream struct {
	httpPort, tlsPort, holdPort int
	caPEM                       []byte
	held                        chan net.Conn

	mu    sync.Mutex
	auths map[string]string // path → Authorization seen over HTTPS
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{held: make(chan net.Conn, 8), auths: map[string]string{}}
	zone := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		if len(q.Question) == 1 {
			qs := q.Question[0]
			switch strings.TrimSuffix(strings.ToLower(qs.Name), ".") {
			case allowedName, deniedName, boundName:
				if qs.Qtype == dns.TypeA {
					m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: qs.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
						A: net.ParseIP(nodeAddr)})
				}
			default:
				m.Rcode = dns.RcodeNameError
			}
		}
		_ = w.WriteMsg(m)
	})
	pc, err := net.ListenPacket("udp", nodeAddr+":53")
	if err != nil {
		t.Fatalf("the upstream zone needs %s:53 (a workload's raw DNS to port 53 must be refused): %v", nodeAddr, err)
	}
	tl, err := net.Listen("tcp", nodeAddr+":53")
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	us, ts := &dns.Server{PacketConn: pc, Handler: zone}, &dns.Server{Listener: tl, Handler: zone}
	go func() { _ = us.ActivateAndServe() }()
	go func() { _ = ts.ActivateAndServe() }()
	t.Cleanup(func() { _ = us.Shutdown(); _ = ts.Shutdown() })

	listen := func() (net.Listener, int) {
		l, err := net.Listen("tcp", nodeAddr+":0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l, l.Addr().(*net.TCPAddr).Port
	}
	hl, port := listen()
	u.httpPort = port
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello from upstream")
	})}
	go func() { _ = hs.Serve(hl) }()
	t.Cleanup(func() { hs.Close() })

	cert := u.makeCert(t)
	sl, port := listen()
	u.tlsPort = port
	ss := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auths[r.URL.Path] = r.Header.Get("Authorization")
		u.mu.Unlock()
		_, _ = io.WriteString(w, "tls ok")
	})}
	go func() {
		_ = ss.Serve(tls.NewListener(sl, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	}()
	t.Cleanup(func() { ss.Close() })

	ol, port := listen()
	u.holdPort = port
	go func() {
		for {
			c, err := ol.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			// One line in, "ok" out, then the connection is held.
			if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
				_, _ = io.WriteString(c, "ok\n")
			}
			u.held <- c
		}
	}()
	return u
}

// makeCert makes the upstream CA and the HTTPS server's certificate for
// the zone's names.
func (u *upstream) makeCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hybox k8s test upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	u.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	lk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: boundName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{allowedName, boundName}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	ld, err := x509.CreateCertificate(rand.Reader, leaf, ca, &lk.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{ld}, PrivateKey: lk}
}

func (u *upstream) auth(path string) (string, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	a, ok := u.auths[path]
	return a, ok
}

// memRecords keeps the egress API's changes in memory (the server keeps
// them in its database).
type memRecords struct{ p *policy.Policy }

func (m *memRecords) Policy() (*policy.Policy, error)    { return m.p, nil }
func (m *memRecords) SavePolicy(p *policy.Policy) error  { m.p = p; return nil }
func (m *memRecords) SaveVault(*egress.Controller) error { return nil }

// egressCall sends one egress API request and returns its status and body.
func egressCall(t *testing.T, a http.Handler, method, path string, body any) (int, string) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	a.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// py runs code in the sandbox's default Python context (state persists
// between calls) and returns its stdout, or "ERROR <ename>: <evalue>".
func py(t *testing.T, sb runtimes.Sandbox, code string) string {
	t.Helper()
	var out []string
	err := sb.(runtimes.CodeRunner).RunCode(context.Background(), api.CodeRunRequest{Code: &code,
		Context: api.CodeRunContext{Language: "python"}}, sinkFunc(func(ev execd.Event) bool {
		switch ev.Type {
		case execd.EventStdout:
			if txt := strings.TrimRight(ev.Text, "\n"); txt != "" {
				out = append(out, txt)
			}
		case execd.EventError:
			if ev.Error != nil {
				out = append(out, "ERROR "+ev.Error.EName+": "+ev.Error.EValue)
			}
		}
		return true
	}))
	if err != nil {
		t.Fatalf("run %q: %v", code, err)
	}
	return strings.Join(out, "\n")
}

// probes are Python helpers the tests call in the sandbox.
const probes = `
import socket, subprocess, urllib.request
def connect(host, port):
    try:
        socket.create_connection((host, port), timeout=10).close()
        return "CONNECTED"
    except OSError as e:
        return "REFUSED " + type(e).__name__
def resolve(name):
    try:
        return ",".join(sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET)}))
    except socket.gaierror as e:
        return "NXDOMAIN" if e.errno == socket.EAI_NONAME else "FAIL " + str(e)
def rawdns(server, tcp):
    q = bytes.fromhex("abcd01000001000000000000") + b"\x07allowed\x04test\x00\x00\x01\x00\x01"
    try:
        if tcp:
            s = socket.create_connection((server, 53), timeout=5)
            s.sendall(len(q).to_bytes(2, "big") + q)
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(5)
            s.connect((server, 53))
            s.send(q)
        return "ANSWERED %d bytes" % len(s.recv(512))
    except OSError as e:
        return "BLOCKED " + type(e).__name__
def caps():
    eff = [l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1]
    return "NET_ADMIN" if int(eff, 16) & (1 << 12) else "no NET_ADMIN"
def mark():
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, 36, 0x68796278)
        return "MARKED"
    except OSError as e:
        return "REFUSED " + type(e).__name__
def rawsock(family, proto):
    try:
        socket.socket(family, socket.SOCK_RAW, proto).close()
        return "OPENED"
    except OSError as e:
        return "REFUSED " + type(e).__name__
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except Exception as e:
        return "FAILED " + type(e).__name__
print("ready")
`

// TestEgress: a Pod sandbox's egress policy and vault are enforced in its
// Pod by hybox-egress, under runc (nftables) and under gVisor (its
// netstack's iptables), with the same cases: the allowed name resolves
// and connects, denied names do not resolve, addresses nothing allowed
// are refused; a live policy change cuts an open connection; the
// workload cannot bypass its resolver, reach the agent's control port,
// change the firewall, set the bypass mark or open a raw socket; the
// vault's credential is added to an HTTPS request and is nowhere in the
// workload; a restore pushes the server's state again; a pool member
// takes a vault at claim.
func TestEgress(t *testing.T) {
	_, env, image := cluster(t)
	up := startUpstream(t)
	m, err := egress.NewManager(egress.Options{DNSUpstreams: []string{nodeAddr + ":53"}, RootCAsPEM: up.caPEM,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The backend with its NetworkPolicy (which the test cluster's bridge
	// CNI does not enforce: only the object is checked).
	fenced, err := k8s.New(ctx, k8s.Options{Config: env.Config, Namespace: k8stest.Namespace, ExecdImage: env.ExecdImage(t),
		ReadyTimeout: 2 * time.Minute, IngressFrom: []netip.Prefix{netip.MustParsePrefix(nodeAddr + "/32")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.NetworkingV1().NetworkPolicies(k8stest.Namespace).Delete(ctx, k8s.NetworkPolicyName, metav1.DeleteOptions{})
	})
	for _, rc := range []struct {
		name, class string
		// cutsIdle: the firewall resets a cut connection at once, both
		// ends (nftables: sock_diag), rather than on its next packet
		// (gVisor's netstack: a REJECT rule for the flow).
		cutsIdle bool
	}{{"runc", "runc", true}, {"runsc", "gvisor", false}} {
		t.Run(rc.class, func(t *testing.T) {
			if !slices.Contains(env.Classes, rc.class) {
				t.Skipf("the test cluster has no RuntimeClass %s (it has %v)", rc.class, env.Classes)
			}
			egressCases(t, egressEnv{rt: fenced.Runtime(rc.name, rc.class), env: env, image: image, up: up, m: m, cutsIdle: rc.cutsIdle})
		})
	}
}

// egressEnv is what the egress cases of one runtime share.
type egressEnv struct {
	rt       *k8s.Runtime
	env      *k8stest.Env
	image    string
	up       *upstream
	m        *egress.Manager
	cutsIdle bool
}

func egressCases(t *testing.T, e egressEnv) {
	ctx := context.Background()
	rt, env, image, up, m := e.rt, e.env, e.image, e.up, e.m
	create := func(t *testing.T, name string, cfg egress.Config) (runtimes.Spec, runtimes.Sandbox, *egress.Controller) {
		t.Helper()
		id := name + "-" + suffix()
		ctl, err := m.New(id, cfg)
		if err != nil {
			t.Fatal(err)
		}
		spec := runtimes.Spec{ID: id, Image: image, Entrypoint: []string{"sleep", "infinity"}, Egress: ctl}
		begin := time.Now()
		sb, err := rt.Create(ctx, spec)
		if err != nil {
			ctl.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = sb.Close(ctx)
			if err := rt.Destroy(ctx, spec); err != nil {
				t.Error(err)
			}
			ctl.Close()
		})
		if got := py(t, sb, probes); got != "ready" {
			t.Fatalf("probes: %q", got)
		}
		t.Logf("create with a policy → first result: %v", time.Since(begin).Round(time.Millisecond))
		return spec, sb, ctl
	}
	denyBut := func(names ...string) *policy.Policy {
		p := policy.Policy{DefaultAction: policy.Deny, Egress: []policy.Rule{}}
		for _, n := range names {
			p.Egress = append(p.Egress, policy.Rule{Action: policy.Allow, Target: n})
		}
		n, err := policy.Normalize(p)
		if err != nil {
			t.Fatal(err)
		}
		return &n
	}
	expect := func(t *testing.T, sb runtimes.Sandbox, want, code string) {
		t.Helper()
		if got := py(t, sb, "print("+code+")"); got != want {
			t.Errorf("%s = %q, want %q", code, got, want)
		}
	}
	// holdOpen opens a connection from the workload to the allowed name's
	// holding server and returns the upstream's end.
	holdOpen := func(t *testing.T, sb runtimes.Sandbox) net.Conn {
		t.Helper()
		if got := py(t, sb, fmt.Sprintf(`s = socket.create_connection((%q, %d), timeout=30); s.sendall(b"hi\n"); print(s.recv(16).decode().strip())`,
			allowedName, up.holdPort)); got != "ok" {
			t.Fatalf("a connection to the allowed name: %q", got)
		}
		select {
		case held := <-up.held:
			return held
		case <-time.After(30 * time.Second):
			t.Fatal("the upstream holds no connection")
			return nil
		}
	}
	// wantReset reads from the upstream's end of a connection and wants an
	// error other than a timeout: it was reset (or closed).
	wantReset := func(t *testing.T, held net.Conn, what string) {
		t.Helper()
		_ = held.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := held.Read(make([]byte, 1))
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: read %v, want a reset", what, err)
		}
	}
	// wantCut checks that the workload's socket s is dead.
	wantCut := func(t *testing.T, sb runtimes.Sandbox) {
		t.Helper()
		if got := py(t, sb, `
try:
    s.settimeout(30); s.sendall(b"more\n"); print("OPEN", s.recv(16))
except OSError as e:
    print("CUT", type(e).__name__)`); !strings.HasPrefix(got, "CUT") {
			t.Errorf("the workload's socket after the cut: %s", got)
		}
	}

	t.Run("Policy", func(t *testing.T) {
		_, sb, ctl := create(t, "egress", egress.Config{Policy: denyBut(allowedName)})
		pod := sb.(*k8s.Sandbox).Addr().String()
		np, err := env.Client.NetworkingV1().NetworkPolicies(k8stest.Namespace).Get(ctx, k8s.NetworkPolicyName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the NetworkPolicy: %v", err)
		}
		if in := np.Spec.Ingress; len(in) != 1 || len(in[0].From) != 1 || in[0].From[0].IPBlock.CIDR != nodeAddr+"/32" ||
			np.Spec.PodSelector.MatchLabels[k8s.LabelManagedBy] != "hybox" {
			t.Errorf("NetworkPolicy %+v", np.Spec)
		}
		// Nothing is learned yet: the node's address is refused.
		expect(t, sb, "REFUSED ConnectionRefusedError", fmt.Sprintf("connect(%q, %d)", nodeAddr, up.httpPort))
		expect(t, sb, "NXDOMAIN", fmt.Sprintf("resolve(%q)", deniedName))
		expect(t, sb, "NXDOMAIN", `resolve("unknown.test")`)
		expect(t, sb, nodeAddr, fmt.Sprintf("resolve(%q)", allowedName))
		expect(t, sb, "hello from upstream", fmt.Sprintf("get('http://%s:%d/')", allowedName, up.httpPort))
		// Bypasses: DNS to another server, the agent's control port, the
		// firewall's own mark, capabilities, raw sockets.
		expect(t, sb, "BLOCKED ConnectionRefusedError", fmt.Sprintf("rawdns(%q, True)", nodeAddr))
		if got := py(t, sb, fmt.Sprintf("print(rawdns(%q, False))", nodeAddr)); !strings.HasPrefix(got, "BLOCKED") {
			t.Errorf("raw DNS over UDP to %s:53: %s", nodeAddr, got)
		}
		for _, host := range []string{pod, "127.0.0.1"} {
			expect(t, sb, "REFUSED ConnectionRefusedError", fmt.Sprintf("connect(%q, %d)", host, k8s.AgentPort))
		}
		expect(t, sb, "no NET_ADMIN", "caps()")
		expect(t, sb, "REFUSED PermissionError", "mark()")
		expect(t, sb, "REFUSED PermissionError REFUSED PermissionError", `rawsock(socket.AF_INET, socket.IPPROTO_RAW) + " " + rawsock(socket.AF_INET, socket.IPPROTO_TCP)`)
		// From outside the Pod the control port answers, but only to the
		// token.
		resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}).
			Get("https://" + net.JoinHostPort(pod, strconv.Itoa(k8s.AgentPort)) + egress.AgentPath)
		if err != nil {
			t.Fatalf("the agent's control port from the node: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("the agent without its token: %s, want 401", resp.Status)
		}

		// A live change cuts the open connection to what it denies.
		a := egress.NewAPI(ctl, &memRecords{p: denyBut(allowedName)}, true)
		held := holdOpen(t, sb)
		begin := time.Now()
		if st, b := egressCall(t, a, "PATCH", "/policy", []map[string]string{{"action": "deny", "target": allowedName}}); st != 200 {
			t.Fatalf("PATCH /policy: %d %s", st, b)
		}
		t.Logf("PATCH /policy (a stricter policy, in force in the Pod, its connection cut): %v", time.Since(begin).Round(time.Millisecond))
		if e.cutsIdle {
			wantReset(t, held, "the held connection after the policy denied its name")
		}
		wantCut(t, sb)
		if !e.cutsIdle {
			// The peer learns of it when it next sends: the socket the
			// cut reset answers with a reset.
			_, _ = held.Write([]byte("anyone?\n"))
			wantReset(t, held, "the held connection, once it sent after the cut")
		}
		expect(t, sb, "NXDOMAIN", fmt.Sprintf("resolve(%q)", allowedName))
		// And back: the change is live both ways.
		begin = time.Now()
		if st, b := egressCall(t, a, "PUT", "/policy", denyBut(allowedName)); st != 200 {
			t.Fatalf("PUT /policy: %d %s", st, b)
		}
		t.Logf("PUT /policy (a looser policy): %v", time.Since(begin).Round(time.Millisecond))
		expect(t, sb, nodeAddr, fmt.Sprintf("resolve(%q)", allowedName))
		expect(t, sb, "hello from upstream", fmt.Sprintf("get('http://%s:%d/')", allowedName, up.httpPort))
	})

	t.Run("Vault", func(t *testing.T) {
		ca, err := tproxy.NewCA("hybox k8s test sandbox")
		if err != nil {
			t.Fatal(err)
		}
		v := vault.New()
		spec, sb, ctl := create(t, "vault", egress.Config{Policy: denyBut(boundName), Vault: v, CA: ca})
		a := egress.NewAPI(ctl, &memRecords{p: denyBut(boundName)}, true)
		st, b := egressCall(t, a, "POST", "/credential-vault", map[string]any{
			"credentials": []map[string]any{{"name": "api-token", "source": map[string]string{"type": "inline", "value": vaultSecret}}},
			"bindings": []map[string]any{{"name": "bound", "auth": map[string]string{"type": "bearer", "credential": "api-token"},
				"match": map[string]any{"schemes": []string{"https"}, "ports": []int{up.tlsPort}, "hosts": []string{boundName}}}},
		})
		if st != 201 {
			t.Fatalf("POST /credential-vault: %d %s", st, b)
		}
		// The workload trusts the sandbox's CA (the trust store the Pod
		// gets) and never holds the secret.
		curl := func(path string) string {
			return fmt.Sprintf(`subprocess.run(["curl", "-sS", "https://%s:%d%s"], capture_output=True, text=True).stdout`, boundName, up.tlsPort, path)
		}
		expect(t, sb, "tls ok", curl("/injected"))
		if got, ok := up.auth("/injected"); !ok || got != "Bearer "+vaultSecret {
			t.Errorf("the upstream got Authorization %q (request seen: %v), want the vault's bearer token", got, ok)
		}
		expect(t, sb, "False", fmt.Sprintf(`%q in open("/proc/self/environ").read() or %q in subprocess.run(["env"], capture_output=True, text=True).stdout`, vaultSecret, vaultSecret))
		// Every TCP connection goes to the credential proxy, but what the
		// policy denies is still refused at once.
		expect(t, sb, "REFUSED ConnectionRefusedError", fmt.Sprintf("connect(%q, %d)", "10.248.0.254", up.httpPort))

		// A restore (a server restart) pushes the server's state again: a
		// policy it changed meanwhile is in force in the Pod afterwards.
		_ = sb.Close(ctx)
		ctl2, err := m.New(spec.ID, egress.Config{Policy: denyBut(boundName, allowedName), Vault: v, CA: ca})
		if err != nil {
			t.Fatal(err)
		}
		defer ctl2.Close()
		spec.Egress = ctl2
		expect(t, sb, "NXDOMAIN", fmt.Sprintf("resolve(%q)", allowedName))
		sb2, err := rt.Restore(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		defer sb2.Close(ctx)
		expect(t, sb2, nodeAddr, fmt.Sprintf("resolve(%q)", allowedName))
		expect(t, sb2, "tls ok", curl("/after-restore"))
		if got, _ := up.auth("/after-restore"); got != "Bearer "+vaultSecret {
			t.Errorf("after the restore the upstream got Authorization %q", got)
		}

		// A connection through the credential proxy is cut at once, both
		// ends, when the policy denies its destination (every name of the
		// zone has the node's address: both names are denied).
		held := holdOpen(t, sb2)
		a2 := egress.NewAPI(ctl2, &memRecords{p: denyBut(boundName, allowedName)}, true)
		if st, b := egressCall(t, a2, "PATCH", "/policy", []map[string]string{
			{"action": "deny", "target": allowedName}, {"action": "deny", "target": boundName}}); st != 200 {
			t.Fatalf("PATCH /policy: %d %s", st, b)
		}
		wantReset(t, held, "the proxied connection after the policy denied its name")
		wantCut(t, sb2)
		if st, b := egressCall(t, a2, "PUT", "/policy", denyBut(boundName)); st != 200 {
			t.Fatalf("PUT /policy: %d %s", st, b)
		}
		expect(t, sb2, "tls ok", curl("/after-cut"))
	})

	t.Run("VaultAtClaim", func(t *testing.T) {
		// A pool member is warmed as the server warms one, with a
		// controller that enforces nothing; the claim brings the policy,
		// the vault and its CA, and the member's very Pod enforces them.
		id := "claimvault-" + suffix()
		warmCtl, err := m.New(id, egress.Config{})
		if err != nil {
			t.Fatal(err)
		}
		spec := runtimes.Spec{ID: id, Image: image, Egress: warmCtl}
		member, err := rt.Warm(ctx, spec)
		warmCtl.Close()
		if err != nil {
			t.Fatal(err)
		}
		destroyAtCleanup(t, rt, member, spec)
		ca, err := tproxy.NewCA("hybox k8s test claimed sandbox")
		if err != nil {
			t.Fatal(err)
		}
		v := vault.New()
		if _, err := v.Create(vault.CreateRequest{
			Credentials: []vault.Credential{{Name: "api-token", Source: vault.Source{Value: vault.NewSecret(vaultSecret)}}},
			Bindings: []vault.Binding{{Name: "bound", Auth: vault.Auth{Type: vault.AuthBearer, Credential: "api-token"},
				Match: vault.Match{Schemes: []string{"https"}, Ports: []int{up.tlsPort}, Hosts: []string{boundName}}}},
		}, func(string) error { return nil }); err != nil {
			t.Fatal(err)
		}
		ctl, err := m.New(id, egress.Config{Policy: denyBut(boundName), Vault: v, CA: ca})
		if err != nil {
			t.Fatal(err)
		}
		defer ctl.Close()
		claim := spec
		claim.Egress = ctl
		claim.Env = map[string]string{"GREETING": "claimed", "PIP_CERT": "/user/choice"}
		claim.Entrypoint = []string{"sleep", "infinity"}
		if err := rt.Claim(ctx, member, claim); err != nil {
			t.Fatal(err)
		}
		if got := py(t, member, probes); got != "ready" {
			t.Fatalf("probes: %q", got)
		}
		curl := func(path string) string {
			return fmt.Sprintf(`subprocess.run(["curl", "-sS", "https://%s:%d%s"], capture_output=True, text=True).stdout`, boundName, up.tlsPort, path)
		}
		expect(t, member, "tls ok", curl("/claimed"))
		if got, ok := up.auth("/claimed"); !ok || got != "Bearer "+vaultSecret {
			t.Errorf("the upstream got Authorization %q (request seen: %v), want the vault's bearer token", got, ok)
		}
		// Python's own TLS trusts the CA through the claim's environment.
		expect(t, member, "tls ok", fmt.Sprintf(`urllib.request.urlopen("https://%s:%d/py", timeout=10).read().decode().strip()`, boundName, up.tlsPort))
		if got, _ := up.auth("/py"); got != "Bearer "+vaultSecret {
			t.Errorf("Python's request got Authorization %q", got)
		}
		expect(t, member, "NXDOMAIN", fmt.Sprintf("resolve(%q)", allowedName))
		if got := py(t, member, `import os; print(" ".join(os.environ[k] for k in ("GREETING", "PIP_CERT", "SSL_CERT_FILE")))`); got != "claimed /user/choice /etc/ssl/certs/ca-certificates.crt" {
			t.Errorf("the claim's environment: %q (the user's PIP_CERT wins, the trust store's variables are set)", got)
		}
		expect(t, member, "False", fmt.Sprintf(`%q in open("/proc/self/environ").read() or %q in subprocess.run(["env"], capture_output=True, text=True).stdout`, vaultSecret, vaultSecret))
		// The Pod's Secret comes to hold the state with the vault (written
		// after the push), so a sidecar that restarts opens its credential
		// proxy again.
		deadline := time.Now().Add(20 * time.Second)
		for {
			sec, err := env.Client.CoreV1().Secrets(k8stest.Namespace).Get(ctx, "hybox-"+id, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := egress.ParseAgentConfig(sec.Data["egress-agent.json"])
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(cfg.State), `"sealed"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the Secret's agent state 20 s after the claim has no sealed vault: %s", cfg.State)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
