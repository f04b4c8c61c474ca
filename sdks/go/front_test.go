package hybox_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// newFront starts a local HTTP server for tests of the SDK's own retry
// logic (not a stand-in for hybox: the other tests use a real server).
func newFront(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}
