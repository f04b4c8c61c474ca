package execd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"strconv"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// maxMetadataPart caps one upload metadata part.
const maxMetadataPart = 64 << 10

// uploadMeta is the JSON of an upload's metadata part.
type uploadMeta = api.UploadMetadata

// upload serves POST /files/upload: a multipart body of repeated pairs of
// parts, "metadata" (JSON {path, owner, group, mode}) then "file". Each
// file streams to a temporary file beside its target (parents are created)
// and is renamed into place only when complete, so a failed or oversized
// upload leaves nothing behind. Files completed before a failure stay.
// Other part names are skipped. The whole body is capped at
// FilesOptions.MaxUploadBytes (413 PAYLOAD_TOO_LARGE beyond it).
func (a *filesAPI) upload(w http.ResponseWriter, r *http.Request, root *os.Root) {
	r.Body = http.MaxBytesReader(w, r.Body, a.maxUpload)
	mr, err := r.MultipartReader()
	if err != nil {
		writeFilesErr(w, fmt.Errorf("%w: expected a multipart/form-data body: %v", errBadRequest, err))
		return
	}
	ids := newIDNames(root)
	n, err := readUploads(mr, func(meta uploadMeta, body io.Reader) error {
		return storeUpload(root, ids, meta, body)
	})
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: no file parts", errBadMetadata)
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			err = fmt.Errorf("%w: request body larger than %d bytes", errTooLarge, a.maxUpload)
		}
		writeFilesErr(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// readUploads reads the parts of an upload body in order and calls store
// for each metadata/file pair, with the file part as body. It returns the
// number of files stored.
//
// # Errors
// errBadMetadata for a malformed or unpaired metadata part or a file part
// without metadata; errBadRequest for a malformed multipart body (wrapping
// the reader's error, so *http.MaxBytesError stays visible); store's error.
func readUploads(mr *multipart.Reader, store func(uploadMeta, io.Reader) error) (int, error) {
	var pending *uploadMeta
	n := 0
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, fmt.Errorf("%w: malformed multipart body: %w", errBadRequest, err)
		}
		switch part.FormName() {
		case "metadata":
			if pending != nil {
				return n, fmt.Errorf("%w: metadata for %q is not followed by a file part", errBadMetadata, pending.Path)
			}
			meta, err := parseUploadMeta(part)
			if err != nil {
				return n, err
			}
			pending = &meta
		case "file":
			if pending == nil {
				return n, fmt.Errorf("%w: file part without a metadata part before it", errBadMetadata)
			}
			if err := store(*pending, part); err != nil {
				return n, err
			}
			pending = nil
			n++
		default:
			if _, err := io.Copy(io.Discard, part); err != nil {
				return n, fmt.Errorf("%w: malformed multipart body: %w", errBadRequest, err)
			}
		}
		part.Close()
	}
	if pending != nil {
		return n, fmt.Errorf("%w: metadata for %q is not followed by a file part", errBadMetadata, pending.Path)
	}
	return n, nil
}

// parseUploadMeta decodes one metadata part.
func parseUploadMeta(part io.Reader) (uploadMeta, error) {
	b, err := readAllLimit(part, maxMetadataPart)
	if err != nil {
		if errors.Is(err, errBadRequest) {
			return uploadMeta{}, fmt.Errorf("%w: metadata part larger than %d bytes", errBadMetadata, maxMetadataPart)
		}
		return uploadMeta{}, fmt.Errorf("%w: malformed multipart body: %w", errBadRequest, err)
	}
	var meta uploadMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return uploadMeta{}, fmt.Errorf("%w: %v", errBadMetadata, err)
	}
	if meta.Path == "" {
		return uploadMeta{}, fmt.Errorf("%w: metadata has no path", errBadMetadata)
	}
	if _, _, err := fileModeOf(meta.Mode); err != nil {
		return uploadMeta{}, fmt.Errorf("%w: %v", errBadMetadata, err)
	}
	return meta, nil
}

// uploadReadError marks an error reading the request (as opposed to
// writing the file).
type uploadReadError struct{ err error }

func (e uploadReadError) Error() string { return e.err.Error() }
func (e uploadReadError) Unwrap() error { return e.err }

// storeUpload writes one uploaded file: parents are created (0755), the data
// streams to a temporary file in the target directory which gets the mode
// (default 0644) and owner, then replaces the target by rename. On any
// failure the temporary file is removed.
//
// # Errors
// errInvalidPath for a bad path; errFileKind when the target is "/" or a
// directory; errBadRequest (wrapping the read error) when the body breaks
// off; fsErr-rewritten filesystem errors.
func storeUpload(root *os.Root, ids *idNames, meta uploadMeta, body io.Reader) error {
	name, err := guestName(meta.Path)
	if err != nil {
		return err
	}
	if name == "." {
		return fmt.Errorf("%w: cannot upload onto /", errFileKind)
	}
	mode, set, err := fileModeOf(meta.Mode)
	if err != nil {
		return err
	}
	if !set {
		mode = 0o644
	}
	if fi, err := root.Lstat(name); err == nil && fi.IsDir() {
		return fmt.Errorf("%w: %s is a directory", errFileKind, meta.Path)
	}
	dir := parentName(name)
	if dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fsErr(guestPath(dir), err)
		}
	}
	tmp, tmpName, err := createTemp(root, dir, "upload")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			_ = root.Remove(tmpName)
		}
	}()
	buf := make([]byte, 256<<10)
	if _, err := io.CopyBuffer(tmp, readOnly{uploadReader{body}}, buf); err != nil {
		if re, ok := errors.AsType[uploadReadError](err); ok {
			return fmt.Errorf("%w: reading %s: %w", errBadRequest, meta.Path, re.err)
		}
		return fsErr(meta.Path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fsErr(meta.Path, err)
	}
	fi, err := tmp.Stat()
	if err != nil {
		return fsErr(meta.Path, err)
	}
	if err := chownIfNeeded(ids, meta.Path, fi, meta.Owner, meta.Group, tmp.Chown); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return fsErr(meta.Path, err)
	}
	if err := root.Rename(tmpName, name); err != nil {
		return fsErr(meta.Path, err)
	}
	done = true
	return nil
}

// uploadReader tags read errors so storeUpload can tell them from write
// errors.
type uploadReader struct{ r io.Reader }

func (u uploadReader) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = uploadReadError{err}
	}
	return n, err
}

// readOnly hides any WriteTo method so io.CopyBuffer uses the buffer given.
type readOnly struct{ io.Reader }

// download serves GET /files/download?path=: the file's bytes as
// application/octet-stream with Range support (206; 416 with a JSON error
// for a malformed or unsatisfiable range), conditional requests and HEAD,
// as http.ServeContent does. With offset (1-based first line) and/or limit
// (number of lines) it returns those lines as text/plain instead.
func (a *filesAPI) download(w http.ResponseWriter, r *http.Request, root *os.Root) {
	p := queryPath(w, r)
	if p == "" {
		return
	}
	q := r.URL.Query()
	offset, limit, lines, err := lineWindow(q.Get("offset"), q.Get("limit"))
	if err == nil && lines && r.Header.Get("Range") != "" {
		err = fmt.Errorf("%w: offset/limit cannot be combined with a Range header", errBadRequest)
	}
	if err != nil {
		writeFilesErr(w, err)
		return
	}
	name, err := guestName(p)
	if err != nil {
		writeFilesErr(w, err)
		return
	}
	fi, err := root.Stat(name)
	if err != nil {
		writeFilesErr(w, fsErr(p, err))
		return
	}
	if !fi.Mode().IsRegular() {
		writeFilesErr(w, fmt.Errorf("%w: %s is not a regular file", errFileKind, p))
		return
	}
	f, err := root.Open(name)
	if err != nil {
		writeFilesErr(w, fsErr(p, err))
		return
	}
	defer f.Close()
	if lines {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_ = copyLines(w, f, offset, limit)
		}
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	if cd := mime.FormatMediaType("attachment", map[string]string{"filename": baseName(name)}); cd != "" {
		h.Set("Content-Disposition", cd)
	}
	http.ServeContent(&rangeErrorWriter{ResponseWriter: w}, r, "", fi.ModTime(), f)
}

// lineWindow parses the offset and limit query parameters of a line-based
// download. lines is false when neither is given; limit 0 means "to the end".
//
// # Errors
// errBadRequest when either is not a positive integer.
func lineWindow(rawOffset, rawLimit string) (offset, limit int64, lines bool, err error) {
	offset = 1
	parse := func(name, raw string) (int64, error) {
		v, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || v < 1 {
			return 0, fmt.Errorf("%w: %s %q is not a positive integer", errBadRequest, name, raw)
		}
		return v, nil
	}
	if rawOffset != "" {
		if offset, err = parse("offset", rawOffset); err != nil {
			return 0, 0, false, err
		}
		lines = true
	}
	if rawLimit != "" {
		if limit, err = parse("limit", rawLimit); err != nil {
			return 0, 0, false, err
		}
		lines = true
	}
	return offset, limit, lines, nil
}

// copyLines writes lines offset.. (1-based) of src to dst, at most limit of
// them (0 = all), without holding a whole line in memory.
//
// # Errors
// The first read or write error.
func copyLines(dst io.Writer, src io.Reader, offset, limit int64) error {
	br := bufio.NewReaderSize(src, 64<<10)
	line := int64(1)
	atStart := true // the next chunk begins a line
	wrote := false  // a line of the window has been written
	for limit == 0 || line < offset+limit {
		chunk, err := br.ReadSlice('\n')
		full := err == nil // the chunk ends its line
		if full {
			chunk = bytes.TrimSuffix(chunk[:len(chunk)-1], []byte("\r"))
		}
		// Each line goes out without its \n or \r\n, lines joined by \n (as
		// OpenSandbox answers line reads): no trailing newline.
		if line >= offset && (len(chunk) > 0 || full) {
			if atStart && wrote {
				if _, werr := dst.Write([]byte{'\n'}); werr != nil {
					return werr
				}
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return werr
			}
			wrote = true
		}
		switch {
		case err == nil:
			line++
			atStart = true
		case errors.Is(err, bufio.ErrBufferFull):
			atStart = false // the same line continues
		case errors.Is(err, io.EOF):
			return nil
		default:
			return err
		}
	}
	return nil
}

// rangeErrorWriter turns http.ServeContent's plain-text 416 answer into the
// API's JSON error body.
type rangeErrorWriter struct {
	http.ResponseWriter
	swallow bool
}

// WriteHeader implements http.ResponseWriter.
func (w *rangeErrorWriter) WriteHeader(code int) {
	if code != http.StatusRequestedRangeNotSatisfiable {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.Header().Del("Content-Disposition")
	writeError(w.ResponseWriter, CodeInvalidRange, "requested range is malformed or not satisfiable")
	w.swallow = true
}

// Write implements http.ResponseWriter.
func (w *rangeErrorWriter) Write(p []byte) (int, error) {
	if w.swallow {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *rangeErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
