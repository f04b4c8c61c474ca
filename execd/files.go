package execd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// FilesOptions configures the files and directories routes.
type FilesOptions struct {
	// MaxUploadBytes caps the body of one POST /files/upload request (all
	// its files together). Zero or negative means 1 GiB.
	MaxUploadBytes int64
}

// defaultMaxUpload is the upload cap when FilesOptions.MaxUploadBytes is unset.
const defaultMaxUpload = 1 << 30

// maxJSONBody caps the JSON bodies of the files routes (permissions, mv,
// replace, directories).
const maxJSONBody = 8 << 20

var (
	// errFileKind marks an operation that does not fit the file it names:
	// deleting a directory with DELETE /files, listing a regular file,
	// downloading a directory, and the like. It maps to 400.
	errFileKind = errors.New("operation does not apply to this file")
	// errBadRequest marks a malformed request (body, query or pattern). It
	// maps to 400 INVALID_REQUEST_BODY.
	errBadRequest = errors.New("invalid request")
	// errBadMetadata marks a malformed upload metadata part. It maps to 400
	// INVALID_FILE_METADATA.
	errBadMetadata = errors.New("invalid upload metadata")
	// errTooLarge marks an upload larger than FilesOptions.MaxUploadBytes.
	// It maps to 413.
	errTooLarge = errors.New("upload too large")
)

// RegisterFiles adds the files and directories routes to mux. root returns the sandbox filesystem
// (guest "/" = the os.Root); it may be called per request.
//
// Routes: GET /files/info, DELETE /files, POST /files/permissions,
// POST /files/mv, GET /files/search, POST /files/replace,
// POST /files/upload, GET /files/download, GET /directories/list,
// POST /directories, DELETE /directories. Every path a client names goes
// through the os.Root, so neither ".." nor a symlink can reach a file
// outside it (such requests get 400 INVALID_PATH).
func RegisterFiles(mux *http.ServeMux, root func() *os.Root, opts FilesOptions) {
	api := &filesAPI{root: root, maxUpload: opts.MaxUploadBytes}
	if api.maxUpload <= 0 {
		api.maxUpload = defaultMaxUpload
	}
	routes := []struct {
		pattern string
		h       func(http.ResponseWriter, *http.Request, *os.Root)
	}{
		{"GET /files/info", api.info},
		{"DELETE /files", api.removeFiles},
		{"POST /files/permissions", api.permissions},
		{"POST /files/mv", api.move},
		{"GET /files/search", api.search},
		{"POST /files/replace", api.replace},
		{"POST /files/upload", api.upload},
		{"GET /files/download", api.download},
		{"GET /directories/list", api.list},
		{"POST /directories", api.makeDirs},
		{"DELETE /directories", api.removeDirs},
	}
	for _, rt := range routes {
		mux.HandleFunc(rt.pattern, api.withRoot(rt.h))
	}
}

// filesAPI serves the files and directories routes.
type filesAPI struct {
	root      func() *os.Root
	maxUpload int64
}

// withRoot resolves the sandbox root for one request.
func (a *filesAPI) withRoot(h func(http.ResponseWriter, *http.Request, *os.Root)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		root := a.root()
		if root == nil {
			writeError(w, CodeRuntimeError, "sandbox filesystem is not available")
			return
		}
		h(w, r, root)
	}
}

// writeFilesErr writes err, mapping the files API's own sentinels first and
// leaving the rest to writeErr.
func writeFilesErr(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errFileKind), errors.Is(err, errBadRequest):
		writeError(w, CodeInvalidRequestBody, err.Error())
	case errors.Is(err, errBadMetadata):
		writeError(w, CodeInvalidFileMetadata, err.Error())
	case errors.Is(err, errTooLarge):
		writeError(w, CodePayloadTooLarge, err.Error())
	default:
		writeErr(w, err)
	}
}

// queryPaths returns the repeated "path" query parameter, or writes 400
// MISSING_QUERY and returns nil.
func queryPaths(w http.ResponseWriter, r *http.Request) []string {
	paths := r.URL.Query()["path"]
	if len(paths) == 0 || (len(paths) == 1 && paths[0] == "") {
		writeError(w, CodeMissingQuery, "missing query parameter 'path'")
		return nil
	}
	return paths
}

// queryPath returns the single "path" query parameter, or writes 400
// MISSING_QUERY and returns "".
func queryPath(w http.ResponseWriter, r *http.Request) string {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, CodeMissingQuery, "missing query parameter 'path'")
	}
	return p
}

// decodeBody decodes one JSON value of at most maxJSONBody bytes into v, or
// writes 400 INVALID_REQUEST_BODY (413 when too large) and returns false.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	var raw json.RawMessage
	err := dec.Decode(&raw)
	if err == nil && dec.More() {
		err = errors.New("unexpected data after the JSON value")
	}
	if err == nil && string(raw) == "null" {
		writeError(w, CodeInvalidRequestBody, "the request body must be a JSON object or array, not null")
		return false
	}
	if err == nil {
		err = json.Unmarshal(raw, v)
	}
	if err == nil {
		return true
	}
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		writeError(w, CodePayloadTooLarge,
			fmt.Sprintf("request body larger than %d bytes", maxJSONBody))
		return false
	}
	writeError(w, CodeInvalidRequestBody, "invalid JSON body: "+err.Error())
	return false
}

// sortedKeys returns the keys of m in order, so that map-shaped requests
// are applied deterministically.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// fileInfo builds the wire FileInfo of fi found at guest path guest.
func fileInfo(guest string, fi fs.FileInfo, ids *idNames) FileInfo {
	typ := "other"
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		typ = "symlink"
	case m.IsDir():
		typ = "directory"
	case m.IsRegular():
		typ = "file"
	}
	uid, gid, ok := fileOwner(fi)
	owner, group := "", ""
	if ok {
		owner, group = ids.userName(uid), ids.groupName(gid)
	}
	mtime := fi.ModTime().UTC()
	return FileInfo{
		Path:       guest,
		Type:       api.FileInfoType(typ),
		Size:       fi.Size(),
		ModifiedAt: mtime.Truncate(time.Second),
		CreatedAt:  fileCreated(fi).UTC().Truncate(time.Second),
		Owner:      owner,
		Group:      group,
		Mode:       modeToWire(fi.Mode()),
	}
}

// info serves GET /files/info?path=..: a map from each requested path to
// its FileInfo (symlinks are described, not followed).
func (a *filesAPI) info(w http.ResponseWriter, r *http.Request, root *os.Root) {
	paths := queryPaths(w, r)
	if paths == nil {
		return
	}
	ids := newIDNames(root)
	out := make(map[string]FileInfo, len(paths))
	for _, p := range paths {
		name, err := guestName(p)
		if err != nil {
			writeFilesErr(w, err)
			return
		}
		fi, err := root.Lstat(name)
		if err != nil {
			writeFilesErr(w, fsErr(p, err))
			return
		}
		out[p] = fileInfo(guestPath(name), fi, ids)
	}
	writeJSON(w, http.StatusOK, out)
}

// removeFiles serves DELETE /files?path=..: removes files and symlinks
// (never directories). Missing files are not an error.
func (a *filesAPI) removeFiles(w http.ResponseWriter, r *http.Request, root *os.Root) {
	paths := queryPaths(w, r)
	if paths == nil {
		return
	}
	for _, p := range paths {
		if err := removeFile(root, p); err != nil {
			writeFilesErr(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func removeFile(root *os.Root, p string) error {
	name, err := guestName(p)
	if err != nil {
		return err
	}
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fsErr(p, err)
	}
	if fi.IsDir() {
		return fmt.Errorf("%w: %s is a directory (use DELETE /directories)", errFileKind, p)
	}
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fsErr(p, err)
	}
	return nil
}

// permission is one entry of POST /files/permissions and POST /directories.
type permission = api.Permission

// permissions serves POST /files/permissions {path: {owner, group, mode}}.
// A zero or absent mode leaves the mode alone; empty owner and group leave
// ownership alone.
func (a *filesAPI) permissions(w http.ResponseWriter, r *http.Request, root *os.Root) {
	applyEach(w, r, root, setPermission)
}

// applyEach decodes a {path: permission} body and applies fn to each path
// in sorted order, stopping at the first error.
func applyEach(w http.ResponseWriter, r *http.Request, root *os.Root, fn func(*os.Root, *idNames, string, permission) error) {
	var req map[string]permission
	if !decodeBody(w, r, &req) {
		return
	}
	ids := newIDNames(root)
	for _, p := range sortedKeys(req) {
		if err := fn(root, ids, p, req[p]); err != nil {
			writeFilesErr(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func setPermission(root *os.Root, ids *idNames, p string, perm permission) error {
	name, err := guestName(p)
	if err != nil {
		return err
	}
	mode, set, err := fileModeOf(perm.Mode)
	if err != nil {
		return err
	}
	fi, err := root.Stat(name)
	if err != nil {
		return fsErr(p, err)
	}
	if set {
		if err := root.Chmod(name, mode); err != nil {
			return fsErr(p, err)
		}
	}
	return chownIfNeeded(ids, p, fi, perm.Owner, perm.Group, func(uid, gid int) error {
		return root.Chown(name, uid, gid)
	})
}

// moveItem is one entry of POST /files/mv.
type moveItem = api.MoveItem

// move serves POST /files/mv [{src, dest}]: renames files or directories,
// creating the destination's parent directories. An existing destination
// is refused with 409 FILE_EXISTS.
func (a *filesAPI) move(w http.ResponseWriter, r *http.Request, root *os.Root) {
	var req []moveItem
	if !decodeBody(w, r, &req) {
		return
	}
	for _, it := range req {
		if err := moveOne(root, it); err != nil {
			writeFilesErr(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func moveOne(root *os.Root, it moveItem) error {
	src, err := guestName(it.Src)
	if err != nil {
		return err
	}
	dst, err := guestName(it.Dest)
	if err != nil {
		return err
	}
	if src == "." || dst == "." {
		return fmt.Errorf("%w: cannot move / or move onto /", errFileKind)
	}
	if _, err := root.Lstat(src); err != nil {
		return fsErr(it.Src, err)
	}
	if _, err := root.Lstat(dst); err == nil {
		return fmt.Errorf("%s: %w", it.Dest, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fsErr(it.Dest, err)
	}
	if dir := parentName(dst); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fsErr(guestPath(dir), err)
		}
	}
	if err := root.Rename(src, dst); err != nil {
		return fsErr(it.Src, err)
	}
	return nil
}

// readAllLimit reads at most limit bytes of r.
//
// # Errors
// errBadRequest when r holds more than limit bytes; r's own errors.
func readAllLimit(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", errBadRequest, limit)
	}
	return b, nil
}
