package wsh

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

// GNU wget's exit codes.
const (
	wgetGeneric  = 1
	wgetParse    = 2
	wgetFileIO   = 3
	wgetNetwork  = 4
	wgetSSL      = 5
	wgetAuth     = 6
	wgetServer   = 8
	wgetMaxHops  = 20
	wgetUAString = "Wget/1 (hybox wasm shell)"
)

// wgetArgs are the parsed options of one wget command.
type wgetArgs struct {
	quiet, spider, serverResponse, contentOnError bool
	output, prefix, method, user, password        string
	headers                                       []string
	body                                          []byte
	hasBody                                       bool
	maxRedirect                                   int
	timeout                                       time.Duration
	urls                                          []string
}

// wgetUtil is wget over the sandbox's egress, as curlUtil is.
func wgetUtil(ctx context.Context, p *proc) int {
	a, code := p.parseWget(p.args[1:])
	if code >= 0 {
		return code
	}
	last := 0
	for _, raw := range a.urls {
		if code := p.wgetOne(ctx, a, raw); code != 0 {
			last = code
		}
	}
	return last
}

func (p *proc) parseWget(args []string) (a wgetArgs, code int) {
	a.maxRedirect = wgetMaxHops
	usage := func(format string, v ...any) (wgetArgs, int) {
		fmt.Fprintf(p.stderr, "wget: "+format+"\n", v...)
		fmt.Fprintln(p.stderr, "Usage: wget [OPTION]... [URL]...\n\nTry `wget --help' for more options.")
		return a, wgetParse
	}
	takes := map[string]bool{
		"-O": true, "-P": true, "-T": true, "-U": true, "-t": true, "-o": true, "-a": true,
		"--output-document": true, "--directory-prefix": true, "--timeout": true, "--user-agent": true,
		"--header": true, "--post-data": true, "--post-file": true, "--body-data": true, "--body-file": true,
		"--method": true, "--user": true, "--password": true, "--http-user": true, "--http-password": true,
		"--max-redirect": true, "--tries": true, "--output-file": true, "--append-output": true, "--wait": true,
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		type opt struct{ name, val string }
		var opts []opt
		switch {
		case arg == "--":
			a.urls = append(a.urls, args[i+1:]...)
			i = len(args)
			continue
		case strings.HasPrefix(arg, "--"):
			name, v, hasV := strings.Cut(arg, "=")
			if takes[name] && !hasV {
				if i+1 >= len(args) {
					return usage("option '%s' requires an argument", name)
				}
				i++
				v = args[i]
			}
			opts = append(opts, opt{name, v})
		case len(arg) > 1 && arg[0] == '-':
			for j := 1; j < len(arg); j++ {
				o := "-" + string(arg[j])
				if takes[o] {
					v := arg[j+1:]
					if v == "" {
						if i+1 >= len(args) {
							return usage("option requires an argument -- '%c'", arg[j])
						}
						i++
						v = args[i]
					}
					opts = append(opts, opt{o, v})
					break
				}
				opts = append(opts, opt{o, ""})
			}
		default:
			a.urls = append(a.urls, arg)
			continue
		}
		for _, o := range opts {
			switch o.name {
			case "-q", "--quiet":
				a.quiet = true
			case "-O", "--output-document":
				a.output = o.val
			case "-P", "--directory-prefix":
				a.prefix = o.val
			case "-T", "--timeout":
				secs, err := strconv.ParseFloat(o.val, 64)
				if err != nil || secs < 0 {
					return usage("--timeout: Invalid time period ‘%s’", o.val)
				}
				a.timeout = time.Duration(secs * float64(time.Second))
			case "-U", "--user-agent":
				a.headers = append(a.headers, "User-Agent: "+o.val)
			case "--header":
				a.headers = append(a.headers, o.val)
			case "--post-data", "--body-data":
				a.body, a.hasBody = []byte(o.val), true
			case "--post-file", "--body-file":
				rc, err := p.open(o.val)
				if err != nil {
					fmt.Fprintf(p.stderr, "wget: %s: %s\n", o.val, errText(err))
					return a, wgetFileIO
				}
				b, err := io.ReadAll(rc)
				rc.Close()
				if err != nil {
					fmt.Fprintf(p.stderr, "wget: %s: %s\n", o.val, errText(err))
					return a, wgetFileIO
				}
				a.body, a.hasBody = b, true
			case "--method":
				a.method = strings.ToUpper(o.val)
			case "--user", "--http-user":
				a.user = o.val
			case "--password", "--http-password":
				a.password = o.val
			case "--max-redirect":
				n, err := strconv.Atoi(o.val)
				if err != nil {
					return usage("--max-redirect: Invalid number ‘%s’", o.val)
				}
				a.maxRedirect = n
			case "-S", "--server-response":
				a.serverResponse = true
			case "--spider":
				a.spider = true
			case "--content-on-error":
				a.contentOnError = true
			case "-nv", "--no-verbose", "-c", "--continue", "-N", "--timestamping", "--no-check-certificate",
				"-t", "--tries", "--wait", "-nc", "--no-clobber", "--show-progress", "--progress", "-4", "-6",
				"-v", "--verbose", "-n", "--inet4-only", "--inet6-only":
				// Accepted with no effect here.
			case "-o", "-a", "--output-file", "--append-output":
				// Logging to a file: messages still go to stderr.
			default:
				return usage("unrecognized option '%s'", o.name)
			}
		}
	}
	if len(a.urls) == 0 {
		fmt.Fprintln(p.stderr, "wget: missing URL")
		fmt.Fprintln(p.stderr, "Usage: wget [OPTION]... [URL]...\n\nTry `wget --help' for more options.")
		return a, wgetGeneric
	}
	return a, -1
}

// wgetOne fetches one URL.
func (p *proc) wgetOne(ctx context.Context, a wgetArgs, raw string) int {
	say := func(format string, v ...any) {
		if !a.quiet {
			fmt.Fprintf(p.stderr, format, v...)
		}
	}
	u, e := curlURL(raw)
	if e != nil {
		say("%s: %s.\n", raw, strings.TrimPrefix(e.msg, "URL rejected: "))
		return wgetParse
	}
	if a.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.timeout)
		defer cancel()
	}
	method := "GET"
	var body []byte
	if a.hasBody {
		method, body = "POST", a.body
	}
	if a.spider {
		method = "HEAD"
	}
	if a.method != "" {
		method = a.method
	}
	headers := [][2]string{{"User-Agent", wgetUAString}, {"Accept", "*/*"}}
	if a.hasBody {
		headers = append(headers, [2]string{"Content-Type", "application/x-www-form-urlencoded"})
	}
	if a.user != "" || a.password != "" {
		headers = append(headers, [2]string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(a.user+":"+a.password))})
	}
	for _, h := range a.headers {
		name, v, ok := strings.Cut(h, ":")
		if ok && strings.TrimSpace(name) != "" {
			headers = setHeader(headers, strings.TrimSpace(name), strings.TrimSpace(v), true)
		}
	}
	c := &curlRun{p: p}
	var resp *http.Response
	for hop := 0; ; hop++ {
		say("--%s--  %s\n", time.Now().Format("2006-01-02 15:04:05"), u.String())
		var err error
		resp, err = c.send(ctx, method, u, headers, body)
		if err != nil {
			f := curlFailure(ctx, err, u, a.timeout, time.Now())
			switch f.code {
			case curlCouldntResolve:
				say("wget: unable to resolve host address ‘%s’%s\n", u.Hostname(), detail(f.msg))
				return wgetNetwork
			case curlPeerCert, curlSSLConnect:
				say("ERROR: %s\n", f.msg)
				return wgetSSL
			case curlTimeout:
				say("Read error (Connection timed out).\n")
				return wgetNetwork
			}
			say("failed: %s.\n", strings.TrimPrefix(f.msg, "Failed to connect to "))
			return wgetNetwork
		}
		say("HTTP request sent, awaiting response... %s\n", resp.Status)
		if a.serverResponse {
			var b strings.Builder
			c.writeHead(&b, resp)
			for _, l := range strings.Split(strings.TrimSpace(b.String()), "\r\n") {
				fmt.Fprintf(p.stderr, "  %s\n", l)
			}
		}
		loc := resp.Header.Get("Location")
		if loc == "" || !isRedirectStatus(resp.StatusCode) {
			break
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if hop >= a.maxRedirect {
			say("%d redirections exceeded.\n", a.maxRedirect)
			return wgetServer
		}
		next, err := u.Parse(loc)
		if err != nil || (next.Scheme != "http" && next.Scheme != "https") {
			say("%s: Unsupported scheme.\n", loc)
			return wgetGeneric
		}
		say("Location: %s [following]\n", next.String())
		if resp.StatusCode == http.StatusSeeOther || (resp.StatusCode <= http.StatusFound && method == "POST") {
			method, body = "GET", nil
		}
		u = next
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		if resp.StatusCode == http.StatusUnauthorized {
			say("Username/Password Authentication Failed.\n")
			return wgetAuth
		}
		say("%s ERROR %d: %s.\n\n", time.Now().Format("2006-01-02 15:04:05"), resp.StatusCode, strings.TrimSpace(strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode))))
		if !a.contentOnError {
			return wgetServer
		}
	}
	if a.spider {
		say("Remote file exists.\n\n")
		return 0
	}
	var w io.Writer
	name := a.output
	switch {
	case name == "-":
		w = p.stdout
	default:
		if name == "" {
			name = wgetName(u)
			if a.prefix != "" {
				name = path.Join(a.prefix, name)
			}
			name = p.unusedName(name)
		}
		if dw, ok := p.devWriter(name); ok {
			w = dw
			break
		}
		f, err := p.sh.openFile(p.dir, name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			fmt.Fprintf(p.stderr, "%s: %s\n", name, errText(err))
			return wgetFileIO
		}
		defer f.Close()
		w = f
		say("Saving to: ‘%s’\n\n", name)
	}
	n, err := io.Copy(outWriter{w}, resp.Body)
	if err != nil {
		if isWriteErr(err) {
			if name != "-" {
				fmt.Fprintf(p.stderr, "Cannot write to ‘%s’ (%s).\n", name, errText(errors.Unwrap(err)))
			}
			return wgetFileIO
		}
		say("Read error at byte %d (%s).\n", n, rootCause(err))
		return wgetNetwork
	}
	if name != "-" {
		say("%s - ‘%s’ saved [%d]\n\n", time.Now().Format("2006-01-02 15:04:05"), name, n)
	}
	if resp.StatusCode >= 400 {
		return wgetServer
	}
	return 0
}

// detail is the parenthesised reason of a curl message, if any.
func detail(msg string) string {
	if i := strings.Index(msg, " ("); i >= 0 {
		return msg[i:]
	}
	return ""
}

// wgetName is the file name wget saves u as.
func wgetName(u *url.URL) string {
	name := path.Base(u.Path)
	if u.Path == "" || strings.HasSuffix(u.Path, "/") || name == "/" || name == "." {
		return "index.html"
	}
	return name
}

// unusedName returns name, or name.1, name.2... when it exists, as wget
// does without -O.
func (p *proc) unusedName(name string) string {
	exists := func(n string) bool {
		_, err := p.sh.stat(p.dir, n, false)
		return !errors.Is(err, fs.ErrNotExist)
	}
	if !exists(name) {
		return name
	}
	for i := 1; ; i++ {
		if n := name + "." + strconv.Itoa(i); !exists(n) {
			return n
		}
	}
}
