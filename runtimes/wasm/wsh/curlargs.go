package wsh

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net/textproto"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// parseCurl parses curl's command line; code >= 0 ends the command.
func (p *proc) parseCurl(args []string) (a curlArgs, code int) {
	a.maxRedirs = 50
	usage := func(format string, v ...any) (curlArgs, int) {
		fmt.Fprintf(p.stderr, "curl: "+format+"\n", v...)
		fmt.Fprintln(p.stderr, "curl: try 'curl --help' or 'curl --manual' for more information")
		return a, curlFailedInit
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		var opts []string // the options in arg, each with its value (if it takes one)
		var val string
		takes := func(o string) bool {
			switch o {
			case "-o", "-H", "-d", "-X", "-w", "-u", "-A", "-e", "-b", "-m", "-x", "-F",
				"--output", "--header", "--data", "--data-raw", "--data-binary", "--data-ascii", "--data-urlencode",
				"--json", "--request", "--write-out", "--user", "--user-agent", "--referer", "--cookie",
				"--max-time", "--connect-timeout", "--max-redirs", "--retry", "--retry-delay", "--retry-max-time",
				"--url", "--resolve", "--connect-to", "--proxy", "--unix-socket", "--form", "--cacert", "--capath",
				"-D", "--dump-header":
				return true
			}
			return false
		}
		switch {
		case arg == "--":
			a.urls = append(a.urls, args[i+1:]...)
			i = len(args)
			continue
		case strings.HasPrefix(arg, "--"):
			name, v, hasV := strings.Cut(arg, "=")
			if hasV && !takes(name) {
				return usage("option %s: is unknown", arg)
			}
			if takes(name) && !hasV {
				if i+1 >= len(args) {
					return usage("option %s: requires parameter", name)
				}
				i++
				v = args[i]
			}
			opts, val = []string{name}, v
		case len(arg) > 1 && arg[0] == '-':
			for j := 1; j < len(arg); j++ {
				o := "-" + string(arg[j])
				if takes(o) {
					if j+1 < len(arg) {
						val = arg[j+1:]
					} else if i+1 < len(args) {
						i++
						val = args[i]
					} else {
						return usage("option %s: requires parameter", o)
					}
					opts = append(opts, o)
					break
				}
				opts = append(opts, o)
			}
		default:
			a.urls = append(a.urls, arg)
			continue
		}
		for _, o := range opts {
			if why, ok := refusedOptions[o]; ok {
				fmt.Fprintf(p.stderr, "curl: option %s is not supported in a wasm sandbox: %s\n", o, why)
				return a, curlFailedInit
			}
			switch o {
			case "-s", "--silent":
				a.silent = true
			case "-S", "--show-error":
				a.showError = true
			case "-f", "--fail":
				a.fail = true
			case "--fail-with-body":
				a.fail, a.failWithBody = true, true
			case "-L", "--location":
				a.follow = true
			case "-I", "--head":
				a.head = true
			case "-i", "--include":
				a.include = true
			case "-v", "--verbose":
				a.verbose = true
			case "-G", "--get":
				a.get = true
			case "-O", "--remote-name":
				a.outputs = append(a.outputs, "\x00")
			case "--remote-name-all":
				a.remoteNameAll = true
			case "--create-dirs":
				a.createDirs = true
			case "-D", "--dump-header":
				a.dumpHeader = val
			case "-o", "--output":
				a.outputs = append(a.outputs, val)
			case "-H", "--header":
				a.headers = append(a.headers, val)
			case "-A", "--user-agent":
				a.headers = append(a.headers, "User-Agent: "+val)
			case "-e", "--referer":
				a.headers = append(a.headers, "Referer: "+val)
			case "-b", "--cookie":
				if !strings.Contains(val, "=") {
					return usage("option %s: cookie files are not supported; give name=value", o)
				}
				a.headers = append(a.headers, "Cookie: "+val)
			case "-X", "--request":
				a.method = val
			case "-w", "--write-out":
				a.writeOut = val
			case "-u", "--user":
				a.user = val
			case "--url":
				a.urls = append(a.urls, val)
			case "-d", "--data", "--data-ascii", "--data-binary", "--data-raw", "--data-urlencode", "--json":
				d, ok := p.curlData(o, val)
				if !ok {
					return a, curlReadError
				}
				a.data = append(a.data, d)
				a.hasData = true
				if o == "--json" {
					a.headers = append([]string{"Content-Type: application/json", "Accept: application/json"}, a.headers...)
				}
			case "-m", "--max-time":
				secs, err := strconv.ParseFloat(val, 64)
				if err != nil || secs < 0 {
					return usage("option %s: expected a proper numerical parameter", o)
				}
				a.maxTime = time.Duration(secs * float64(time.Second))
			case "--max-redirs":
				n, err := strconv.Atoi(val)
				if err != nil {
					return usage("option %s: expected a proper numerical parameter", o)
				}
				a.maxRedirs = n
			case "-F", "--form":
				a.form = append(a.form, val)
			case "-k", "--insecure", "--compressed", "--connect-timeout", "--retry", "--retry-delay", "--retry-max-time",
				"--no-progress-meter", "-#", "--progress-bar", "-4", "-6", "--ipv4", "--ipv6", "-N", "--no-buffer",
				"--http1.1", "--http2", "--tlsv1.2", "--tlsv1.3", "--cacert", "--capath", "-g", "--globoff":
				// Accepted with no effect: the host's client decides
				// these (TLS is always verified, with the sandbox's trust).
			default:
				if strings.HasPrefix(o, "--") {
					return usage("option %s: is unknown", o)
				}
				return usage("option %s: is unknown", o)
			}
		}
	}
	if len(a.urls) == 0 {
		return usage("no URL specified")
	}
	if len(a.form) > 0 && a.hasData {
		fmt.Fprintln(p.stderr, "Warning: You can only select one HTTP request method! You asked for both POST")
		fmt.Fprintln(p.stderr, "Warning: (-d, --data) and multipart formpost (-F, --form).")
		return a, curlFailedInit
	}
	return a, -1
}

// curlForm builds the multipart body of the -F fields: name=value,
// name=@file (a file part), name=<file (a field with the file's content),
// each with optional ;type= and ;filename=.
func (p *proc) curlForm(fields []string) (body []byte, contentType string, e *curlErr) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range fields {
		name, val, ok := strings.Cut(f, "=")
		if !ok || name == "" {
			return nil, "", &curlErr{curlFailedInit, fmt.Sprintf("Illegally formatted input field: %q", f)}
		}
		parts := strings.Split(val, ";")
		val = parts[0]
		typ, filename := "", ""
		for _, attr := range parts[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(attr), "=")
			switch k {
			case "type":
				typ = v
			case "filename":
				filename = v
			}
		}
		switch {
		case strings.HasPrefix(val, "@") || strings.HasPrefix(val, "<"):
			file := val[1:]
			rc, err := p.open(file)
			if err != nil {
				return nil, "", &curlErr{curlReadError, fmt.Sprintf("Failed to open/read local data from file/application (%s: %s)", file, errText(err))}
			}
			data, err := io.ReadAll(io.LimitReader(rc, engine.MaxHTTPBody+1))
			rc.Close()
			if err != nil || len(data) > engine.MaxHTTPBody {
				return nil, "", &curlErr{curlReadError, "Failed to open/read local data from file/application (" + file + ")"}
			}
			h := textproto.MIMEHeader{}
			if val[0] == '@' {
				if filename == "" {
					filename = path.Base(file)
				}
				if typ == "" {
					typ = "application/octet-stream"
				}
				h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, name, filename))
			} else {
				h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q`, name))
			}
			if typ != "" {
				h.Set("Content-Type", typ)
			}
			w, _ := mw.CreatePart(h)
			_, _ = w.Write(data)
		default:
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q`, name))
			if typ != "" {
				h.Set("Content-Type", typ)
			}
			w, _ := mw.CreatePart(h)
			_, _ = io.WriteString(w, val)
		}
	}
	_ = mw.Close()
	return buf.Bytes(), mw.FormDataContentType(), nil
}

// curlData reads one data option's value: @file (or @- for stdin) unless
// the option is --data-raw; -d and --data-ascii drop CR and LF from a file,
// --data-urlencode encodes.
func (p *proc) curlData(opt, val string) (string, bool) {
	if opt == "--data-urlencode" {
		name, content, hasEq := strings.Cut(val, "=")
		if !hasEq {
			return url.QueryEscape(val), true
		}
		if name == "" {
			return url.QueryEscape(content), true
		}
		return name + "=" + url.QueryEscape(content), true
	}
	if opt == "--data-raw" || !strings.HasPrefix(val, "@") {
		return val, true
	}
	file := val[1:]
	rc, err := p.open(file)
	if err != nil {
		fmt.Fprintf(p.stderr, "Warning: Couldn't read data from file \"%s\", this makes an empty POST.\n", file)
		return "", true
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, engine.MaxHTTPBody+1))
	if err != nil || len(b) > engine.MaxHTTPBody {
		fmt.Fprintf(p.stderr, "curl: (26) Failed to read data from %s\n", file)
		return "", false
	}
	if opt == "-d" || opt == "--data" || opt == "--data-ascii" {
		b = bytes.ReplaceAll(bytes.ReplaceAll(b, []byte("\r"), nil), []byte("\n"), nil)
	}
	return string(b), true
}
