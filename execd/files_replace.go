package execd

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// replaceItem is one entry of POST /files/replace.
type replaceItem = api.ReplaceItem

// replaceResult is one entry of the verbose POST /files/replace answer.
type replaceResult = api.ReplaceResult

// replaceChunk is how much of a file replaceStream reads at a time.
const replaceChunk = 256 << 10

// replace serves POST /files/replace?verbose= {path: {old, new}}: replaces
// every occurrence of old with new in each file, streaming (files are never
// held in memory). The file keeps its inode, mode and owner. With
// verbose=true the answer is {path: {replacedCount}}; otherwise it is {}.
func (a *filesAPI) replace(w http.ResponseWriter, r *http.Request, root *os.Root) {
	verbose := false
	if v := r.URL.Query().Get("verbose"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, CodeInvalidRequestBody, fmt.Sprintf("query parameter verbose must be true or false, not %q", v))
			return
		}
		verbose = b
	}
	var raw map[string]struct{ Old, New *string }
	if !decodeBody(w, r, &raw) {
		return
	}
	req := make(map[string]replaceItem, len(raw))
	for p, it := range raw {
		if it.Old == nil || it.New == nil {
			writeError(w, CodeInvalidRequestBody, fmt.Sprintf("%s: old and new are both required", p))
			return
		}
		req[p] = replaceItem{Old: *it.Old, New: *it.New}
	}
	results := make(map[string]replaceResult, len(req))
	for _, p := range sortedKeys(req) {
		n, err := replaceInFile(root, p, req[p])
		if err != nil {
			writeFilesErr(w, err)
			return
		}
		results[p] = replaceResult{ReplacedCount: n}
	}
	if verbose {
		writeJSON(w, http.StatusOK, results)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// replaceInFile rewrites one file. The new content is first written to a
// temporary file beside it; only when something changed is it copied back
// over the original (opened with O_TRUNC, so inode, mode, owner and links
// are kept).
func replaceInFile(root *os.Root, p string, it replaceItem) (int, error) {
	if it.Old == "" {
		return 0, fmt.Errorf("%w: %s: old must not be empty", errBadRequest, p)
	}
	name, err := guestName(p)
	if err != nil {
		return 0, err
	}
	fi, err := root.Stat(name)
	if err != nil {
		return 0, fsErr(p, err)
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%w: %s is not a regular file", errFileKind, p)
	}
	src, err := root.Open(name)
	if err != nil {
		return 0, fsErr(p, err)
	}
	defer src.Close()

	tmp, tmpName, err := createTemp(root, parentName(name), "replace")
	if err != nil {
		return 0, err
	}
	defer func() {
		tmp.Close()
		_ = root.Remove(tmpName)
	}()
	bw := bufio.NewWriterSize(tmp, 64<<10)
	n, err := replaceStream(bw, src, []byte(it.Old), []byte(it.New), replaceChunk)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return 0, fsErr(p, err)
	}
	if n == 0 {
		return 0, nil
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return 0, fsErr(p, err)
	}
	dst, err := root.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return 0, fsErr(p, err)
	}
	_, err = io.Copy(dst, tmp)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fsErr(p, err)
	}
	return n, nil
}

// createTemp creates a new empty file (mode 0600) in directory dir of root,
// named ".hybox-<purpose>-<random>".
//
// # Errors
// fsErr-rewritten errors of the os.Root.
func createTemp(root *os.Root, dir, purpose string) (*os.File, string, error) {
	var b [8]byte
	for range 5 {
		_, _ = rand.Read(b[:])
		name := joinName(dir, ".hybox-"+purpose+"-"+hex.EncodeToString(b[:]))
		f, err := root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", fsErr(guestPath(dir), err)
		}
		return f, name, nil
	}
	return nil, "", fmt.Errorf("%s: cannot create a temporary file: %w", guestPath(dir), os.ErrExist)
}

// replaceStream copies src to dst, replacing every non-overlapping
// occurrence of old (leftmost first, exactly as bytes.ReplaceAll does) with
// new, and returns the number of replacements. It holds at most
// chunk+len(old) bytes of src at a time. old must not be empty.
//
// # Errors
// The first read or write error.
func replaceStream(dst io.Writer, src io.Reader, old, new []byte, chunk int) (int, error) {
	keep := len(old) - 1 // a match cut by the end of buf starts in its last keep bytes
	buf := make([]byte, 0, chunk+keep)
	count := 0
	for {
		n, rerr := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		eof := errors.Is(rerr, io.EOF)
		if rerr != nil && !eof {
			return count, rerr
		}
		start := 0
		for {
			i := bytes.Index(buf[start:], old)
			if i < 0 {
				break
			}
			if _, err := dst.Write(buf[start : start+i]); err != nil {
				return count, err
			}
			if _, err := dst.Write(new); err != nil {
				return count, err
			}
			count++
			start += i + len(old)
		}
		// Bytes before cut cannot begin a match: any match starting there
		// would lie wholly inside buf and have been found.
		cut := len(buf)
		if !eof {
			cut = max(start, len(buf)-keep)
		}
		if _, err := dst.Write(buf[start:cut]); err != nil {
			return count, err
		}
		buf = buf[:copy(buf, buf[cut:])]
		if eof {
			return count, nil
		}
	}
}
