package hybox

import (
	"context"
	"net/http"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// ListPools lists the server's warm pools of container sandboxes.
//
// # Errors
// A transport error or an *APIError.
func (c *Client) ListPools(ctx context.Context) ([]api.Pool, error) {
	var out api.PoolList
	err := c.tr.call(ctx, request{method: http.MethodGet, path: "/pools"}, &out)
	return out.Items, err
}

// GetPool returns one pool and its status.
//
// # Errors
// An *APIError matching ErrNotFound when there is no such pool, or a
// transport error.
func (c *Client) GetPool(ctx context.Context, name string) (api.Pool, error) {
	var out api.Pool
	err := c.tr.call(ctx, request{method: http.MethodGet, path: "/pools/" + pathEscape(name)}, &out)
	return out, err
}

// CreatePool creates a warm pool; its members start in the background.
// Creates of the pool's image and runtime (or naming it in
// extensions["poolRef"]) then claim a member instead of starting cold.
//
// # Errors
// An *APIError: ErrInvalid (a bad name or capacity, an image the server
// does not have, a runtime that keeps no pools), ErrConflict (the name is
// taken); or a transport error.
func (c *Client) CreatePool(ctx context.Context, req api.CreatePoolRequest) (api.Pool, error) {
	var out api.Pool
	err := c.tr.call(ctx, request{method: http.MethodPost, path: "/pools", body: req}, &out)
	return out, err
}

// UpdatePool changes a pool's capacity.
//
// # Errors
// An *APIError (ErrNotFound, ErrInvalid), or a transport error.
func (c *Client) UpdatePool(ctx context.Context, name string, capacity api.PoolCapacitySpec) (api.Pool, error) {
	var out api.Pool
	err := c.tr.call(ctx, request{method: http.MethodPut, path: "/pools/" + pathEscape(name),
		body: api.UpdatePoolRequest{CapacitySpec: capacity}}, &out)
	return out, err
}

// DeletePool deletes a pool and its idle members; sandboxes claimed from
// it keep running.
//
// # Errors
// An *APIError matching ErrNotFound when there is no such pool, or a
// transport error.
func (c *Client) DeletePool(ctx context.Context, name string) error {
	return c.tr.call(ctx, request{method: http.MethodDelete, path: "/pools/" + pathEscape(name)}, nil)
}
