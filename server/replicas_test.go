package server

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/hybox-dev/hybox/internal/duplextest"
)

// TestToOwnerFullDuplex: a request forwarded to the replica that owns its
// sandbox still sends its body on after the owner has begun its answer.
// Without, a forwarded command's stream was cut after its init event,
// once in a while, when the owner answered before the forwarding
// replica's transport had finished with the body.
func TestToOwnerFullDuplex(t *testing.T) {
	owner := httptest.NewServer(duplextest.Upstream())
	t.Cleanup(owner.Close)
	target, err := url.Parse(owner.URL)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{opts: Options{Replica: "replica-b"}, log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	fwd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.toOwner("sb", "replica-a", target).ServeHTTP(w, r)
	}))
	t.Cleanup(fwd.Close)
	duplextest.Check(t, fwd.Client(), fwd.URL+"/v1/sandboxes/sb/proxy/44772/command")
}
