package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/runtimes/wasm/internal/egresstest"
)

// hop is one request a hopServer received.
type hop struct {
	Method, Path, Host string
	Body               string
	Header             http.Header
}

// hopServer is a loopback server that records every request. Its routes:
//
//	/to?code=N&loc=L  answers N with Location L (no Location when L is empty)
//	/chain/N          redirects (302) to /chain/N-1; /chain/0 answers "end"
//	/size/N           answers N bytes
//	/hang             answers when its request is cancelled
//	anything else     200 "ok <method>", echoing X-Custom as X-Echo
type hopServer struct {
	*httptest.Server
	mu   sync.Mutex
	hops []hop
}

func newHopServer(t *testing.T) *hopServer {
	t.Helper()
	s := &hopServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *hopServer) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.hops = append(s.hops, hop{Method: r.Method, Path: r.URL.RequestURI(), Host: r.Host, Body: string(b), Header: r.Header.Clone()})
	s.mu.Unlock()
	switch {
	case r.URL.Path == "/to":
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		if loc := r.URL.Query().Get("loc"); loc != "" {
			w.Header().Set("Location", loc)
		}
		w.WriteHeader(code)
		io.WriteString(w, "redirect body")
	case strings.HasPrefix(r.URL.Path, "/chain/"):
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/chain/"))
		if n == 0 {
			io.WriteString(w, "end")
			return
		}
		http.Redirect(w, r, "/chain/"+strconv.Itoa(n-1), http.StatusFound)
	case strings.HasPrefix(r.URL.Path, "/size/"):
		n, _ := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/size/"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		_, _ = io.CopyN(w, zeros{}, n)
	case r.URL.Path == "/hang":
		<-r.Context().Done()
	default:
		w.Header().Add("X-Multi", "b")
		w.Header().Add("X-Multi", "a")
		w.Header().Set("X-Echo", r.Header.Get("X-Custom"))
		io.WriteString(w, "ok "+r.Method)
	}
}

// got returns the requests received so far.
func (s *hopServer) got() []hop {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hop(nil), s.hops...)
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// egressFunc adapts a function to Egress.
type egressFunc func(*http.Request) (*http.Response, error)

func (f egressFunc) Do(req *http.Request) (*http.Response, error) { return f(req) }

func TestDoHTTPRequestAndResponse(t *testing.T) {
	s := newHopServer(t)
	eg := egresstest.NewEgress(s.Server)
	resp, err := DoHTTP(context.Background(), eg, HTTPRequest{
		Method: "put", URL: s.URL + "/plain?q=1",
		Headers: [][2]string{{"X-Custom", "one"}, {"x-custom", "two"}, {"Host", "virtual.test"}},
		Body:    []byte("payload"),
	})
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.Status)
	assert.Equal(t, "OK", resp.StatusText)
	assert.Equal(t, s.URL+"/plain?q=1", resp.URL)
	assert.False(t, resp.Redirected)
	assert.Equal(t, "ok PUT", string(resp.Body))
	// Sorted by name, values in received order.
	var names []string
	for _, h := range resp.Headers {
		names = append(names, h[0])
	}
	assert.IsNonDecreasing(t, names)
	assert.Contains(t, resp.Headers, [2]string{"X-Echo", "one"})
	assert.Subset(t, resp.Headers, [][2]string{{"X-Multi", "b"}, {"X-Multi", "a"}})
	iB := indexOf(resp.Headers, [2]string{"X-Multi", "b"})
	iA := indexOf(resp.Headers, [2]string{"X-Multi", "a"})
	assert.Less(t, iB, iA, "values keep their order")

	hops := s.got()
	require.Len(t, hops, 1)
	assert.Equal(t, hop{Method: "PUT", Path: "/plain?q=1", Host: "virtual.test", Body: "payload"},
		hop{Method: hops[0].Method, Path: hops[0].Path, Host: hops[0].Host, Body: hops[0].Body})
	assert.Equal(t, []string{"one", "two"}, hops[0].Header.Values("X-Custom"))
}

func indexOf(hs [][2]string, h [2]string) int {
	for i, x := range hs {
		if x == h {
			return i
		}
	}
	return -1
}

func TestDoHTTPStatusText(t *testing.T) {
	s := newHopServer(t)
	resp, err := DoHTTP(context.Background(), egresstest.NewEgress(s.Server), HTTPRequest{URL: s.URL + "/to?code=418"})
	require.NoError(t, err)
	assert.Equal(t, 418, resp.Status)
	assert.Equal(t, "I'm a teapot", resp.StatusText)
	assert.Equal(t, "redirect body", string(resp.Body))
}

// TestDoHTTPRedirectMethods checks how each redirect status rewrites the
// method and the body of the next hop (as fetch does).
func TestDoHTTPRedirectMethods(t *testing.T) {
	for _, c := range []struct {
		name         string
		method, body string
		code         int
		wantMethod   string
		wantBody     string
		keepCType    bool
	}{
		{"303 POST becomes GET", "POST", "data", 303, "GET", "", false},
		{"303 PUT becomes GET", "PUT", "data", 303, "GET", "", false},
		{"303 HEAD stays HEAD", "HEAD", "", 303, "HEAD", "", true},
		{"302 POST becomes GET", "POST", "data", 302, "GET", "", false},
		{"301 POST becomes GET", "POST", "data", 301, "GET", "", false},
		{"302 PUT keeps method and body", "PUT", "data", 302, "PUT", "data", true},
		{"301 DELETE keeps method", "DELETE", "", 301, "DELETE", "", true},
		{"307 POST keeps method and body", "POST", "data", 307, "POST", "data", true},
		{"308 POST keeps method and body", "POST", "data", 308, "POST", "data", true},
		{"302 GET stays GET", "GET", "", 302, "GET", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newHopServer(t)
			var body []byte
			if c.body != "" {
				body = []byte(c.body)
			}
			resp, err := DoHTTP(context.Background(), egresstest.NewEgress(s.Server), HTTPRequest{
				Method: c.method, URL: s.URL + "/to?code=" + strconv.Itoa(c.code) + "&loc=/final",
				Headers: [][2]string{{"Content-Type", "text/plain"}, {"Content-Language", "en"}, {"X-Custom", "kept"}},
				Body:    body,
			})
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.Status)
			assert.True(t, resp.Redirected)
			assert.Equal(t, s.URL+"/final", resp.URL)
			hops := s.got()
			require.Len(t, hops, 2)
			assert.Equal(t, c.method, hops[0].Method)
			assert.Equal(t, c.body, hops[0].Body)
			assert.Equal(t, c.wantMethod, hops[1].Method)
			assert.Equal(t, c.wantBody, hops[1].Body)
			assert.Equal(t, "kept", hops[1].Header.Get("X-Custom"))
			if c.keepCType {
				assert.Equal(t, "text/plain", hops[1].Header.Get("Content-Type"))
				assert.Equal(t, "en", hops[1].Header.Get("Content-Language"))
			} else {
				assert.Empty(t, hops[1].Header.Values("Content-Type"))
				assert.Empty(t, hops[1].Header.Values("Content-Language"))
			}
		})
	}
}

// TestDoHTTPCredentialsStayWithOrigin checks that the guest's credentials
// follow a redirect within its origin but not to another one.
func TestDoHTTPCredentialsStayWithOrigin(t *testing.T) {
	a, b := newHopServer(t), newHopServer(t)
	eg := egresstest.NewEgress(a.Server, b.Server)
	creds := [][2]string{
		{"Authorization", "Bearer guest"}, {"Cookie", "c=1"}, {"Proxy-Authorization", "Basic eA=="}, {"X-Custom", "kept"},
	}
	// a → a (same origin) → b (another port: another origin) → b.
	loc := "/to?code=307&loc=" + url.QueryEscape(b.URL+"/to?code=302&loc=/end")
	resp, err := DoHTTP(context.Background(), eg, HTTPRequest{
		URL: a.URL + "/to?code=302&loc=" + url.QueryEscape(loc), Headers: creds,
	})
	require.NoError(t, err)
	assert.Equal(t, b.URL+"/end", resp.URL)
	assert.Equal(t, "ok GET", string(resp.Body))

	ah, bh := a.got(), b.got()
	require.Len(t, ah, 2)
	require.Len(t, bh, 2)
	for i, h := range ah {
		assert.Equal(t, "Bearer guest", h.Header.Get("Authorization"), "same-origin hop %d", i)
		assert.Equal(t, "c=1", h.Header.Get("Cookie"), "same-origin hop %d", i)
		assert.Equal(t, "Basic eA==", h.Header.Get("Proxy-Authorization"), "same-origin hop %d", i)
	}
	for i, h := range bh {
		assert.Empty(t, h.Header.Values("Authorization"), "cross-origin hop %d", i)
		assert.Empty(t, h.Header.Values("Cookie"), "cross-origin hop %d", i)
		assert.Empty(t, h.Header.Values("Proxy-Authorization"), "cross-origin hop %d", i)
		assert.Equal(t, "kept", h.Header.Get("X-Custom"), "cross-origin hop %d", i)
	}
}

func TestDoHTTPRedirectLimit(t *testing.T) {
	s := newHopServer(t)
	eg := egresstest.NewEgress(s.Server)
	resp, err := DoHTTP(context.Background(), eg, HTTPRequest{URL: s.URL + "/chain/" + strconv.Itoa(maxRedirects)})
	require.NoError(t, err)
	assert.Equal(t, "end", string(resp.Body))
	assert.True(t, resp.Redirected)
	assert.Len(t, s.got(), maxRedirects+1)

	s2 := newHopServer(t)
	_, err = DoHTTP(context.Background(), egresstest.NewEgress(s2.Server), HTTPRequest{URL: s2.URL + "/chain/" + strconv.Itoa(maxRedirects+1)})
	var he *HTTPError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, "too many redirects (more than 20)", he.Msg)
	assert.Len(t, s2.got(), maxRedirects+1, "no request after the limit")
}

func TestDoHTTPRedirectModes(t *testing.T) {
	s := newHopServer(t)
	eg := egresstest.NewEgress(s.Server)
	u := s.URL + "/to?code=302&loc=/final"

	resp, err := DoHTTP(context.Background(), eg, HTTPRequest{URL: u, Redirect: RedirectManual})
	require.NoError(t, err)
	assert.Equal(t, http.StatusFound, resp.Status)
	assert.Equal(t, u, resp.URL)
	assert.False(t, resp.Redirected)
	assert.Contains(t, resp.Headers, [2]string{"Location", "/final"})
	assert.Equal(t, "redirect body", string(resp.Body))
	assert.Len(t, s.got(), 1)

	_, err = DoHTTP(context.Background(), eg, HTTPRequest{URL: u, Redirect: RedirectError})
	var he *HTTPError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, `redirect from `+u+` refused: redirect mode is "error"`, he.Msg)
	assert.Len(t, s.got(), 2, "the redirect is not followed")

	// A redirect status without a Location is an ordinary response.
	resp, err = DoHTTP(context.Background(), eg, HTTPRequest{URL: s.URL + "/to?code=302", Redirect: RedirectError})
	require.NoError(t, err)
	assert.Equal(t, http.StatusFound, resp.Status)
	assert.False(t, resp.Redirected)
}

func TestDoHTTPBodyLimits(t *testing.T) {
	s := newHopServer(t)
	eg := egresstest.NewEgress(s.Server)

	resp, err := DoHTTP(context.Background(), eg, HTTPRequest{URL: s.URL + "/size/" + strconv.Itoa(MaxHTTPBody)})
	require.NoError(t, err)
	assert.Len(t, resp.Body, MaxHTTPBody)

	_, err = DoHTTP(context.Background(), eg, HTTPRequest{URL: s.URL + "/size/" + strconv.Itoa(MaxHTTPBody+1)})
	var he *HTTPError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, "response body exceeds the 64 MiB limit", he.Msg)

	n := len(s.got())
	_, err = DoHTTP(context.Background(), eg, HTTPRequest{Method: "POST", URL: s.URL + "/", Body: make([]byte, MaxHTTPBody+1)})
	require.ErrorAs(t, err, &he)
	assert.Equal(t, "request body of 67108865 bytes exceeds the 64 MiB limit", he.Msg)
	assert.Len(t, s.got(), n, "nothing is sent")
}

func TestDoHTTPInvalid(t *testing.T) {
	s := newHopServer(t)
	eg := egresstest.NewEgress(s.Server)
	for _, c := range []struct {
		name string
		r    HTTPRequest
		want string
	}{
		{"relative URL", HTTPRequest{URL: "/x"}, `invalid URL "/x": only absolute http and https URLs are supported`},
		{"file URL", HTTPRequest{URL: "file:///etc/passwd"}, `invalid URL "file:///etc/passwd": only absolute http and https URLs are supported`},
		{"no host", HTTPRequest{URL: "http:///x"}, "only absolute http and https URLs are supported"},
		{"unparsable URL", HTTPRequest{URL: "http://[::1"}, `invalid URL "http://[::1"`},
		{"bad redirect mode", HTTPRequest{URL: s.URL, Redirect: "sometimes"}, `invalid redirect mode "sometimes"`},
		{"bad method", HTTPRequest{URL: s.URL, Method: "GE T"}, "invalid request"},
		{"redirect to another scheme", HTTPRequest{URL: s.URL + "/to?code=302&loc=ftp://x/"}, `invalid redirect location "ftp://x/"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := DoHTTP(context.Background(), eg, c.r)
			var he *HTTPError
			require.ErrorAs(t, err, &he)
			assert.Contains(t, he.Msg, c.want)
			assert.False(t, he.Timeout)
		})
	}
}

// TestDoHTTPUnparsableLocation checks a Location that is not a URL. (An
// http.Client refuses it itself; an Egress need not.)
func TestDoHTTPUnparsableLocation(t *testing.T) {
	eg := egressFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusFound, Status: "302 Found", Request: req,
			Header: http.Header{"Location": {"http://%zz"}}, Body: io.NopCloser(strings.NewReader(""))}, nil
	})
	_, err := DoHTTP(context.Background(), eg, HTTPRequest{URL: "http://example.test/"})
	var he *HTTPError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, `invalid redirect location "http://%zz"`, he.Msg)
}

func TestDoHTTPEgressErrors(t *testing.T) {
	_, err := DoHTTP(context.Background(), nil, HTTPRequest{URL: "http://127.0.0.1:1/"})
	var he *HTTPError
	require.ErrorAs(t, err, &he)
	assert.ErrorIs(t, err, ErrNoNetwork)
	assert.Equal(t, "this sandbox has no network access", he.Msg)

	// A denial keeps the policy's text and its error.
	s := newHopServer(t)
	eg := egresstest.NewEgress(s.Server)
	_, err = DoHTTP(context.Background(), eg, HTTPRequest{URL: "https://denied.test/x"})
	require.ErrorAs(t, err, &he)
	assert.Equal(t, egresstest.DeniedMessage, he.Msg)
	assert.ErrorIs(t, err, policy.ErrDenied)

	// A redirect into a denied host is refused at that hop.
	_, err = DoHTTP(context.Background(), eg, HTTPRequest{URL: s.URL + "/to?code=302&loc=http://denied.test/"})
	require.ErrorAs(t, err, &he)
	assert.Equal(t, egresstest.DeniedMessage, he.Msg)
	assert.ErrorIs(t, err, policy.ErrDenied)
	assert.Len(t, s.got(), 1)
}

// TestDoHTTPEgressFollowedRedirects checks that when an Egress follows
// redirects itself, the response still names the final URL.
func TestDoHTTPEgressFollowedRedirects(t *testing.T) {
	s := newHopServer(t)
	c := s.Client()
	resp, err := DoHTTP(context.Background(), egressFunc(c.Do), HTTPRequest{URL: s.URL + "/chain/2"})
	require.NoError(t, err)
	assert.Equal(t, s.URL+"/chain/0", resp.URL)
	assert.True(t, resp.Redirected)
	assert.Equal(t, "end", string(resp.Body))
}

func TestDoHTTPTimeoutAndCancel(t *testing.T) {
	s := newHopServer(t)
	eg := egresstest.NewEgress(s.Server)

	start := time.Now()
	_, err := DoHTTP(context.Background(), eg, HTTPRequest{URL: s.URL + "/hang", Timeout: 0.2})
	var he *HTTPError
	require.ErrorAs(t, err, &he)
	assert.True(t, he.Timeout)
	assert.Equal(t, "timed out", he.Msg)
	assert.Less(t, time.Since(start), 10*time.Second)

	cause := errors.New("run stopped")
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(100*time.Millisecond, func() { cancel(cause) })
	_, err = DoHTTP(ctx, eg, HTTPRequest{URL: s.URL + "/hang", Timeout: 30})
	require.ErrorAs(t, err, &he)
	assert.False(t, he.Timeout)
	assert.Equal(t, "request cancelled: run stopped", he.Msg)

	// A timeout that covers the request lets it finish.
	resp, err := DoHTTP(context.Background(), eg, HTTPRequest{URL: s.URL + "/", Timeout: 30})
	require.NoError(t, err)
	assert.Equal(t, "ok GET", string(resp.Body))
}

// TestDoHTTPBodyReadFailure checks that a body that fails while being read
// is an error, not a short body.
func TestDoHTTPBodyReadFailure(t *testing.T) {
	boom := errors.New("connection reset")
	eg := egressFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Request: req,
			Body: io.NopCloser(io.MultiReader(bytes.NewReader([]byte("partial")), errReader{boom}))}, nil
	})
	_, err := DoHTTP(context.Background(), eg, HTTPRequest{URL: "http://example.test/"})
	var he *HTTPError
	require.ErrorAs(t, err, &he)
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, "connection reset", he.Msg)
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
