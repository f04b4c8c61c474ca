package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/hybox-dev/hybox/client"
	"github.com/hybox-dev/hybox/client/clienttest"
)

// newExecd creates a running sandbox and returns a client of its execd.
func newExecd(t *testing.T, srv *clienttest.Server) *client.Execd {
	t.Helper()
	id := srv.AddSandbox(client.Sandbox{Status: client.Status{State: client.StateRunning}})
	e, err := newClient(t, srv).Execd(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestExecdHeaders(t *testing.T) {
	srv := clienttest.NewServer(t)
	e := newExecd(t, srv)
	if err := e.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	req, _ := srv.LastRequest("GET", "/ping")
	for k, want := range map[string]string{
		"OpenSandbox-Ingress-To": strings.Split(req.Path, "/")[3] + "-44772",
		client.ExecdTokenHeader:  srv.ExecdToken,
		client.APIKeyHeader:      srv.APIKey, // same origin as the domain
		"User-Agent":             "hybox-test",
	} {
		if got := req.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if !strings.HasPrefix(e.BaseURL(), "http://") {
		t.Errorf("BaseURL = %q, want the domain's scheme", e.BaseURL())
	}
}

func TestExecdAt(t *testing.T) {
	var got http.Header
	var path string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, path = r.Header.Clone(), r.URL.Path
	}))
	defer other.Close()
	tests := []struct {
		name     string
		domain   string
		endpoint string
		headers  map[string]string
		wantKey  string
		wantPath string
		wantURL  string
	}{
		{name: "other host gets no key", domain: "http://127.0.0.2:1", endpoint: strings.TrimPrefix(other.URL, "http://") + "/gw/", headers: map[string]string{"X-A": "1"}, wantPath: "/gw/ping"},
		{name: "same host gets key", domain: other.URL, endpoint: strings.TrimPrefix(other.URL, "http://"), wantKey: "k", wantPath: "/ping"},
		{name: "endpoint header overrides key", domain: other.URL, endpoint: strings.TrimPrefix(other.URL, "http://"), headers: map[string]string{client.APIKeyHeader: "scoped"}, wantKey: "scoped", wantPath: "/ping"},
		{name: "scheme in endpoint kept", domain: "https://127.0.0.2", endpoint: other.URL + "/x", wantPath: "/x/ping"},
		{name: "https domain gives https", domain: "https://sb.test", endpoint: "sb.test/p", wantURL: "https://sb.test/p"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := client.New(client.Options{Domain: tt.domain, APIKey: "k"})
			e, err := c.ExecdAt(client.Endpoint{Endpoint: tt.endpoint, Headers: tt.headers})
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantURL != "" {
				if e.BaseURL() != tt.wantURL {
					t.Fatalf("BaseURL = %q, want %q", e.BaseURL(), tt.wantURL)
				}
				return
			}
			got, path = nil, ""
			if err := e.Ping(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got.Get(client.APIKeyHeader) != tt.wantKey || path != tt.wantPath {
				t.Errorf("key %q path %q; want %q %q", got.Get(client.APIKeyHeader), path, tt.wantKey, tt.wantPath)
			}
			for k, v := range tt.headers {
				if got.Get(k) != v {
					t.Errorf("header %s = %q, want %q", k, got.Get(k), v)
				}
			}
		})
	}
	c, _ := client.New(client.Options{Domain: "h"})
	if _, err := c.ExecdAt(client.Endpoint{}); !errors.Is(err, client.ErrInvalidOptions) {
		t.Errorf("empty endpoint: %v", err)
	}
}

func TestCommands(t *testing.T) {
	ctx := context.Background()
	srv := clienttest.NewServer(t)
	e := newExecd(t, srv)
	tests := []struct {
		name     string
		req      client.CommandRequest
		stdout   []string
		stderr   []string
		code     int
		ok       bool
		complete bool
	}{
		{name: "echo", req: client.CommandRequest{Command: "echo hi there"}, stdout: []string{"hi there"}, ok: true, complete: true},
		{name: "exit 3", req: client.CommandRequest{Command: "exit 3"}, stdout: []string{"bye"}, stderr: []string{"oops"}, code: 3, ok: true},
		{name: "timeout error", req: client.CommandRequest{Command: "fail"}},
		{name: "options sent", req: client.CommandRequest{Command: "env", Cwd: "/w", Timeout: 1500, Envs: map[string]string{"B": "2", "A": "1"}},
			stdout: []string{"cwd=/w", "timeout=1500", "A=1", "B=2"}, ok: true, complete: true},
		{name: "background", req: client.CommandRequest{Command: "sleep 1", Background: true}, ok: true, complete: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := e.RunCommand(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			x, err := st.Collect(nil)
			if err != nil {
				t.Fatal(err)
			}
			code, ok := x.ExitCode()
			if code != tt.code || ok != tt.ok || x.Complete != tt.complete || !strings.HasPrefix(x.ID, "cmd-") {
				t.Errorf("execution = %+v", x)
			}
			if !reflect.DeepEqual(x.Stdout, tt.stdout) || !reflect.DeepEqual(x.Stderr, tt.stderr) {
				t.Errorf("stdout %q stderr %q", x.Stdout, x.Stderr)
			}
		})
	}

	st, err := e.CommandStatus(ctx, "cmd-9")
	if err != nil || st.ID != "cmd-9" || st.Running || st.ExitCode == nil || *st.ExitCode != 0 {
		t.Fatalf("CommandStatus = %+v, %v", st, err)
	}
	logs, cur, err := e.CommandLogs(ctx, "cmd-9", 0)
	if err != nil || logs != "bg output\nmore\n" || cur != 15 {
		t.Fatalf("CommandLogs = %q, %d, %v", logs, cur, err)
	}
	logs, cur, err = e.CommandLogs(ctx, "cmd-9", 10)
	if err != nil || logs != "more\n" || cur != 15 {
		t.Fatalf("CommandLogs from 10 = %q, %d, %v", logs, cur, err)
	}
	if err := e.InterruptCommand(ctx, "cmd-9"); err != nil {
		t.Fatal(err)
	}
	var ae *client.APIError
	if err := e.InterruptCommand(ctx, ""); !errors.As(err, &ae) || ae.Code != "MISSING_QUERY" {
		t.Fatalf("interrupt without id: %v", err)
	}
	if _, err := e.RunCommand(ctx, client.CommandRequest{}); !errors.As(err, &ae) || ae.Code != "INVALID_REQUEST_BODY" {
		t.Fatalf("empty command: %v", err)
	}
}

func TestCommandCancel(t *testing.T) {
	srv := clienttest.NewServer(t)
	e := newExecd(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := e.RunCommand(ctx, client.CommandRequest{Command: "hang"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := st.Next(); err != nil || ev.Type != client.EventInit {
		t.Fatalf("first event = %+v, %v", ev, err)
	}
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err = st.Collect(nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Collect after cancel: %v", err)
	}
}

func TestCode(t *testing.T) {
	ctx := context.Background()
	srv := clienttest.NewServer(t)
	e := newExecd(t, srv)

	cc, err := e.CreateContext(ctx, "python", "/w")
	if err != nil || cc.ID != "ctx-python" || cc.Language != "python" {
		t.Fatalf("CreateContext = %+v, %v", cc, err)
	}
	req, _ := srv.LastRequest("POST", "/code/context")
	if string(req.Body) != `{"language":"python","cwd":"/w"}` {
		t.Errorf("context body = %s", req.Body)
	}
	all, err := e.ListContexts(ctx, "")
	if err != nil || len(all) != 2 {
		t.Fatalf("ListContexts = %+v, %v", all, err)
	}
	js, err := e.ListContexts(ctx, "javascript")
	if err != nil || len(js) != 1 || js[0].Language != "javascript" {
		t.Fatalf("ListContexts(javascript) = %+v, %v", js, err)
	}

	st, err := e.RunCode(ctx, client.CodeRequest{Context: *cc, Code: "x = 1"})
	if err != nil {
		t.Fatal(err)
	}
	x, err := st.Collect(nil)
	if err != nil || !x.Complete || x.ExecutionCount != 1 || x.ExecutionTime != 3 {
		t.Fatalf("RunCode = %+v, %v", x, err)
	}
	req, _ = srv.LastRequest("POST", "/code")
	var body client.CodeRequest
	if err := json.Unmarshal(req.Body, &body); err != nil || body.Context.ID != "ctx-python" || body.Code != "x = 1" {
		t.Errorf("code body = %s", req.Body)
	}

	st, err = e.RunCode(ctx, client.CodeRequest{Context: client.CodeContext{Language: "python"}, Code: "raise ValueError('boom')"})
	if err != nil {
		t.Fatal(err)
	}
	x, err = st.Collect(nil)
	if err != nil || x.Error == nil || x.Error.EName != "ValueError" || len(x.Error.Traceback) != 2 {
		t.Fatalf("failing code = %+v, %v", x, err)
	}

	if _, err := e.RunCode(ctx, client.CodeRequest{Context: client.CodeContext{ID: "missing"}, Code: "1"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("missing context: %v", err)
	}
	if err := e.InterruptCode(ctx, cc.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteContext(ctx, cc.ID); err != nil {
		t.Fatal(err)
	}
	var ae *client.APIError
	if err := e.DeleteContext(ctx, "missing"); !errors.As(err, &ae) || ae.Code != "CONTEXT_NOT_FOUND" {
		t.Fatalf("delete missing context: %v", err)
	}
	m, err := e.Metrics(ctx)
	if err != nil || m.MemTotalMiB != 512 {
		t.Fatalf("Metrics = %+v, %v", m, err)
	}
}

func TestFiles(t *testing.T) {
	ctx := context.Background()
	srv := clienttest.NewServer(t)
	e := newExecd(t, srv)

	big := bytes.Repeat([]byte("0123456789"), 100_000)
	err := e.UploadFiles(ctx,
		client.Upload{Path: "/w/a.txt", Mode: 600, Content: strings.NewReader("hello")},
		client.Upload{Path: "/w/sub/big.bin", Content: iotest.HalfReader(bytes.NewReader(big))},
	)
	if err != nil {
		t.Fatalf("UploadFiles: %v", err)
	}
	if b, _ := srv.File("/w/a.txt"); string(b) != "hello" {
		t.Errorf("a.txt = %q", b)
	}
	if b, _ := srv.File("/w/sub/big.bin"); !bytes.Equal(b, big) {
		t.Errorf("big.bin has %d bytes", len(b))
	}

	rc, err := e.Download(ctx, "/w/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello" {
		t.Errorf("download = %q", b)
	}
	if _, err := e.Download(ctx, "/nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("download missing: %v", err)
	}

	info, err := e.FileInfo(ctx, "/w/a.txt", "/w/sub/big.bin")
	if err != nil || info["/w/a.txt"].Size != 5 || info["/w/sub/big.bin"].Type != client.FileTypeFile {
		t.Fatalf("FileInfo = %+v, %v", info, err)
	}
	list, err := e.ListDir(ctx, "/w", 0)
	if err != nil || len(list) != 2 || list[0].Path != "/w/a.txt" || list[1].Type != client.FileTypeDirectory {
		t.Fatalf("ListDir = %+v, %v", list, err)
	}
	req, _ := srv.LastRequest("GET", "/directories/list")
	if req.Query.Get("depth") != "1" {
		t.Errorf("depth = %q", req.Query.Get("depth"))
	}
	found, err := e.SearchFiles(ctx, "/w", "*.bin")
	if err != nil || len(found) != 1 || found[0].Path != "/w/sub/big.bin" {
		t.Fatalf("SearchFiles = %+v, %v", found, err)
	}
	if err := e.MoveFiles(ctx, client.Move{Src: "/w/a.txt", Dest: "/w/b.txt"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := srv.File("/w/b.txt"); !ok {
		t.Error("move did not happen")
	}
	if err := e.MakeDir(ctx, "/w/new", 755); err != nil {
		t.Fatal(err)
	}
	req, _ = srv.LastRequest("POST", "/directories")
	if string(req.Body) != `{"/w/new":{"mode":755}}` {
		t.Errorf("mkdir body = %s", req.Body)
	}
	if err := e.RemoveFile(ctx, "/w/b.txt"); err != nil {
		t.Fatal(err)
	}
	if err := e.RemoveDir(ctx, "/w/sub"); err != nil {
		t.Fatal(err)
	}
	if _, ok := srv.File("/w/sub/big.bin"); ok {
		t.Error("rmdir left files")
	}
	if err := e.RemoveFile(ctx, "/w/b.txt"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("remove missing: %v", err)
	}
}

func TestUploadReadError(t *testing.T) {
	srv := clienttest.NewServer(t)
	e := newExecd(t, srv)
	boom := errors.New("disk on fire")
	err := e.UploadFiles(context.Background(), client.Upload{Path: "/x", Content: iotest.ErrReader(boom)})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the read error", err)
	}
}
