package execd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// RunCodeRemote runs req through the execd API at url (its POST /code)
// with client, adding header, and hands the stream's events to sink: how
// the server runs code in a sandbox whose execd it reaches over a socket
// or the network (runtimes.CodeRunner of the container backends). where
// names that execd in the error of a failed connection.
//
// # Errors
// errdefs.ErrUnreachable when execd does not answer; what POST /code
// answered before its stream started, as its kind.
func RunCodeRemote(ctx context.Context, client *http.Client, url string, header http.Header, where string, req api.CodeRunRequest, sink Sink) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, vs := range header {
		hreq.Header[k] = vs
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(hreq)
	if err != nil {
		return fmt.Errorf("%w: hybox-execd in %s: %v", errdefs.ErrUnreachable, where, err)
	}
	defer resp.Body.Close()
	if err := errdefs.Check(resp); err != nil {
		return err
	}
	return api.ReadEvents(resp.Body, sink.Send)
}

// WaitRemote polls GET url (the /ping of an execd the server reaches over
// a socket or the network) with client and header until it answers 200,
// first every 2 ms and backing off to 64 ms. It reports false when ctx
// ends first.
func WaitRemote(ctx context.Context, client *http.Client, url string, header http.Header) bool {
	delay := 2 * time.Millisecond
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		for k, vs := range header {
			req.Header[k] = vs
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, 64*time.Millisecond)
	}
}
