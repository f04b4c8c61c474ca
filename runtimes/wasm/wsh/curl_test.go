package wsh

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
)

const curlSecret = "vault-token-123"

// upstream is a loopback HTTP server for curl and wget. Routes:
//
//	/text        "hello"
//	/file.txt    "file body\n"
//	/echo        METHOD, then the request headers (sorted, one per line,
//	             User-Agent and Accept included), then the body
//	/missing     404 "nope"
//	/redirect    302 to /text
//	/see-other   303 to /echo
//	/loop        302 to /loop
//	/form        the multipart fields a, b and the file f it got
//	/hang        answers when the request is cancelled
func upstream(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/text", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Reply", "yes")
		io.WriteString(w, "hello")
	})
	mux.HandleFunc("/file.txt", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "file body\n") })
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var hs []string
		for k, v := range r.Header {
			if k == "Accept-Encoding" || k == "Content-Length" {
				continue
			}
			hs = append(hs, k+": "+strings.Join(v, ","))
		}
		sort.Strings(hs)
		fmt.Fprintf(w, "%s %s\n%s\n%s", r.Method, r.URL.RequestURI(), strings.Join(hs, "\n"), b)
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", http.StatusNotFound) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/text", http.StatusFound) })
	mux.HandleFunc("/see-other", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/echo", http.StatusSeeOther) })
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	mux.HandleFunc("/form", func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%s a=%s b=%s", r.Method, r.FormValue("a"), r.FormValue("b"))
		for _, fh := range r.MultipartForm.File["f"] {
			f, _ := fh.Open()
			b, _ := io.ReadAll(f)
			fmt.Fprintf(w, " f=%s:%s:%q", fh.Filename, fh.Header.Get("Content-Type"), b)
		}
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// controller is a real egress controller: loopback 127.0.0.1 allowed by an
// address rule, nx.test allowed but unresolvable (the resolver it is given
// refuses), denied.test denied, everything else denied by default; the
// vault puts a bearer token on requests to 127.0.0.1 at the bound port.
func controller(t *testing.T, boundPort int) *egress.Controller {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	deadDNS := pc.LocalAddr().String()
	pc.Close() // nothing answers there
	m, err := egress.NewManager(egress.Options{DNSUpstreams: []string{deadDNS}, SystemBundle: []byte{}})
	require.NoError(t, err)
	v := vault.New()
	_, err = v.Create(vault.CreateRequest{
		Credentials: []vault.Credential{{Name: "token", Source: vault.Source{Value: vault.NewSecret(curlSecret)}}},
		Bindings: []vault.Binding{{Name: "loop", Match: vault.Match{Schemes: []string{vault.SchemeHTTP}, Hosts: []string{"127.0.0.1"}, Ports: []int{boundPort}},
			Auth: vault.Auth{Type: vault.AuthBearer, Credential: "token"}}},
	}, func(string) error { return nil })
	require.NoError(t, err)
	pol := &policy.Policy{DefaultAction: policy.Deny, Egress: []policy.Rule{
		{Action: policy.Allow, Target: "127.0.0.1"},
		{Action: policy.Allow, Target: "nx.test"},
		{Action: policy.Deny, Target: "denied.test"},
	}}
	c, err := m.New("curl-test", egress.Config{Policy: pol, Vault: v, CA: testCA(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestCurl(t *testing.T) {
	up := upstream(t)
	bound := upstream(t) // the vault's binding names this one's port
	_, bp, _ := net.SplitHostPort(bound.Listener.Addr().String())
	boundPort, _ := strconv.Atoi(bp)
	eg := controller(t, boundPort)
	dir, root := workspace(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "work", "body.json"), []byte("{\"a\":\n1}\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc"), 0o755))
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedURL := "http://" + closed.Addr().String() + "/"
	closed.Close()

	U := up.URL
	_, upPort, _ := net.SplitHostPort(up.Listener.Addr().String())
	for _, c := range []struct {
		name, src string
		code      int
		out       string // exact stdout
		errHas    string // "" = stderr empty
	}{
		{name: "get", src: "curl -s " + U + "/text", out: "hello"},
		{name: "no scheme", src: "curl -s " + strings.TrimPrefix(U, "http://") + "/text", out: "hello"},
		{name: "not found without -f", src: "curl -s " + U + "/missing", out: "nope\n"},
		{name: "-f", src: "curl -sf " + U + "/missing", code: 22},
		{name: "-fsS", src: "curl -fsS " + U + "/missing", code: 22, errHas: "curl: (22) The requested URL returned error: 404\n"},
		{name: "--fail-with-body", src: "curl -s --fail-with-body " + U + "/missing", code: 22, out: "nope\n"},
		{name: "no -L", src: "curl -s -o /dev/null -w '%{http_code} %{redirect_url}' " + U + "/redirect", out: "302 " + U + "/text"},
		{name: "-L", src: "curl -sL -w ' %{http_code} %{num_redirects} %{url_effective}\\n' " + U + "/redirect", out: "hello 200 1 " + U + "/text\n"},
		{name: "303 turns POST into GET", src: "curl -sL -d x=1 " + U + "/see-other | head -n1", out: "GET /echo\n"},
		{name: "too many redirects", src: "curl -sSL --max-redirs 3 " + U + "/loop", code: 47, errHas: "curl: (47) Maximum (3) redirects followed\n"},
		{name: "-o", src: "curl -s -o out.txt " + U + "/text && cat out.txt", out: "hello"},
		{name: "-O", src: "curl -sO " + U + "/file.txt && cat file.txt", out: "file body\n"},
		{name: "-O without a name", src: "curl -sSO " + U + "/", code: 23, errHas: "Remote file name has no length"},
		{name: "-o into /etc", src: "curl -sS -o /etc/x " + U + "/text", code: 23, errHas: "Read-only file system"},
		{name: "-d -H", src: "curl -s -H 'X-A: 1' -d a=1 -d b=2 " + U + "/echo", out: "POST /echo\nAccept: */*\nContent-Type: application/x-www-form-urlencoded\nUser-Agent: " + curlUserAgent + "\nX-A: 1\na=1&b=2"},
		{name: "-d @file", src: "curl -s -H 'Content-Type: application/json' -d @body.json " + U + "/echo | tail -n1", out: "{\"a\":1}"},
		{name: "--data-binary @file", src: "curl -s --data-binary @body.json " + U + "/echo | tail -n2", out: "{\"a\":\n1}\n"},
		{name: "--data-raw", src: "curl -s --data-raw @body.json " + U + "/echo | tail -n1", out: "@body.json"},
		{name: "-d @missing warns", src: "curl -s -d @nope " + U + "/echo | head -n1", out: "POST /echo\n", errHas: "Couldn't read data from file \"nope\""},
		{name: "-G", src: "curl -s -G -d q=1 " + U + "/echo | head -n1", out: "GET /echo?q=1\n"},
		{name: "-X", src: "curl -s -X PUT -d v " + U + "/echo | head -n1", out: "PUT /echo\n"},
		{name: "header removed and emptied", src: "curl -s -H 'Accept:' -H 'X-E;' -H 'User-Agent: me' " + U + "/echo", out: "GET /echo\nUser-Agent: me\nX-E: \n"},
		{name: "-u", src: "curl -s -u al:pw " + U + "/echo | grep Authorization", out: "Authorization: Basic YWw6cHc=\n"},
		{name: "-I", src: "curl -sI " + U + "/text | head -n1", out: "HTTP/1.1 200 OK\r\n"},
		{name: "-i", src: "curl -si " + U + "/text | grep -c -e X-Reply -e hello", out: "2\n"},
		{name: "-v", src: "curl -sv " + U + "/text", out: "hello", errHas: "> GET /text HTTP/1.1\n"},
		{name: "-w http_code", src: "curl -s -o /dev/null -w '%{http_code}\\n' " + U + "/missing", out: "404\n"},
		{name: "vault injects", src: "curl -s " + bound.URL + "/echo | grep Authorization", out: "Authorization: Bearer " + curlSecret + "\n"},
		{name: "vault leaves other ports", src: "curl -s " + U + "/echo | grep -c Authorization", code: 1, out: "0\n"},
		{name: "--resolve refused", src: "curl --resolve h:80:127.0.0.1 http://h/", code: 2, errHas: "curl: option --resolve is not supported in a wasm sandbox"},
		{name: "unknown option", src: "curl --frobnicate " + U, code: 2, errHas: "curl: option --frobnicate: is unknown"},
		{name: "no URL", src: "curl -s", code: 2, errHas: "curl: no URL specified"},
		{name: "missing parameter", src: "curl " + U + " -o", code: 2, errHas: "curl: option -o: requires parameter"},
		{name: "bad number", src: "curl -m soon " + U, code: 2, errHas: "curl: option -m: expected a proper numerical parameter"},
		{name: "proxy refused", src: "curl -x http://proxy:3128 " + U, code: 2, errHas: "curl: option -x is not supported in a wasm sandbox"},
		{name: "malformed URL", src: "curl -sS http://", code: 3, errHas: "curl: (3) URL rejected"},
		{name: "-F", src: "curl -s -F a=1 -F 'b=<body.json' -F 'f=@body.json;type=application/json' " + U + "/form", out: "POST a=1 b={\"a\":\n1}\n f=body.json:application/json:\"{\\\"a\\\":\\n1}\\n\""},
		{name: "-F with -d", src: "curl -s -F a=1 -d b=2 " + U + "/form", code: 2, errHas: "You can only select one HTTP request method!"},
		{name: "-F missing file", src: "curl -sS -F f=@nope " + U + "/form", code: 26, errHas: "curl: (26) Failed to open/read local data from file/application (nope: No such file or directory)"},
		{name: "--create-dirs", src: "curl -s --create-dirs -o new/dir/t.txt " + U + "/text && cat new/dir/t.txt", out: "hello"},
		{name: "-o without --create-dirs", src: "curl -sS -o none/t.txt " + U + "/text", code: 23, errHas: "Failed to open the file none/t.txt: No such file or directory"},
		{name: "-D", src: "curl -s -D h.txt -o /dev/null " + U + "/text && head -n1 h.txt && grep -c X-Reply h.txt", out: "HTTP/1.1 200 OK\r\n1\n"},
		{name: "-D - with -L", src: "curl -sL -D - -o /dev/null " + U + "/redirect | grep -c ^HTTP/", out: "2\n"},
		{name: "installed", src: "which curl wget", out: "/usr/bin/curl\n/usr/bin/wget\n"},
		{name: "wget no URL", src: "wget -q", code: 1, errHas: "wget: missing URL"},
		{name: "wget bad option", src: "wget --frob " + U, code: 2, errHas: "wget: unrecognized option '--frob'"},
		{name: "unsupported protocol", src: "curl -sS ftp://x/", code: 1, errHas: "curl: (1) Protocol \"ftp\" not supported\n"},
		{name: "cannot resolve", src: "curl -sS http://nx.test/", code: 6, errHas: "curl: (6) Could not resolve host: nx.test\n"},
		{name: "denied name", src: "curl -sS http://denied.test/", code: 6, errHas: "curl: (6) Could not resolve host: denied.test (egress to denied.test denied by rule 2 (deny denied.test))\n"},
		{name: "denied address", src: "curl -sS http://127.0.0.2:" + upPort + "/", code: 7, errHas: "curl: (7) Failed to connect to 127.0.0.2 port " + upPort + ": "},
		{name: "refused", src: "curl -sS " + closedURL, code: 7, errHas: "Connection refused"},
		{name: "max time", src: "curl -sS -m 0.2 " + U + "/hang", code: 28, errHas: "curl: (28) Operation timed out after 200 milliseconds"},
		{name: "silent error", src: "curl -s http://nx.test/", code: 6},
		{name: "wget -qO-", src: "wget -qO- " + U + "/text", out: "hello"},
		{name: "wget -q -O file", src: "wget -q -O got " + U + "/text && cat got", out: "hello"},
		{name: "wget saves by name", src: "wget -q " + U + "/file.txt && wget -q " + U + "/file.txt && cat file.txt.1", out: "file body\n"},
		{name: "wget 404", src: "wget -q " + U + "/missing", code: 8},
		{name: "wget 404 says so", src: "wget -O - " + U + "/missing", code: 8, errHas: "ERROR 404: Not Found."},
		{name: "wget follows", src: "wget -qO- " + U + "/redirect", out: "hello"},
		{name: "wget cannot resolve", src: "wget -O- http://nx.test/", code: 4, errHas: "wget: unable to resolve host address ‘nx.test’"},
		{name: "wget denied", src: "wget -q http://denied.test/", code: 4},
		{name: "wget post", src: "wget -qO- --post-data a=1 --header 'X-B: 2' " + U + "/echo | head -n1", out: "POST /echo\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{Root: root, HTTP: eg}
			var out, errb bytes.Buffer
			code, err := Run(context.Background(), opts, c.src, "/work", nil, nil, &out, &errb)
			require.NoError(t, err)
			assert.Equal(t, c.code, code, "stderr: %s", errb.String())
			assert.Equal(t, c.out, out.String())
			if c.errHas == "" {
				assert.Empty(t, errb.String())
			} else {
				assert.Contains(t, errb.String(), c.errHas)
			}
		})
	}

	t.Run("no network", func(t *testing.T) {
		var out, errb bytes.Buffer
		code, err := Run(context.Background(), Options{Root: root}, "curl -sS "+U+"/text", "/work", nil, nil, &out, &errb)
		require.NoError(t, err)
		assert.Equal(t, 6, code)
		assert.Contains(t, errb.String(), "this sandbox has no network access")
	})
}

// testCA is a sandbox CA (the vault needs one; Do never uses it).
func testCA(t *testing.T) *tproxy.CA {
	t.Helper()
	ca, err := tproxy.NewCA("hybox wsh curl test")
	require.NoError(t, err)
	return ca
}
