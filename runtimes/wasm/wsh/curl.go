package wsh

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// curl's exit codes (those that map to what can happen here).
const (
	curlUnsupportedProtocol = 1
	curlFailedInit          = 2
	curlURLMalformed        = 3
	curlCouldntResolve      = 6
	curlCouldntConnect      = 7
	curlHTTPError           = 22
	curlWriteError          = 23
	curlReadError           = 26
	curlTimeout             = 28
	curlTooManyRedirects    = 47
	curlGotNothing          = 52
	curlRecvError           = 56
	curlSSLConnect          = 35
	curlPeerCert            = 60
)

// curlUserAgent is the default User-Agent; servers that look for "curl/"
// treat the shell's curl as curl.
const curlUserAgent = "curl/8 (hybox wasm shell)"

// refusedOptions are curl options that would send a request somewhere its
// URL does not say; the sandbox's egress decides by the name in the URL.
var refusedOptions = map[string]string{
	"--resolve":     "a request goes to the addresses the host resolves its name to, under the sandbox's egress policy",
	"--connect-to":  "a request goes to the host its URL names, under the sandbox's egress policy",
	"--proxy":       "requests leave through the sandbox's egress, not through a proxy",
	"-x":            "requests leave through the sandbox's egress, not through a proxy",
	"--unix-socket": "a wasm sandbox has no sockets",
}

// curlArgs are the parsed options of one curl command.
type curlArgs struct {
	silent, showError, fail, failWithBody, follow, head, include bool
	verbose, get, remoteNameAll, createDirs                      bool
	method, writeOut, user, dumpHeader                           string
	headers                                                      []string
	data                                                         []string // each -d/--data-* value, already read
	hasData                                                      bool
	form                                                         []string // each -F, in order
	urls                                                         []string
	outputs                                                      []string // per URL in order; "\x00" = remote name (-O)
	maxRedirs                                                    int
	maxTime                                                      time.Duration
}

// curlUtil is curl over the sandbox's egress (Options.HTTP): the same door
// as Python's and JavaScript's requests, so the policy decides and the
// vault injects. Exit codes and messages are curl's.
func curlUtil(ctx context.Context, p *proc) int {
	a, code := p.parseCurl(p.args[1:])
	if code >= 0 {
		return code
	}
	c := &curlRun{p: p, a: a}
	last := 0
	for i, raw := range a.urls {
		out := ""
		if i < len(a.outputs) {
			out = a.outputs[i]
		} else if a.remoteNameAll {
			out = "\x00"
		}
		if code := c.fetch(ctx, raw, out); code != 0 {
			last = code
		}
	}
	return last
}

// curlRun is one curl command being run.
type curlRun struct {
	p *proc
	a curlArgs
}

// curlErr is a failure with curl's exit code and message.
type curlErr struct {
	code int
	msg  string
}

// fail reports e (unless silenced) and returns its code.
func (c *curlRun) failWith(e curlErr) int {
	if !c.a.silent || c.a.showError {
		fmt.Fprintf(c.p.stderr, "curl: (%d) %s\n", e.code, e.msg)
	}
	return e.code
}

// fetch runs one URL; out is the output file ("" = stdout, "\x00" = the
// remote name).
func (c *curlRun) fetch(ctx context.Context, raw, out string) int {
	u, e := curlURL(raw)
	if e != nil {
		return c.failWith(*e)
	}
	a := c.a
	method := "GET"
	var body []byte
	if a.hasData {
		joined := strings.Join(a.data, "&")
		if a.get {
			if u.RawQuery != "" {
				u.RawQuery += "&" + joined
			} else {
				u.RawQuery = joined
			}
		} else {
			method, body = "POST", []byte(joined)
		}
	}
	formType := ""
	if len(a.form) > 0 {
		var e *curlErr
		if body, formType, e = c.p.curlForm(a.form); e != nil {
			return c.failWith(*e)
		}
		method = "POST"
	}
	if a.head {
		method = "HEAD"
	}
	explicit := a.method != ""
	if explicit {
		method = a.method
	}
	headers, e := c.headerList(body != nil)
	if e != nil {
		return c.failWith(*e)
	}
	if formType != "" {
		headers = setHeader(headers, "Content-Type", formType, true)
	}
	if a.maxTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.maxTime)
		defer cancel()
	}
	start := time.Now()
	var w io.Writer = c.p.stdout
	var file *os.File
	openOut := func() *curlErr {
		if out == "" || file != nil {
			return nil
		}
		name := out
		if out == "\x00" {
			name = path.Base(u.Path)
			if u.Path == "" || strings.HasSuffix(u.Path, "/") || name == "/" || name == "." {
				return &curlErr{curlWriteError, "Remote file name has no length"}
			}
		}
		if dw, ok := c.p.devWriter(name); ok {
			w = dw
			return nil
		}
		f, e := c.create(name)
		if e != nil {
			return e
		}
		file, w = f, f
		return nil
	}
	defer func() {
		if file != nil {
			file.Close()
		}
	}()
	var dump io.Writer // -D: every response's head
	if a.dumpHeader != "" {
		if a.dumpHeader == "-" {
			dump = c.p.stdout
		} else if dw, ok := c.p.devWriter(a.dumpHeader); ok {
			dump = dw
		} else {
			f, e := c.create(a.dumpHeader)
			if e != nil {
				return c.failWith(*e)
			}
			defer f.Close()
			dump = f
		}
	}
	redirects := 0
	var written int64
	var resp *http.Response
	for {
		var err error
		resp, err = c.send(ctx, method, u, headers, body)
		if err != nil {
			return c.failWith(curlFailure(ctx, err, u, a.maxTime, start))
		}
		if dump != nil {
			c.writeHead(dump, resp)
		}
		loc := resp.Header.Get("Location")
		if a.follow && loc != "" && isRedirectStatus(resp.StatusCode) {
			if c.a.include {
				if e := openOut(); e != nil {
					resp.Body.Close()
					return c.failWith(*e)
				}
				c.writeHead(w, resp)
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if redirects >= a.maxRedirs {
				return c.failWith(curlErr{curlTooManyRedirects, fmt.Sprintf("Maximum (%d) redirects followed", a.maxRedirs)})
			}
			next, err := u.Parse(loc)
			if err != nil || (next.Scheme != "http" && next.Scheme != "https") {
				return c.failWith(curlErr{curlUnsupportedProtocol, fmt.Sprintf("Protocol \"%s\" not supported", next.Scheme)})
			}
			redirects++
			if !explicit && (resp.StatusCode == http.StatusSeeOther && method != "HEAD" ||
				(resp.StatusCode == http.StatusMovedPermanently || resp.StatusCode == http.StatusFound) && method == "POST") {
				method, body = "GET", nil
				headers = slices.DeleteFunc(headers, func(h [2]string) bool {
					return strings.EqualFold(h[0], "Content-Type") || strings.EqualFold(h[0], "Content-Length")
				})
			}
			if next.Host != u.Host || next.Scheme != u.Scheme {
				// As curl without --location-trusted: credentials stay
				// with the host they were given for.
				headers = slices.DeleteFunc(headers, func(h [2]string) bool {
					return strings.EqualFold(h[0], "Authorization") || strings.EqualFold(h[0], "Cookie")
				})
			}
			u = next
			continue
		}
		break
	}
	defer resp.Body.Close()
	failed := a.fail && resp.StatusCode >= 400
	if !failed || a.failWithBody {
		if e := openOut(); e != nil {
			return c.failWith(*e)
		}
		if a.include || a.head {
			c.writeHead(w, resp)
		}
		if method != "HEAD" {
			n, err := io.Copy(outWriter{w}, resp.Body)
			written = n
			if err != nil {
				if isWriteErr(err) {
					return c.failWith(curlErr{curlWriteError, "Failure writing output to destination"})
				}
				return c.failWith(curlFailure(ctx, err, u, a.maxTime, start))
			}
		}
	}
	code := 0
	if failed {
		code = c.failWith(curlErr{curlHTTPError, fmt.Sprintf("The requested URL returned error: %d", resp.StatusCode)})
	}
	if a.writeOut != "" {
		c.writeOutFormat(resp, u, method, redirects, written, time.Since(start), code)
	}
	return code
}

// create opens an output file for writing, making its directories first
// with --create-dirs.
func (c *curlRun) create(name string) (*os.File, *curlErr) {
	if c.a.createDirs {
		if rel, err := c.p.rel(path.Dir(guestAbs(c.p.dir, name)), true); err == nil {
			if err := c.p.sh.root.MkdirAll(rel, 0o755); err != nil {
				return nil, &curlErr{curlWriteError, fmt.Sprintf("Failed to create the directory %s: %s", path.Dir(name), errText(err))}
			}
		}
	}
	f, err := c.p.sh.openFile(c.p.dir, name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, &curlErr{curlWriteError, fmt.Sprintf("Failed to open the file %s: %s", name, errText(err))}
	}
	return f, nil
}

// devWriter is the writer of an output file that is a device: /dev/null,
// /dev/stdout, /dev/stderr.
func (p *proc) devWriter(name string) (io.Writer, bool) {
	switch guestAbs(p.dir, name) {
	case "/dev/null":
		return io.Discard, true
	case "/dev/stdout":
		return p.stdout, true
	case "/dev/stderr":
		return p.stderr, true
	}
	return nil, false
}

// curlURL parses a URL as curl does: no scheme means http.
func curlURL(raw string) (*url.URL, *curlErr) {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return nil, &curlErr{curlURLMalformed, "URL rejected: Malformed input to a URL function"}
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		u.Scheme = strings.ToLower(u.Scheme)
	default:
		return nil, &curlErr{curlUnsupportedProtocol, fmt.Sprintf("Protocol \"%s\" not supported", u.Scheme)}
	}
	return u, nil
}

// headerList builds the request headers: curl's defaults, then -u, then -H
// ("Name:" removes a header, "Name;" sends it empty).
func (c *curlRun) headerList(hasBody bool) ([][2]string, *curlErr) {
	set := [][2]string{{"User-Agent", curlUserAgent}, {"Accept", "*/*"}}
	if hasBody {
		set = append(set, [2]string{"Content-Type", "application/x-www-form-urlencoded"})
	}
	if c.a.user != "" {
		user, pass, _ := strings.Cut(c.a.user, ":")
		set = append(set, [2]string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))})
	}
	for _, h := range c.a.headers {
		if name, ok := strings.CutSuffix(h, ";"); ok && !strings.Contains(name, ":") {
			set = setHeader(set, strings.TrimSpace(name), "", true) // "Name;" sends it empty
			continue
		}
		name, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			continue // curl ignores a header without a colon
		}
		v = strings.TrimSpace(v)
		set = setHeader(set, strings.TrimSpace(name), v, v != "") // "Name:" removes it
	}
	return set, nil
}

// setHeader applies one -H: a header curl sets itself (User-Agent, Accept,
// Content-Type, Authorization, Host) is replaced, another is added; with
// keep false the header is removed.
func setHeader(set [][2]string, name, v string, keep bool) [][2]string {
	own := map[string]bool{"user-agent": true, "accept": true, "content-type": true, "authorization": true, "host": true}
	if own[strings.ToLower(name)] || !keep {
		set = slices.DeleteFunc(set, func(h [2]string) bool { return strings.EqualFold(h[0], name) })
	}
	if keep {
		set = append(set, [2]string{name, v})
	}
	return set
}

// send makes one request through the sandbox's egress.
func (c *curlRun) send(ctx context.Context, method string, u *url.URL, headers [][2]string, body []byte) (*http.Response, error) {
	eg := c.p.sh.opts.HTTP
	if eg == nil {
		return nil, engine.ErrNoNetwork
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	for _, h := range headers {
		if strings.EqualFold(h[0], "Host") {
			req.Host = h[1]
			continue
		}
		req.Header.Add(h[0], h[1])
	}
	if c.a.verbose {
		c.writeRequest(req)
	}
	resp, err := eg.Do(req)
	if err != nil {
		return nil, err
	}
	if c.a.verbose {
		var b bytes.Buffer
		c.writeHead(&b, resp)
		for _, l := range strings.SplitAfter(strings.TrimSuffix(b.String(), "\r\n"), "\r\n") {
			fmt.Fprintf(c.p.stderr, "< %s", strings.ReplaceAll(l, "\r\n", "\n"))
		}
		fmt.Fprintln(c.p.stderr, "<")
	}
	return resp, nil
}

// writeRequest prints the request as curl -v does.
func (c *curlRun) writeRequest(req *http.Request) {
	e := c.p.stderr
	port := req.URL.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[req.URL.Scheme]
	}
	fmt.Fprintf(e, "* Request to %s port %s through the sandbox's egress\n", req.URL.Hostname(), port)
	uri := req.URL.RequestURI()
	fmt.Fprintf(e, "> %s %s HTTP/1.1\n", req.Method, uri)
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	fmt.Fprintf(e, "> Host: %s\n", host)
	for _, k := range slices.Sorted(maps.Keys(req.Header)) {
		for _, v := range req.Header[k] {
			if strings.EqualFold(k, "Authorization") {
				v = strings.SplitN(v, " ", 2)[0] + " REDACTED"
			}
			fmt.Fprintf(e, "> %s: %s\n", k, v)
		}
	}
	fmt.Fprintln(e, ">")
}

// writeHead writes the status line and headers of resp as curl -i does.
func (c *curlRun) writeHead(w io.Writer, resp *http.Response) {
	proto := resp.Proto
	switch proto {
	case "HTTP/2.0":
		proto = "HTTP/2" // as curl prints it
	case "":
		proto = "HTTP/1.1"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\r\n", proto, resp.Status)
	for _, k := range slices.Sorted(maps.Keys(resp.Header)) {
		for _, v := range resp.Header[k] {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	_, _ = io.WriteString(w, b.String())
}

// writeOutFormat prints -w's format with its variables replaced.
func (c *curlRun) writeOutFormat(resp *http.Response, u *url.URL, method string, redirects int, size int64, took time.Duration, code int) {
	vars := map[string]string{
		"http_code":     fmt.Sprintf("%03d", resp.StatusCode),
		"response_code": fmt.Sprintf("%03d", resp.StatusCode),
		"url_effective": u.String(),
		"url":           u.String(),
		"content_type":  resp.Header.Get("Content-Type"),
		"size_download": strconv.FormatInt(size, 10),
		"num_redirects": strconv.Itoa(redirects),
		"redirect_url":  "",
		"time_total":    fmt.Sprintf("%.6f", took.Seconds()),
		"method":        method,
		"scheme":        strings.ToUpper(u.Scheme),
		"exitcode":      strconv.Itoa(code),
		"errormsg":      "",
	}
	if loc := resp.Header.Get("Location"); loc != "" && isRedirectStatus(resp.StatusCode) {
		if next, err := u.Parse(loc); err == nil {
			vars["redirect_url"] = next.String()
		}
	}
	f := c.a.writeOut
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		switch {
		case strings.HasPrefix(f[i:], "%{"):
			end := strings.IndexByte(f[i:], '}')
			if end < 0 {
				b.WriteString(f[i:])
				i = len(f)
				continue
			}
			name := f[i+2 : i+end]
			if h, ok := strings.CutPrefix(name, "header{"); ok {
				b.WriteString(resp.Header.Get(strings.TrimSuffix(h, "}")))
				if !strings.HasSuffix(h, "}") && i+end+1 < len(f) && f[i+end+1] == '}' {
					i++
				}
			} else if v, ok := vars[name]; ok {
				b.WriteString(v)
			}
			i += end
		case strings.HasPrefix(f[i:], "%%"):
			b.WriteByte('%')
			i++
		case f[i] == '\\' && i+1 < len(f):
			switch f[i+1] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case '\\':
				b.WriteByte('\\')
			default:
				b.WriteByte(f[i])
				b.WriteByte(f[i+1])
			}
			i++
		default:
			b.WriteByte(f[i])
		}
	}
	_, _ = io.WriteString(c.p.stdout, b.String())
}

func isRedirectStatus(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// curlFailure maps a request error to curl's exit code and message.
func curlFailure(ctx context.Context, err error, u *url.URL, maxTime time.Duration, start time.Time) curlErr {
	host := u.Hostname()
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	_, addrErr := netip.ParseAddr(host)
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded:
		ms := maxTime.Milliseconds()
		if ms == 0 {
			ms = time.Since(start).Milliseconds()
		}
		return curlErr{curlTimeout, fmt.Sprintf("Operation timed out after %d milliseconds", ms)}
	case errors.Is(err, engine.ErrNoNetwork):
		return curlErr{curlCouldntResolve, fmt.Sprintf("Could not resolve host: %s (%v)", host, err)}
	case errors.Is(err, policy.ErrDenied):
		// A container's resolver answers NXDOMAIN for a denied name and
		// its firewall rejects a denied address: the same exit codes.
		if addrErr == nil {
			return curlErr{curlCouldntConnect, fmt.Sprintf("Failed to connect to %s port %s: %s", host, port, deniedText(err))}
		}
		return curlErr{curlCouldntResolve, fmt.Sprintf("Could not resolve host: %s (%s)", host, deniedText(err))}
	case errors.As(err, &dnsErr):
		return curlErr{curlCouldntResolve, "Could not resolve host: " + host}
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr):
		return curlErr{curlPeerCert, "SSL certificate problem: " + rootCause(err)}
	case errors.Is(err, syscall.ECONNREFUSED):
		return curlErr{curlCouldntConnect, fmt.Sprintf("Failed to connect to %s port %s: Connection refused", host, port)}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return curlErr{curlGotNothing, "Empty reply from server"}
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return curlErr{curlCouldntConnect, fmt.Sprintf("Failed to connect to %s port %s: %s", host, port, rootCause(err))}
	}
	if strings.Contains(err.Error(), "tls:") {
		return curlErr{curlSSLConnect, "SSL connect error: " + rootCause(err)}
	}
	if strings.Contains(err.Error(), "resolve ") {
		return curlErr{curlCouldntResolve, "Could not resolve host: " + host}
	}
	return curlErr{curlRecvError, "Failure when receiving data from the peer: " + rootCause(err)}
}

// deniedText is the policy's own words for a denial.
func deniedText(err error) string {
	var de *policy.DeniedError
	if errors.As(err, &de) {
		return de.Error()
	}
	return rootCause(err)
}

// rootCause is the innermost message of err (without url.Error's "Get
// URL:" prefix).
func rootCause(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}
