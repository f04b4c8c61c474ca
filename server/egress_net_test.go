package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/policy/egress/egresstest"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// startUpstream builds the private upstream network (root only).
func startUpstream(t *testing.T) *egresstest.Net {
	t.Helper()
	return egresstest.Start(t)
}

// egressPolicy is the policy most egress tests use.
func egressPolicy() map[string]any {
	return map[string]any{"defaultAction": "deny", "egress": []map[string]string{
		{"action": "allow", "target": egresstest.AllowedName},
		{"action": "allow", "target": "*." + egresstest.WildApex},
		{"action": "allow", "target": egresstest.BoundName},
	}}
}

// pyProbe fetches a URL from Python and prints one line: "OK <status>
// <header>" or "ERR <reason>".
const pyProbe = `
import urllib.request, urllib.error, json, sys
def probe(url, header=None, verify=True):
    ctx = None
    if url.startswith("https:") and not verify:
        import ssl
        ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
    try:
        kw = {"timeout": 10}
        if ctx is not None:
            kw["context"] = ctx
        with urllib.request.urlopen(url, **kw) as r:
            body = json.loads(r.read())
            return ("OK %d %s %s" % (r.status, body["upstream"], r.headers.get(header) if header else "")).strip()
    except urllib.error.HTTPError as e:
        return "HTTP %d" % e.code
    except urllib.error.URLError as e:
        return "ERR %s" % (e.reason,)
    except Exception as e:
        return "ERR %s: %s" % (type(e).__name__, e)
`

// lines is the stdout of o, one trimmed line per output line.
func lines(o outcome) string {
	var out []string
	for _, l := range strings.Split(strings.Join(o.stdout, "\n"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Wasm guests reach the network only through the host, under the same
// policy and vault as containers.
func TestEgressWasm(t *testing.T) {
	up := startUpstream(t)
	h := newHarness(t, "", harnessOpts{upstream: up, vaultKey: testVaultKey(t)})
	sb := h.create(map[string]any{"networkPolicy": egressPolicy(), "credentialProxy": map[string]bool{"enabled": true}})
	st, b := h.egressCall(sb.ID, "POST", "/credential-vault", vaultBody(egresstest.BoundName))
	require.Equal(t, 201, st, string(b))
	require.Nil(t, h.code(sb.ID, "python", pyProbe).err)

	py := func(expr string) string {
		t.Helper()
		o := h.code(sb.ID, "python", "print("+expr+")")
		require.Nil(t, o.err, "%+v", o)
		return lines(o)
	}
	assert.Equal(t, "OK 200 "+up.Allowed.String(), py(`probe("http://allowed.test/")`))
	assert.Equal(t, "OK 200 "+up.Allowed.String(), py(`probe("https://allowed.test/")`), "upstream TLS is verified by the host")
	assert.Equal(t, "OK 200 "+up.Allowed.String(), py(`probe("http://a.b.wild.test/")`))
	assert.Contains(t, py(`probe("http://denied.test/")`), "denied by the default action")
	assert.Contains(t, py(`probe("http://wild.test/")`), "denied", "a wildcard does not cover its apex")
	assert.Contains(t, py(`probe("http://`+up.Denied.String()+`/")`), "denied", "a direct IP is decided by the policy")
	assert.Contains(t, py(`probe("http://127.0.0.1:1/")`), "denied")

	// The vault injects into requests for the bound host; the secret is
	// redacted where the upstream echoes it, and the guest never sees it.
	got := py(`probe("https://api.bound.test/v1", "` + egresstest.SecretEcho + `")`)
	assert.True(t, strings.HasPrefix(got, "OK 200 "+up.Bound.String()), got)
	assert.NotContains(t, got, vaultSecret)
	seen := false
	for _, r := range up.Requests() {
		if r.Host == egresstest.BoundName {
			assert.Equal(t, "Bearer "+vaultSecret, r.Header.Get("Authorization"))
			seen = true
		}
		if r.Host != egresstest.BoundName {
			assert.Empty(t, r.Header.Get("Authorization"), "no credential for %s", r.Host)
		}
	}
	assert.True(t, seen, "the bound request reached the upstream")
	assert.NotContains(t, py(`__import__("os").environ`), vaultSecret)
	// http.client goes the same way: injected over HTTPS, denied by rule.
	o := h.code(sb.ID, "python", `import http.client
c = http.client.HTTPSConnection("api.bound.test")
c.request("GET", "/via-http-client")
r = c.getresponse()
print("%d:%d" % (r.status, r.read().decode().count("`+vaultSecret+`")))
c2 = http.client.HTTPConnection("denied.test")
c2.request("GET", "/")
try:
    c2.getresponse()
except OSError as e:
    print("ERR " + str(e))`)
	require.Nil(t, o.err, "%+v", o)
	assert.Regexp(t, `^200:0\nERR .*denied by the default action`, lines(o))
	viaClient := false
	for _, r := range up.Requests() {
		if r.Path == "/via-http-client" {
			viaClient = true
			assert.Equal(t, "Bearer "+vaultSecret, r.Header.Get("Authorization"))
		}
	}
	assert.True(t, viaClient, "the http.client request reached the upstream")

	// JavaScript's fetch follows the same policy.
	js := func(code string) string {
		t.Helper()
		o := h.code(sb.ID, "javascript", code)
		require.Nil(t, o.err, "%+v", o)
		return lines(o)
	}
	const jsProbe = `fetch(%q).then(r => r.json()).then(j => console.log("OK " + j.upstream), e => console.log("ERR " + e.message))`
	assert.Equal(t, "OK "+up.Allowed.String(), js(fmt.Sprintf(jsProbe, "https://x.wild.test/")))
	assert.Contains(t, js(fmt.Sprintf(jsProbe, "http://denied.test/")), "ERR ")
	assert.Contains(t, js(fmt.Sprintf(jsProbe, "http://denied.test/")), "denied by the default action")

	// A live change applies to the next request.
	st, b = h.egressCall(sb.ID, "PATCH", "/policy", []map[string]string{{"action": "allow", "target": egresstest.DeniedName}})
	require.Equal(t, 200, st, string(b))
	assert.Equal(t, "OK 200 "+up.Denied.String(), py(`probe("http://denied.test/")`))
	st, b = h.egressCall(sb.ID, "DELETE", "/policy", []string{egresstest.DeniedName})
	require.Equal(t, 200, st, string(b))
	assert.Contains(t, py(`probe("http://denied.test/")`), "denied")

	// One-shot runs: no network without a policy, the policy's with one.
	run := func(body map[string]any) api.RunResult {
		t.Helper()
		st, b, _ := h.do("POST", "/v1/run", body, "Accept", "application/json")
		require.Equal(t, 200, st, string(b))
		var res api.RunResult
		require.NoError(t, json.Unmarshal(b, &res))
		require.Nil(t, res.Error, "%+v", res)
		return res
	}
	code := pyProbe + "\nprint(probe('http://allowed.test/'))\nprint(probe('http://denied.test/'))"
	res := run(map[string]any{"language": "python", "code": code})
	assert.Regexp(t, `^ERR .*network.*\nERR .*network`, strings.TrimSpace(res.Stdout), "a one-shot run without a policy has no network")
	res = run(map[string]any{"language": "python", "code": code, "networkPolicy": map[string]any{
		"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": egresstest.AllowedName}}}})
	assert.Regexp(t, `^OK 200 `+regexp.QuoteMeta(up.Allowed.String())+`\nERR .*denied by the default action`, strings.TrimSpace(res.Stdout))
	st, b, _ = h.do("POST", "/v1/run", map[string]any{"language": "python", "code": "1", "networkPolicy": map[string]any{
		"egress": []map[string]string{{"action": "maybe", "target": "x.test"}}}})
	assert.Equal(t, 400, st, "a bad policy is refused: %s", b)
	assert.Contains(t, string(b), "networkPolicy")
}

// Container sandboxes: the DNS proxy, the firewall and the credential
// proxy, against every bypass a workload might try, under runc and runsc.
func TestEgressContainers(t *testing.T) {
	up := startUpstream(t)
	key := testVaultKey(t)
	dir := t.TempDir()
	h := newHarness(t, dir, harnessOpts{containers: true, upstream: up, vaultKey: key})
	for _, runtime := range []string{"runc", "runsc"} {
		t.Run(runtime, func(t *testing.T) {
			sb := h.create(map[string]any{
				"image":           map[string]string{"uri": ocitest.ImageName},
				"extensions":      map[string]string{"hybox.io/runtime": runtime},
				"entrypoint":      []string{"sleep", "infinity"},
				"networkPolicy":   egressPolicy(),
				"credentialProxy": map[string]bool{"enabled": true},
			})
			t.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil) })
			st, b := h.egressCall(sb.ID, "POST", "/credential-vault", vaultBody(egresstest.BoundName))
			require.Equal(t, 201, st, string(b))
			probe := containerProber(t, h, sb.ID)
			p := h.policy(sb.ID)
			assert.Equal(t, "dns+nft", p.EnforcementMode)

			assert.Equal(t, "OK 200 "+up.Allowed.String(), probe("url", "http://allowed.test/"))
			assert.Equal(t, "OK 200 "+up.Allowed.String(), probe("url", "http://deep.x.wild.test/"))
			// Denied names fail at once with NXDOMAIN; so do the apex of
			// a wildcard and a CNAME into a denied name.
			for _, name := range []string{"denied.test", "wild.test", "alias.test", "unknown.test"} {
				assert.Equal(t, "NXDOMAIN", probe("resolve", name), name)
			}
			// Bypass attempts.
			assert.Equal(t, "REFUSED", probe("tcp", up.Denied.String(), "80"), "direct IP")
			assert.Equal(t, "REFUSED", probe("tcp", up.Other.String(), "443"), "DoH endpoint")
			assert.Equal(t, "REFUSED", probe("tcp", up.Other.String(), "853"), "DoT endpoint")
			assert.Equal(t, "NOANSWER", probe("dns", up.Other.String(), "denied.test"), "another DNS server")
			assert.Equal(t, "NOANSWER", probe("dns", up.Allowed.String(), "denied.test"), "DNS to an allowed address")
			assert.Contains(t, []string{"REFUSED", "UNREACHABLE"}, probe("tcp", "fd00:233::1", "80"), "IPv6")
			assert.Equal(t, "REFUSED", probe("tcp", "10.231.0.1", "8080"), "the host's bridge address")
			assert.Equal(t, "NO_NET_ADMIN", probe("caps"), "the workload cannot change its firewall")

			// TLS to a host without a binding is spliced untouched: the
			// workload sees the upstream's own certificate.
			assert.Equal(t, "hybox test upstream CA", probe("issuer", up.Allowed.String(), "allowed.test"))
			// With a binding, the sandbox's CA terminates TLS (trusted
			// through its trust store), and the credential is injected.
			assert.Equal(t, "hybox sandbox "+sb.ID, probe("issuer", up.Bound.String(), egresstest.BoundName))
			got := probe("url", "https://api.bound.test/x", egresstest.SecretEcho)
			assert.True(t, strings.HasPrefix(got, "OK 200 "+up.Bound.String()), got)
			assert.NotContains(t, got, vaultSecret, "secrets echoed in response headers are redacted")
			found := false
			for _, r := range up.Requests() {
				if r.Host == egresstest.BoundName && r.Path == "/x" {
					found = true
					assert.Equal(t, "Bearer "+vaultSecret, r.Header.Get("Authorization"))
				}
			}
			assert.True(t, found, "the bound request reached the upstream")
			// The secret exists nowhere in the sandbox: not in its
			// processes' environment, files or memory.
			// A plaintext binding: injected when the request goes where the
			// sandbox's resolver sent it, never when a workload sends the
			// bound Host header to another address it may reach.
			st, b = h.egressCall(sb.ID, "PATCH", "/credential-vault", map[string]any{"bindings": map[string]any{"add": []map[string]any{{
				"name": "bound-plain", "match": map[string]any{"schemes": []string{"http"}, "hosts": []string{egresstest.BoundName}},
				"auth": map[string]string{"type": "bearer", "credential": "api-token"}}}}})
			require.Equal(t, 200, st, string(b))
			assert.Equal(t, "OK 200 "+up.Bound.String(), probe("url", "http://api.bound.test/plain-ok"))
			assert.Equal(t, "SENT", probe("spoof", egresstest.AllowedName, egresstest.BoundName, "/plain-spoof"))
			plainOK, spoofSeen := false, false
			for _, r := range up.Requests() {
				switch r.Path {
				case "/plain-ok":
					plainOK = true
					assert.Equal(t, "Bearer "+vaultSecret, r.Header.Get("Authorization"))
				case "/plain-spoof":
					spoofSeen = true
					assert.Empty(t, r.Header.Get("Authorization"), "a spoofed Host header got the credential")
				}
			}
			assert.True(t, plainOK && spoofSeen, "both plaintext requests reached an upstream")

			// Memory first: the in-sandbox scan must get the needle, so it
			// gets it reversed and hex-encoded, and only after this.
			assertNotInMemory(t, sb.ID, vaultSecret)
			assert.Equal(t, "CLEAN", probe("scan", reversedHex(vaultSecret)))

			// A live change takes effect for the next connection.
			st, b = h.egressCall(sb.ID, "PATCH", "/policy", []map[string]string{{"action": "allow", "target": egresstest.DeniedName}})
			require.Equal(t, 200, st, string(b))
			assert.Equal(t, "OK 200 "+up.Denied.String(), probe("url", "http://denied.test/"))
			// Connections held open across the change: the one to the
			// name losing its rule is cut, the other one is kept.
			release := hold(t, h, sb.ID, "denied.test")
			st, b = h.egressCall(sb.ID, "DELETE", "/policy", []string{egresstest.DeniedName})
			require.Equal(t, 200, st, string(b))
			assert.Equal(t, "allowed.test ALIVE\ndenied.test ABORTED", release(), "held connections after the DELETE")
			assert.Equal(t, "NXDOMAIN", probe("resolve", "denied.test"))
			assert.Equal(t, "REFUSED", probe("tcp", up.Denied.String(), "80"), "the learned address went with the rule")

			// Pause and resume keep the policy.
			st, _, _ = h.do("POST", "/v1/sandboxes/"+sb.ID+"/pause", nil)
			require.Equal(t, 202, st)
			st, _, _ = h.do("POST", "/v1/sandboxes/"+sb.ID+"/resume", nil)
			require.Equal(t, 202, st)
			assert.Equal(t, "NXDOMAIN", probe("resolve", "denied.test"))
			assert.Equal(t, "OK 200 "+up.Allowed.String(), probe("url", "http://allowed.test/"))
		})
	}

	// A server restart re-opens every sandbox's DNS and credential proxy;
	// the policy and the vault are still enforced.
	sb := h.create(map[string]any{
		"image":           map[string]string{"uri": ocitest.ImageName},
		"extensions":      map[string]string{"hybox.io/runtime": "runc"},
		"entrypoint":      []string{"sleep", "infinity"},
		"networkPolicy":   egressPolicy(),
		"credentialProxy": map[string]bool{"enabled": true},
	})
	st, b := h.egressCall(sb.ID, "POST", "/credential-vault", vaultBody(egresstest.BoundName))
	require.Equal(t, 201, st, string(b))
	h.close()
	h = newHarness(t, dir, harnessOpts{containers: true, upstream: up, vaultKey: key})
	t.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil) })
	writeFile(t, h, sb.ID, "/tmp/probe.py", pyProbe+containerProbe)
	o := h.command(sb.ID, "python3 /tmp/probe.py resolve denied.test; python3 /tmp/probe.py url http://allowed.test/; python3 /tmp/probe.py url https://api.bound.test/after-restart")
	require.Nil(t, o.err, "%+v", o)
	assert.Equal(t, "NXDOMAIN\nOK 200 "+up.Allowed.String()+"\nOK 200 "+up.Bound.String(), lines(o))
	found := false
	for _, r := range up.Requests() {
		if r.Path == "/after-restart" {
			found = true
			assert.Equal(t, "Bearer "+vaultSecret, r.Header.Get("Authorization"))
		}
	}
	assert.True(t, found)
}

// containerProbe is the command-line part of the probe script.
const containerProbe = `
import socket, os
def main(a):
    if a[0] == "url":
        print(probe(a[1], a[2] if len(a) > 2 else None)); return
    if a[0] == "resolve":
        try:
            socket.getaddrinfo(a[1], 80); print("RESOLVED")
        except socket.gaierror as e:
            print("NXDOMAIN" if e.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)) else "GAIERROR %s" % e)
        return
    if a[0] == "tcp":
        fam = socket.AF_INET6 if ":" in a[1] else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(5)
        try:
            s.connect((a[1], int(a[2]))); print("CONNECTED")
        except ConnectionRefusedError: print("REFUSED")
        except OSError as e:
            import errno
            print("UNREACHABLE" if e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EACCES, errno.EPERM) else "OSERROR %s" % e)
        return
    if a[0] == "dns":
        q = bytes.fromhex("abcd01000001000000000000") + b"".join(bytes([len(l)]) + l.encode() for l in a[2].split(".")) + b"\x00\x00\x01\x00\x01"
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
        try:
            s.sendto(q, (a[1], 53)); s.recv(512); print("ANSWERED")
        except OSError: print("NOANSWER")
        return
    if a[0] == "spoof":
        s = socket.create_connection((a[1], 80), timeout=5)
        s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (a[3], a[2])).encode())
        while s.recv(65536): pass
        print("SENT"); return
    if a[0] == "caps":
        eff = int([l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1], 16)
        print("HAS_NET_ADMIN" if eff & (1 << 12) else "NO_NET_ADMIN"); return
    if a[0] == "issuer":
        import ssl
        ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
        with socket.create_connection((a[2], 443), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=a[2]) as tls:
                der = tls.getpeercert(binary_form=True)
        # the issuer's CN, read from the certificate by the system's openssl
        import subprocess
        out = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-issuer", "-nameopt", "multiline"], input=der, capture_output=True).stdout.decode()
        cn = [l.split("=", 1)[1].strip() for l in out.splitlines() if "commonName" in l]
        print(cn[0] if cn else "NO-ISSUER " + out); return
    if a[0] == "scan":
        needle = bytes.fromhex(a[1])[::-1]; hits = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    if needle in open("/proc/%s/environ" % pid, "rb").read(): hits.append("environ:" + pid)
                    if needle in open("/proc/%s/cmdline" % pid, "rb").read() and pid != str(os.getpid()): hits.append("cmdline:" + pid)
                except OSError: pass
        for root in ["/etc", "/tmp", "/root", "/run", "/home", "/var", "/usr/local", "/.hybox", "/opt"]:
            for d, _, files in os.walk(root):
                for f in files:
                    p = os.path.join(d, f)
                    try:
                        if os.path.isfile(p) and os.path.getsize(p) < 64 << 20 and needle in open(p, "rb").read(): hits.append(p)
                    except OSError: pass
        print("CLEAN" if not hits else "FOUND " + " ".join(hits)); return
main(sys.argv[1:])
`

// reversedHex encodes s so that the encoded form does not contain s.
func reversedHex(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return fmt.Sprintf("%x", b)
}

// writeFile uploads a file into a sandbox through execd.
func writeFile(t *testing.T, h *harness, id, path, content string) {
	writeFileB(t, h, id, path, content)
}

// assertNotInMemory scans the memory of every host process in the
// sandbox's cgroup (the workload under runc; gVisor's sentry and gofer
// under runsc) for needle.
func assertNotInMemory(t *testing.T, id, needle string) {
	t.Helper()
	procs, err := os.ReadDir("/proc")
	require.NoError(t, err)
	scanned := 0
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cgroup"))
		if err != nil || !bytes.Contains(cg, []byte(id)) {
			continue
		}
		scanned++
		found, err := memContains(pid, []byte(needle))
		if err != nil {
			continue // the process ended
		}
		assert.False(t, found, "process %d of sandbox %s holds the secret in memory", pid, id)
	}
	assert.NotZero(t, scanned, "no process of sandbox %s found to scan", id)
}

// memContains reads the resident pages of every readable mapping of pid
// looking for needle. Pages that are not present are skipped (reading them
// would allocate them: gVisor maps its whole memory file).
func memContains(pid int, needle []byte) (bool, error) {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return false, err
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return false, err
	}
	defer mem.Close()
	pagemap, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return false, err
	}
	defer pagemap.Close()
	const page = 4096
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[1], "r") {
			continue
		}
		var lo, hi uint64
		if _, err := fmt.Sscanf(f[0], "%x-%x", &lo, &hi); err != nil || hi <= lo {
			continue
		}
		// Runs of present pages, read as one block each (a needle may
		// span two pages).
		var run []byte
		flush := func() bool {
			found := bytes.Contains(run, needle)
			run = run[:0]
			return found
		}
		entries := make([]byte, 8*512)
		for base := lo; base < hi; base += 512 * page {
			n := min((hi-base)/page, 512)
			got, _ := pagemap.ReadAt(entries[:8*n], int64(base/page*8))
			for i := uint64(0); i < n; i++ {
				present := int(i*8+8) <= got && entries[i*8+7]&0x80 != 0
				if !present {
					if flush() {
						return true, nil
					}
					continue
				}
				buf := make([]byte, page)
				if k, _ := mem.ReadAt(buf, int64(base+i*page)); k > 0 {
					run = append(run, buf[:k]...)
				}
			}
		}
		if flush() {
			return true, nil
		}
	}
	return false, nil
}

// Under a default that allows, the addresses of the names a policy denies
// are blocked too: a workload that learned one elsewhere (DNS over HTTPS,
// a hard-coded address) cannot connect to it, in a container or in a
// wasm guest; and a live deny rule cuts the connections to its name.
func TestEgressDefaultAllowBlocksDeniedNames(t *testing.T) {
	up := startUpstream(t)
	h := newHarness(t, "", harnessOpts{containers: true, upstream: up})
	allowAll := map[string]any{"defaultAction": "allow", "egress": []map[string]string{
		{"action": "deny", "target": egresstest.DeniedName}}}

	// Blocking follows the policy asynchronously: wait for it.
	eventually := func(what string, get func() string, want string) {
		t.Helper()
		var got string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if got = get(); got == want {
				return
			}
		}
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}

	sb := h.create(map[string]any{
		"image":         map[string]string{"uri": ocitest.ImageName},
		"extensions":    map[string]string{"hybox.io/runtime": "runc"},
		"entrypoint":    []string{"sleep", "infinity"},
		"networkPolicy": allowAll,
	})
	t.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil) })
	probe := containerProber(t, h, sb.ID)
	assert.Equal(t, "NXDOMAIN", probe("resolve", egresstest.DeniedName))
	eventually("direct IP of a denied name", func() string { return probe("tcp", up.Denied.String(), "80") }, "REFUSED")
	assert.Equal(t, "OK 200 "+up.Allowed.String(), probe("url", "http://allowed.test/"))
	assert.Equal(t, "CONNECTED", probe("tcp", up.Other.String(), "443"), "an address no rule names follows the default")

	// A connection held open to api.bound.test's address, which the
	// workload never asked the sandbox's resolver for, is cut once a live
	// rule denies the name and its addresses are blocked.
	release := hold(t, h, sb.ID, up.Bound.String())
	st, b := h.egressCall(sb.ID, "PATCH", "/policy", []map[string]string{{"action": "deny", "target": egresstest.BoundName}})
	require.Equal(t, 200, st, string(b))
	eventually("direct IP of a newly denied name", func() string { return probe("tcp", up.Bound.String(), "80") }, "REFUSED")
	assert.Equal(t, "allowed.test ALIVE\n"+up.Bound.String()+" ABORTED", release(), "held connections after the PATCH")

	// A wasm guest under the same policy.
	w := h.create(map[string]any{"networkPolicy": allowAll})
	t.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+w.ID, nil) })
	require.Nil(t, h.code(w.ID, "python", pyProbe).err)
	py := func(expr string) string {
		o := h.code(w.ID, "python", "print("+expr+")")
		require.Nil(t, o.err, "%+v", o)
		return lines(o)
	}
	assert.Contains(t, py(`probe("http://denied.test/")`), "denied by rule 0 (deny denied.test)")
	eventually("wasm: direct IP of a denied name", func() string {
		got := py(`probe("http://` + up.Denied.String() + `/")`)
		if strings.Contains(got, "an address of denied.test) denied by rule 0 (deny denied.test)") {
			return "DENIED"
		}
		return got
	}, "DENIED")
	assert.Equal(t, "OK 200 "+up.Allowed.String(), py(`probe("http://allowed.test/")`))
}

// containerProber installs pyProbe and containerProbe in sandbox id and
// returns a function that runs them with args and returns their output.
func containerProber(t *testing.T, h *harness, id string) func(args ...string) string {
	writeFile(t, h, id, "/tmp/probe.py", pyProbe+containerProbe)
	return func(args ...string) string {
		t.Helper()
		o := h.command(id, "python3 /tmp/probe.py "+strings.Join(args, " "))
		require.Nil(t, o.err, "%+v", o)
		return lines(o)
	}
}

// hold starts holdProbe in sandbox id with other as its second host and
// returns once both connections are open. release lets the probe go on and
// returns what it printed.
func hold(t *testing.T, h *harness, id, other string) (release func() string) {
	t.Helper()
	writeFile(t, h, id, "/tmp/hold.py", strings.ReplaceAll(holdProbe, `"denied.test")`, `"`+other+`")`))
	held := make(chan []byte, 1)
	go func() {
		_, b := h.execd(id, "POST", "/command", map[string]any{"command": "python3 /tmp/hold.py"})
		held <- b
	}()
	for lines(h.command(id, "cat /tmp/hold.state 2>/dev/null")) != "OPEN" {
		select {
		case b := <-held:
			t.Fatalf("the holding command ended before it held: %+v", summarise(t, b))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return func() string {
		t.Helper()
		h.command(id, "touch /tmp/hold.go")
		select {
		case b := <-held:
			o := summarise(t, b)
			require.Nil(t, o.err, "%+v", o)
			return lines(o)
		case <-time.After(30 * time.Second):
			t.Fatal("the holding command did not finish")
			return ""
		}
	}
}

// holdProbe opens a kept-alive HTTP connection to allowed.test and one to
// denied.test, writes OPEN to /tmp/hold.state, waits for /tmp/hold.go,
// then uses both again and prints, per host, ALIVE or how the second
// request failed.
const holdProbe = `
import os, socket, time
def get(s, name):
    s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % name).encode())
    data = s.recv(65536)
    if not data:
        raise EOFError
    return data
conns = {}
for name in ("allowed.test", "denied.test"):
    conns[name] = socket.create_connection((name, 80), timeout=10)
    get(conns[name], name)
open("/tmp/hold.state", "w").write("OPEN")
while not os.path.exists("/tmp/hold.go"):
    time.sleep(0.02)
for name, s in conns.items():
    try:
        get(s, name)
        print(name, "ALIVE")
    except ConnectionAbortedError:
        print(name, "ABORTED")
    except ConnectionResetError:
        print(name, "RESET")
    except EOFError:
        print(name, "CLOSED")
    except OSError as e:
        print(name, "ERROR", e)
`

// Creating and deleting container sandboxes with a policy and a credential
// proxy leaves no goroutine or file descriptor of their DNS and credential
// proxies behind in the server.
func TestEgressNoLeaks(t *testing.T) {
	up := startUpstream(t)
	h := newHarness(t, "", harnessOpts{containers: true, upstream: up, vaultKey: testVaultKey(t)})
	n := 0
	cycle := func() {
		// Every other sandbox allows by default, so that its denied
		// names are resolved and blocked too.
		pol := egressPolicy()
		if n++; n%2 == 0 {
			pol = map[string]any{"defaultAction": "allow", "egress": []map[string]string{
				{"action": "deny", "target": egresstest.DeniedName}, {"action": "allow", "target": egresstest.BoundName}}}
		}
		sb := h.create(map[string]any{
			"image":           map[string]string{"uri": ocitest.ImageName},
			"extensions":      map[string]string{"hybox.io/runtime": "runc"},
			"entrypoint":      []string{"sleep", "infinity"},
			"networkPolicy":   pol,
			"credentialProxy": map[string]bool{"enabled": true},
		})
		// Use both proxies once, so that their connections exist.
		o := h.command(sb.ID, `getent hosts allowed.test >/dev/null && python3 -c "import socket; socket.create_connection(('allowed.test', 80), timeout=5).close()"`)
		require.Nil(t, o.err, "%+v", o)
		st, _, _ := h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil)
		require.Equal(t, 204, st)
	}
	cycle()
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(ents)
	}
	// A leak of even one goroutine or descriptor per sandbox grows by
	// cycles, or by half of them if only one policy kind leaks; the
	// server's pools and keep-alive connections move by a few, whatever
	// the count (0 here once garbage is collected): the bar is a third of
	// cycles.
	const cycles, slack = 12, 4
	// Splicing TCP to TCP (the credential proxy does) keeps pipe pairs in
	// the runtime's sync.Pool; they are closed once two collections have
	// dropped them, so the counts are taken after collecting.
	settle := func() {
		runtime.GC()
		runtime.GC()
	}
	settle()
	baseG, baseF := runtime.NumGoroutine(), fds()
	for i := 0; i < cycles; i++ {
		cycle()
	}
	var g, f int
	deadline := time.Now().Add(10 * time.Second)
	for {
		settle()
		g, f = runtime.NumGoroutine(), fds()
		if (g <= baseG+slack && f <= baseF+slack) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	assert.LessOrEqual(t, g, baseG+slack, "goroutines after %d sandboxes (before: %d)", cycles, baseG)
	assert.LessOrEqual(t, f, baseF+slack, "open files after %d sandboxes (before: %d)", cycles, baseF)
	if t.Failed() {
		logLeaks(t)
	}
}

// callArgs matches the arguments of a frame and the creator's goroutine
// number in a goroutine dump.
var callArgs = regexp.MustCompile(`\([^()]*\)( ←|$)| in goroutine \d+`)

// logLeaks logs what a leak check needs to find its cause, compactly (CI
// shows only part of a long log): goroutines grouped by where they were
// created, and each descriptor with, for pipes and sockets, the other
// processes that hold the same object.
func logLeaks(t *testing.T) {
	buf := make([]byte, 4<<20)
	stacks := strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
	byCreator := map[string]int{}
	for _, s := range stacks {
		lines := strings.Split(strings.TrimSpace(s), "\n")
		key := lines[0]
		for i, l := range lines {
			if strings.HasPrefix(l, "created by ") {
				key = strings.TrimPrefix(l, "created by ")
				if i > 1 {
					key = strings.TrimSpace(lines[i-2]) + " ← " + key
				}
				// Arguments and goroutine numbers differ per goroutine.
				key = callArgs.ReplaceAllString(key, "$1")
			}
		}
		byCreator[key]++
	}
	for k, n := range byCreator {
		t.Logf("goroutines %d × %s", n, k)
	}
	holders := map[string][]string{}
	procs, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil || p.Name() == self {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + p.Name() + "/fd")
		for _, fd := range fds {
			link, _ := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name())
			if strings.HasPrefix(link, "pipe:") || strings.HasPrefix(link, "socket:") {
				comm, _ := os.ReadFile("/proc/" + p.Name() + "/cmdline")
				holders[link] = append(holders[link], p.Name()+" "+strings.ReplaceAll(strings.TrimSpace(string(comm)), "\x00", " "))
			}
		}
	}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		link, _ := os.Readlink("/proc/self/fd/" + e.Name())
		t.Logf("fd %s → %s %v", e.Name(), link, holders[link])
	}
}
