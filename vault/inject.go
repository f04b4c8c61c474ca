package vault

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// maxSubstBody is the largest request body in which placeholders are
// substituted; larger bodies pass unchanged.
const maxSubstBody = 1 << 20

// Injection reports what Inject did: the binding that matched (empty when
// none did) and every string that must be redacted from the response (the
// values used, the encoded header forms and substitution placeholders).
// Formatting, logging or marshalling an Injection shows only the binding
// name and how many secrets it holds.
type Injection struct {
	Binding string
	Secrets []string
}

// String returns e.g. "injection(binding github, 2 secrets)".
func (in Injection) String() string {
	return "injection(binding " + strconv.Quote(in.Binding) + ", " + strconv.Itoa(len(in.Secrets)) + " secrets)"
}

// Format writes String for every verb.
func (in Injection) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(in.String())) }

// LogValue implements slog.LogValuer without the secrets.
func (in Injection) LogValue() slog.Value {
	return slog.GroupValue(slog.String("binding", in.Binding), slog.Int("secrets", len(in.Secrets)))
}

// MarshalJSON writes {"binding": name, "secrets": count}.
func (in Injection) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Binding string `json:"binding"`
		Secrets int    `json:"secrets"`
	}{in.Binding, len(in.Secrets)})
}

// Inject finds the binding for req and applies it: it sets the auth
// headers, replacing any the client sent (bearer → "Authorization: Bearer
// v"; basic → "Authorization: Basic b" where b is base64(v) when v contains
// ":" and v itself otherwise; apiKey → "<name>: v"; customHeaders → each
// header), then performs the binding's placeholder substitutions. The
// scheme, host and port come from req.URL (req.Host when URL.Host is empty;
// the scheme is https when URL.Scheme is empty and req.TLS is set), with
// ports 80/443 by default. Without a matching binding req is unchanged and
// the Injection is empty.
//
// # Errors
//
// ErrAmbiguous when bindings tie (the caller answers 403 and sends
// nothing); ErrInvalid when req has no usable host or port.
func (v *Vault) Inject(req *http.Request) (Injection, error) {
	s := v.snap.Load()
	if s == nil || len(s.bindings) == 0 || req == nil || req.URL == nil {
		return Injection{}, nil
	}
	r, err := requestOf(req)
	if err != nil {
		return Injection{}, err
	}
	cb, err := s.match(r)
	if cb == nil || err != nil {
		return Injection{}, err
	}
	in := Injection{Binding: cb.b.Name}
	value := func(name string) string { return s.byName[name].value.Reveal() }
	if subs := cb.b.Auth.Substitutions; len(subs) > 0 {
		substitute(req, subs, value, &in)
	}
	a := cb.b.Auth
	switch a.Type {
	case AuthBearer:
		v := value(a.Credential)
		setHeader(req.Header, "Authorization", "Bearer "+v)
		in.Secrets = append(in.Secrets, v)
	case AuthBasic:
		v := value(a.Credential)
		token := v
		if strings.Contains(v, ":") {
			token = base64.StdEncoding.EncodeToString([]byte(v))
		} else if dec, err := base64.StdEncoding.DecodeString(v); err == nil && len(dec) > 0 {
			in.Secrets = append(in.Secrets, string(dec))
		}
		setHeader(req.Header, "Authorization", "Basic "+token)
		in.Secrets = append(in.Secrets, v, token)
	case AuthAPIKey:
		v := value(a.Credential)
		setHeader(req.Header, a.Name, v)
		in.Secrets = append(in.Secrets, v)
	case AuthCustomHeaders:
		for _, h := range a.Headers {
			v := value(h.Credential)
			setHeader(req.Header, h.Name, v)
			in.Secrets = append(in.Secrets, v)
		}
	}
	slices.Sort(in.Secrets)
	in.Secrets = slices.Compact(in.Secrets)
	return in, nil
}

// setHeader sets name to value, removing every value the client sent under
// any spelling of the name (a header map built by hand may hold
// non-canonical keys).
func setHeader(h http.Header, name, value string) {
	key := http.CanonicalHeaderKey(name)
	for k := range h {
		if k != key && strings.EqualFold(k, name) {
			delete(h, k)
		}
	}
	h[key] = []string{value}
}

// requestOf extracts the matching inputs from an outbound request.
func requestOf(req *http.Request) (Request, error) {
	scheme := req.URL.Scheme
	if scheme == "" {
		scheme = SchemeHTTP
		if req.TLS != nil {
			scheme = SchemeHTTPS
		}
	}
	hostport := req.URL.Host
	if hostport == "" {
		hostport = req.Host
	}
	if hostport == "" {
		return Request{}, invalid("request", "has no host")
	}
	host, port := hostport, 0
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Request{}, invalidValue("request port", p, "not a port number")
		}
		host, port = h, n
	}
	return Request{Scheme: scheme, Host: host, Method: req.Method, Path: req.URL.Path, Port: port}, nil
}

// substitute replaces placeholders in the surfaces each substitution names.
func substitute(req *http.Request, subs []Substitution, value func(string) string, in *Injection) {
	for _, sub := range subs {
		v := value(sub.Credential)
		ph := sub.Placeholder
		in.Secrets = append(in.Secrets, v, ph)
		for _, where := range sub.In {
			switch where {
			case InHeader:
				for k, vals := range req.Header {
					for i, hv := range vals {
						if strings.Contains(hv, ph) {
							req.Header[k][i] = strings.ReplaceAll(hv, ph, v)
						}
					}
				}
			case InPath:
				esc := req.URL.EscapedPath()
				rep := strings.ReplaceAll(esc, ph, url.PathEscape(v))
				rep = strings.ReplaceAll(rep, url.PathEscape(ph), url.PathEscape(v))
				if rep != esc {
					if p, err := url.PathUnescape(rep); err == nil {
						req.URL.Path, req.URL.RawPath = p, rep
						in.Secrets = append(in.Secrets, url.PathEscape(v))
					}
				}
			case InQuery:
				q := req.URL.RawQuery
				rep := strings.ReplaceAll(q, ph, url.QueryEscape(v))
				rep = strings.ReplaceAll(rep, url.QueryEscape(ph), url.QueryEscape(v))
				if rep != q {
					req.URL.RawQuery = rep
					in.Secrets = append(in.Secrets, url.QueryEscape(v))
				}
			case InBody:
				substituteBody(req, ph, v)
			}
		}
	}
}

// substituteBody replaces ph in a JSON (escaped as a JSON string), form
// (form-encoded) or text body of at most maxSubstBody bytes. Compressed and
// multipart bodies, and bodies of other types, pass unchanged.
func substituteBody(req *http.Request, ph, v string) {
	if req.Body == nil || req.Body == http.NoBody || req.Header.Get("Content-Encoding") != "" {
		return
	}
	mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	var rep string
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v)
		rep = strings.TrimSuffix(b.String(), "\n")
		rep = rep[1 : len(rep)-1]
	case mt == "application/x-www-form-urlencoded":
		rep = url.QueryEscape(v)
	case strings.HasPrefix(mt, "text/"):
		rep = v
	default:
		return
	}
	data, err := io.ReadAll(io.LimitReader(req.Body, maxSubstBody+1))
	if err != nil || len(data) > maxSubstBody {
		// Too large or unreadable: forward what was read followed by the rest.
		req.Body = readCloser{io.MultiReader(bytes.NewReader(data), req.Body), req.Body}
		return
	}
	_ = req.Body.Close()
	data = bytes.ReplaceAll(data, []byte(ph), []byte(rep))
	req.Body = io.NopCloser(bytes.NewReader(data))
	req.ContentLength = int64(len(data))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	if req.Header.Get("Content-Length") != "" {
		req.Header.Set("Content-Length", strconv.Itoa(len(data)))
	}
}

type readCloser struct {
	io.Reader
	io.Closer
}

// Redact replaces, in every value of h, each occurrence of a secret and of
// its standard base64 form with "[REDACTED]". Longer secrets are replaced
// first; empty secrets are ignored.
func Redact(h http.Header, secrets []string) {
	if len(secrets) == 0 || len(h) == 0 {
		return
	}
	var all []string
	for _, s := range secrets {
		if s == "" || s == redacted {
			continue
		}
		all = append(all, s, base64.StdEncoding.EncodeToString([]byte(s)))
	}
	slices.SortFunc(all, func(a, b string) int { return len(b) - len(a) })
	for k, vals := range h {
		for i, v := range vals {
			for _, s := range all {
				if strings.Contains(v, s) {
					v = strings.ReplaceAll(v, s, redacted)
				}
			}
			h[k][i] = v
		}
	}
}
