package hybox

import (
	"context"
	"net/http"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// ListVolumes lists the server's named volumes (the pvc volumes of
// creates) and the sandboxes using each.
//
// # Errors
// A transport error or an *APIError.
func (c *Client) ListVolumes(ctx context.Context) ([]api.NamedVolume, error) {
	var out api.NamedVolumeList
	err := c.tr.call(ctx, request{method: http.MethodGet, path: "/volumes"}, &out)
	return out.Items, err
}

// GetVolume returns one named volume.
//
// # Errors
// An *APIError matching ErrNotFound when there is none of that name, or a
// transport error.
func (c *Client) GetVolume(ctx context.Context, name string) (api.NamedVolume, error) {
	var out api.NamedVolume
	err := c.tr.call(ctx, request{method: http.MethodGet, path: "/volumes/" + pathEscape(name)}, &out)
	return out, err
}

// CreateVolume makes an empty named volume (a create's pvc volume with
// createIfNotExists makes one too).
//
// # Errors
// An *APIError: ErrInvalid (a bad name), ErrConflict (it exists); or a
// transport error.
func (c *Client) CreateVolume(ctx context.Context, name string) (api.NamedVolume, error) {
	var out api.NamedVolume
	err := c.tr.call(ctx, request{method: http.MethodPost, path: "/volumes", body: api.CreateVolumeRequest{Name: name}}, &out)
	return out, err
}

// DeleteVolume removes a named volume and its files.
//
// # Errors
// An *APIError: ErrNotFound, or ErrConflict while a sandbox uses it; or a
// transport error.
func (c *Client) DeleteVolume(ctx context.Context, name string) error {
	return c.tr.call(ctx, request{method: http.MethodDelete, path: "/volumes/" + pathEscape(name)}, nil)
}
