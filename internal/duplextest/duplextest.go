// Package duplextest checks that an HTTP proxy is full duplex: that it
// still sends the request's body on after the upstream has begun its
// answer.
//
// An HTTP/1 server in Go drains and closes a request's body when its
// handler writes the answer's headers, unless the handler has asked for
// full duplex (http.ResponseController.EnableFullDuplex). A proxy that
// has not asked loses the race between that close and its transport's
// last read of the body (the check that the body was not longer than
// declared): the read fails, the transport drops its connection to the
// upstream, and a streamed answer is cut after its first event. Check
// makes the race certain instead of rare: the upstream answers before it
// reads the body, and the client sends the body's end only once that
// answer has arrived.
package duplextest

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Ready is the first line Upstream sends, before it reads the body.
const Ready = "ready\n"

// Upstream answers Ready at once, then reads the request's body and sends
// it back.
func Upstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex() // Upstream answers before it reads, too
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, Ready)
		if err := rc.Flush(); err != nil {
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			_, _ = io.WriteString(w, "read error: "+err.Error())
			return
		}
		_, _ = w.Write(b)
	})
}

// Check sends a POST to url, behind which a proxy reaches Upstream: the
// first half of its body at once, the second only after Ready has come
// back. The answer must be Ready followed by the whole body. hdr are
// header names and values to set.
func Check(t testing.TB, client *http.Client, url string, hdr ...string) {
	t.Helper()
	first, second := "the first half of the body, ", "and the second, sent once the answer has begun"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	defer pw.Close()
	// The transport waits for its writer, which waits for the body.
	stop := context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	defer stop()
	req, err := http.NewRequestWithContext(ctx, "POST", url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(first) + len(second))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	go func() { _, _ = io.WriteString(pw, first) }()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST through the proxy (not full duplex: the answer did not begin before the body ended): %v", err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	if err != nil || line != Ready {
		t.Fatalf("the answer's first line %q (%v), want %q before the body has ended (not full duplex)", line, err, Ready)
	}
	if _, err := io.WriteString(pw, second); err != nil {
		t.Fatalf("sending the rest of the body after the answer began: %v", err)
	}
	rest, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("the answer after the body's end: %q, cut by %v (the proxy closed the body or its connection)", rest, err)
	}
	if got := string(rest); got != first+second {
		t.Fatalf("the upstream got the body %q, want %q", got, first+second)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("Content-Type %q, want Upstream's text/plain", resp.Header.Get("Content-Type"))
	}
}
