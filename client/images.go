package client

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"
)

// StoredImage is an image of the server's container backend.
type StoredImage struct {
	Name      string    `json:"name"`
	Digest    string    `json:"digest"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"createdAt"`
}

type imageList struct {
	Items []StoredImage `json:"items"`
}

// ListImages lists the server's images.
//
// # Errors
// An *APIError (NOT_SUPPORTED when the server runs no container backend).
func (c *Client) ListImages(ctx context.Context) ([]StoredImage, error) {
	var out imageList
	err := c.transport().call(ctx, request{method: http.MethodGet, path: "/images"}, &out)
	return out.Items, err
}

// ImportImage uploads an OCI or docker image archive.
//
// # Errors
// An *APIError when the archive is not valid or the server cannot store it.
func (c *Client) ImportImage(ctx context.Context, archive io.Reader) ([]StoredImage, error) {
	var out imageList
	err := c.transport().call(ctx, request{method: http.MethodPost, path: "/images/import",
		raw: archive, ctype: "application/x-tar"}, &out)
	return out.Items, err
}

// RemoveImage deletes an image by name.
//
// # Errors
// An *APIError matching ErrNotFound when there is no such image.
func (c *Client) RemoveImage(ctx context.Context, name string) error {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = pathEscape(p)
	}
	return c.transport().call(ctx, request{method: http.MethodDelete, path: "/images/" + strings.Join(parts, "/")}, nil)
}
