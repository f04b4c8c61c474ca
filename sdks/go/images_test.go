package hybox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// The test servers run wasm sandboxes only: every image call answers
// NOT_SUPPORTED, which the SDK reports as ErrNotSupported.
func TestImagesWithoutContainers(t *testing.T) {
	c := newClient(t, server(t))
	ctx := ctxFor(t, time.Minute)
	calls := map[string]func() error{
		"list":   func() error { _, err := c.Images(ctx); return err },
		"import": func() error { _, err := c.ImportImage(ctx, strings.NewReader("not a tar")); return err },
		"pull": func() error {
			_, err := c.PullImage(ctx, api.PullImageRequest{Ref: "docker.io/library/alpine:3"})
			return err
		},
		"remove": func() error { return c.RemoveImage(ctx, "docker.io/library/alpine:3") },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, hybox.ErrNotSupported) {
			t.Errorf("%s: %v, want ErrNotSupported", name, err)
		}
	}
}
