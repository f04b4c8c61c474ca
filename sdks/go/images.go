package hybox

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// Images lists the images of the server's container runtimes.
//
// # Errors
// An *APIError matching ErrNotSupported when the server runs no
// container runtime, or a transport error.
func (c *Client) Images(ctx context.Context) ([]api.Image, error) {
	var out api.ImageList
	err := c.tr.call(ctx, request{method: http.MethodGet, path: "/images"}, &out)
	return out.Items, err
}

// ImportImage uploads an OCI or docker image archive (a tar stream, read
// as it is sent) and returns the images it held.
//
// # Errors
// An *APIError (ErrInvalid for an archive that is not an image,
// ErrNotSupported without container runtimes), or a transport error.
func (c *Client) ImportImage(ctx context.Context, archive io.Reader) ([]api.Image, error) {
	var out api.ImageList
	err := c.tr.call(ctx, request{method: http.MethodPost, path: "/images/import", raw: archive, ctype: "application/x-tar"}, &out)
	return out.Items, err
}

// PullImage fetches an image from its registry.
//
// # Errors
// An *APIError (ErrInvalid for a bad reference, ErrUnavailable when the
// registry cannot be reached, ErrNotSupported without container
// runtimes), or a transport error.
func (c *Client) PullImage(ctx context.Context, req api.PullImageRequest) (api.Image, error) {
	var out api.Image
	err := c.tr.call(ctx, request{method: http.MethodPost, path: "/images/pull", body: req}, &out)
	return out, err
}

// RemoveImage deletes an image by name.
//
// # Errors
// An *APIError matching ErrNotFound when there is no such image, or a
// transport error.
func (c *Client) RemoveImage(ctx context.Context, name string) error {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = pathEscape(p)
	}
	return c.tr.call(ctx, request{method: http.MethodDelete, path: "/images/" + strings.Join(parts, "/")}, nil)
}
