package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
)

// File types of FileInfo.
const (
	FileTypeFile      = "file"
	FileTypeDirectory = "directory"
	FileTypeSymlink   = "symlink"
	FileTypeOther     = "other"
)

// FileInfo describes a file of a sandbox. Mode is the octal digits written
// as a decimal integer (755 means 0o755).
type FileInfo struct {
	Path       string `json:"path"`
	Type       string `json:"type"`
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modified_at,omitempty"`
	CreatedAt  string `json:"created_at,omitempty"`
	Owner      string `json:"owner,omitempty"`
	Group      string `json:"group,omitempty"`
	Mode       int    `json:"mode"`
}

// FileInfo returns information about paths, keyed by path.
//
// # Errors
// An *APIError (FILE_NOT_FOUND) or a transport error.
func (e *Execd) FileInfo(ctx context.Context, paths ...string) (map[string]FileInfo, error) {
	out := map[string]FileInfo{}
	if err := e.t.call(ctx, request{method: http.MethodGet, path: "/files/info", query: url.Values{"path": paths}}, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// RemoveFile deletes a file.
//
// # Errors
// An *APIError or a transport error.
func (e *Execd) RemoveFile(ctx context.Context, path string) error {
	return e.t.call(ctx, request{method: http.MethodDelete, path: "/files", query: url.Values{"path": {path}}}, nil)
}

// Move is one rename of MoveFiles.
type Move struct {
	Src  string `json:"src"`
	Dest string `json:"dest"`
}

// MoveFiles renames files.
//
// # Errors
// An *APIError or a transport error.
func (e *Execd) MoveFiles(ctx context.Context, moves ...Move) error {
	return e.t.call(ctx, request{method: http.MethodPost, path: "/files/mv", body: moves}, nil)
}

// SearchFiles returns the files under dir whose names match a glob pattern.
//
// # Errors
// An *APIError or a transport error.
func (e *Execd) SearchFiles(ctx context.Context, dir, pattern string) ([]FileInfo, error) {
	var out []FileInfo
	q := url.Values{"path": {dir}, "pattern": {pattern}}
	if err := e.t.call(ctx, request{method: http.MethodGet, path: "/files/search", query: q}, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// ListDir lists a directory down to depth levels (1 when depth < 1).
//
// # Errors
// An *APIError (FILE_NOT_FOUND) or a transport error.
func (e *Execd) ListDir(ctx context.Context, path string, depth int) ([]FileInfo, error) {
	if depth < 1 {
		depth = 1
	}
	var out []FileInfo
	q := url.Values{"path": {path}, "depth": {strconv.Itoa(depth)}}
	if err := e.t.call(ctx, request{method: http.MethodGet, path: "/directories/list", query: q}, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// MakeDir creates a directory and its parents with mode (octal digits as
// decimal, 755 for 0o755; 0 leaves the server's default).
//
// # Errors
// An *APIError or a transport error.
func (e *Execd) MakeDir(ctx context.Context, path string, mode int) error {
	perm := map[string]any{}
	if mode != 0 {
		perm["mode"] = mode
	}
	return e.t.call(ctx, request{method: http.MethodPost, path: "/directories", body: map[string]any{path: perm}}, nil)
}

// RemoveDir deletes a directory and everything under it.
//
// # Errors
// An *APIError or a transport error.
func (e *Execd) RemoveDir(ctx context.Context, path string) error {
	return e.t.call(ctx, request{method: http.MethodDelete, path: "/directories", query: url.Values{"path": {path}}}, nil)
}

// Upload is one file of UploadFiles.
type Upload struct {
	Path    string    // destination path in the sandbox
	Mode    int       // octal digits as decimal (644); 0 = server default
	Owner   string    // optional
	Group   string    // optional
	Content io.Reader // the file's bytes
}

// UploadFiles writes files into the sandbox in one multipart request
// (parts "metadata" and "file" per file), streaming their contents.
//
// # Errors
// An *APIError, a transport error, or an error reading a Content.
func (e *Execd) UploadFiles(ctx context.Context, files ...Upload) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(writeUploads(mw, files))
	}()
	r := request{method: http.MethodPost, path: "/files/upload", raw: pr, ctype: mw.FormDataContentType()}
	err := e.t.call(ctx, r, nil)
	pr.CloseWithError(io.ErrClosedPipe) // unblock the writer if the server answered early
	<-done
	return err
}

func writeUploads(mw *multipart.Writer, files []Upload) error {
	for _, f := range files {
		meta := map[string]any{"path": f.Path}
		if f.Mode != 0 {
			meta["mode"] = f.Mode
		}
		if f.Owner != "" {
			meta["owner"] = f.Owner
		}
		if f.Group != "" {
			meta["group"] = f.Group
		}
		b, err := json.Marshal(meta)
		if err != nil {
			return err
		}
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
		h.Set("Content-Type", "application/json")
		pw, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		if _, err := pw.Write(b); err != nil {
			return err
		}
		fw, err := mw.CreateFormFile("file", baseName(f.Path))
		if err != nil {
			return err
		}
		if f.Content != nil {
			if _, err := io.Copy(fw, f.Content); err != nil {
				return fmt.Errorf("upload %s: %w", f.Path, err)
			}
		}
	}
	return mw.Close()
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			if i == len(p)-1 {
				return "file"
			}
			return p[i+1:]
		}
	}
	if p == "" {
		return "file"
	}
	return p
}

// Download returns the contents of a file. Close the reader.
//
// # Errors
// An *APIError (FILE_NOT_FOUND) or a transport error.
func (e *Execd) Download(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := e.t.send(ctx, request{method: http.MethodGet, path: "/files/download", query: url.Values{"path": {path}}, accept: "*/*"})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
