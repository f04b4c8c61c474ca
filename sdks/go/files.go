package hybox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"path"
	"strconv"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// Mode returns m's permission bits (setuid, setgid and sticky included) in
// the wire form: octal digits written as a decimal number (0o755 is 755).
func Mode(m fs.FileMode) api.FileMode { return api.ModeOf(m) }

// FileInfo describes paths of the sandbox, keyed by path.
//
// # Errors
// An *APIError matching ErrNotFound when a path does not exist, or a
// transport error.
func (s *Sandbox) FileInfo(ctx context.Context, paths ...string) (map[string]api.FileInfo, error) {
	out := map[string]api.FileInfo{}
	err := s.execdCall(ctx, request{method: http.MethodGet, path: "/files/info", query: url.Values{"path": paths}}, &out)
	return out, err
}

// ListDir lists a directory down to depth levels (1 when depth < 1).
//
// # Errors
// An *APIError matching ErrNotFound for a missing directory, or a
// transport error.
func (s *Sandbox) ListDir(ctx context.Context, dir string, depth int) ([]api.FileInfo, error) {
	q := url.Values{"path": {dir}, "depth": {strconv.Itoa(max(depth, 1))}}
	var out []api.FileInfo
	err := s.execdCall(ctx, request{method: http.MethodGet, path: "/directories/list", query: q}, &out)
	return out, err
}

// SearchFiles returns the files under dir whose names match a glob
// pattern.
//
// # Errors
// An *APIError (ErrNotFound for a missing directory, ErrInvalid for a bad
// pattern), or a transport error.
func (s *Sandbox) SearchFiles(ctx context.Context, dir, pattern string) ([]api.FileInfo, error) {
	q := url.Values{"path": {dir}, "pattern": {pattern}}
	var out []api.FileInfo
	err := s.execdCall(ctx, request{method: http.MethodGet, path: "/files/search", query: q}, &out)
	return out, err
}

// Open returns the contents of a file as a stream, which the caller must
// close.
//
// # Errors
// An *APIError matching ErrNotFound for a missing file, or a transport
// error.
func (s *Sandbox) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	t, err := s.transport(ctx, ExecdPort)
	if err != nil {
		return nil, err
	}
	resp, err := t.send(ctx, request{method: http.MethodGet, path: "/files/download",
		query: url.Values{"path": {name}}, accept: "*/*"})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Download copies a file of the sandbox to w as it arrives and returns
// the number of bytes copied.
//
// # Errors
// Those of Open, and errors reading the answer or writing to w.
func (s *Sandbox) Download(ctx context.Context, name string, w io.Writer) (int64, error) {
	rc, err := s.Open(ctx, name)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.Copy(w, rc)
	if err != nil {
		return n, fmt.Errorf("hybox: download %s: %w", name, err)
	}
	return n, nil
}

// ReadFile returns the contents of a file.
//
// # Errors
// Those of Download.
func (s *Sandbox) ReadFile(ctx context.Context, name string) ([]byte, error) {
	var b bytes.Buffer
	_, err := s.Download(ctx, name, &b)
	return b.Bytes(), err
}

// Upload is one file of Sandbox.Upload.
type Upload struct {
	// Path is the destination in the sandbox; missing parent directories
	// are created.
	Path string
	// Mode is the file's permission bits; 0 leaves the server's default.
	Mode fs.FileMode
	// Owner and Group are optional.
	Owner, Group string
	// Content is read to its end as the upload goes.
	Content io.Reader
}

// Upload writes files into the sandbox in one request, streaming each
// Content as it is read (nothing is buffered whole).
//
// # Errors
// An *APIError (ErrInvalid for a bad path, ErrUnauthorized for a path the
// sandbox may not write), a transport error, or an error reading a
// Content.
func (s *Sandbox) Upload(ctx context.Context, files ...Upload) error {
	t, err := s.transport(ctx, ExecdPort)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	done := make(chan error, 1)
	go func() {
		err := writeUploads(mw, files)
		pw.CloseWithError(err)
		done <- err
	}()
	err = t.call(ctx, request{method: http.MethodPost, path: "/files/upload", raw: pr, ctype: mw.FormDataContentType()}, nil)
	pr.CloseWithError(io.ErrClosedPipe) // unblock the writer if the server answered early
	if werr := <-done; err == nil && werr != nil && werr != io.ErrClosedPipe {
		err = werr
	}
	return err
}

func writeUploads(mw *multipart.Writer, files []Upload) error {
	for _, f := range files {
		meta := api.UploadMetadata{Path: f.Path, Owner: f.Owner, Group: f.Group}
		if f.Mode != 0 {
			meta.Mode = Mode(f.Mode)
		}
		b, err := json.Marshal(meta)
		if err != nil {
			return err
		}
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
		h.Set("Content-Type", "application/json")
		part, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		if _, err := part.Write(b); err != nil {
			return err
		}
		name := path.Base(f.Path)
		if name == "/" || name == "." {
			name = "file"
		}
		fw, err := mw.CreateFormFile("file", name)
		if err != nil {
			return err
		}
		if f.Content != nil {
			if _, err := io.Copy(fw, f.Content); err != nil {
				return fmt.Errorf("hybox: upload %s: %w", f.Path, err)
			}
		}
	}
	return mw.Close()
}

// WriteFile writes data to a file of the sandbox with permission bits
// perm (0 leaves the server's default).
//
// # Errors
// Those of Upload.
func (s *Sandbox) WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error {
	return s.Upload(ctx, Upload{Path: name, Mode: perm, Content: bytes.NewReader(data)})
}

// Remove deletes files.
//
// # Errors
// An *APIError (ErrNotFound for a missing file), or a transport error.
func (s *Sandbox) Remove(ctx context.Context, names ...string) error {
	return s.execdCall(ctx, request{method: http.MethodDelete, path: "/files", query: url.Values{"path": names}}, nil)
}

// Rename moves a file or directory.
//
// # Errors
// An *APIError (ErrNotFound for a missing source), or a transport error.
func (s *Sandbox) Rename(ctx context.Context, src, dest string) error {
	return s.Move(ctx, api.MoveItem{Src: src, Dest: dest})
}

// Move renames several files in one request.
//
// # Errors
// An *APIError or a transport error.
func (s *Sandbox) Move(ctx context.Context, moves ...api.MoveItem) error {
	if moves == nil {
		moves = []api.MoveItem{}
	}
	return s.execdCall(ctx, request{method: http.MethodPost, path: "/files/mv", body: moves}, nil)
}

// MakeDir creates a directory and its parents with permission bits perm
// (0 leaves the server's default).
//
// # Errors
// An *APIError or a transport error.
func (s *Sandbox) MakeDir(ctx context.Context, dir string, perm fs.FileMode) error {
	p := api.Permission{}
	if perm != 0 {
		p.Mode = Mode(perm)
	}
	return s.execdCall(ctx, request{method: http.MethodPost, path: "/directories", body: map[string]api.Permission{dir: p}}, nil)
}

// RemoveDir deletes directories and everything under them.
//
// # Errors
// An *APIError or a transport error.
func (s *Sandbox) RemoveDir(ctx context.Context, dirs ...string) error {
	return s.execdCall(ctx, request{method: http.MethodDelete, path: "/directories", query: url.Values{"path": dirs}}, nil)
}

// Replace replaces text in files: for each path, every occurrence of Old
// with New. It returns the number of replacements per path.
//
// # Errors
// An *APIError (ErrNotFound for a missing file), or a transport error.
func (s *Sandbox) Replace(ctx context.Context, edits map[string]api.ReplaceItem) (map[string]api.ReplaceResult, error) {
	out := map[string]api.ReplaceResult{}
	r := request{method: http.MethodPost, path: "/files/replace", body: edits, query: url.Values{"verbose": {"true"}}}
	err := s.execdCall(ctx, r, &out)
	return out, err
}

// SetPermissions changes the mode, owner or group of files (Mode from
// the Mode function).
//
// # Errors
// An *APIError (ErrNotFound for a missing file), or a transport error.
func (s *Sandbox) SetPermissions(ctx context.Context, perms map[string]api.Permission) error {
	return s.execdCall(ctx, request{method: http.MethodPost, path: "/files/permissions", body: perms}, nil)
}
