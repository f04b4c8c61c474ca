package execd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// list serves GET /directories/list?path=&depth=1: the entries below path,
// depth levels deep (1 = immediate children, 0 = none), each directory's
// entries in name order followed by their own descendants. Symlinks are
// reported, never followed; a path that is itself a symlink is refused.
func (a *filesAPI) list(w http.ResponseWriter, r *http.Request, root *os.Root) {
	p := queryPath(w, r)
	if p == "" {
		return
	}
	depth := 1
	if raw := r.URL.Query().Get("depth"); raw != "" {
		d, err := strconv.Atoi(raw)
		if err != nil || d < 0 {
			writeFilesErr(w, fmt.Errorf("%w: depth %q is not a non-negative integer", errBadRequest, raw))
			return
		}
		depth = d
	}
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
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		writeFilesErr(w, fmt.Errorf("%w: %s is a symbolic link; list its target instead", errFileKind, p))
		return
	case !fi.IsDir():
		writeFilesErr(w, fmt.Errorf("%w: %s is not a directory", errFileKind, p))
		return
	}
	out := []FileInfo{}
	ids := newIDNames(root)
	err = walkDir(r.Context(), root, name, depth, func(child string, d fs.DirEntry, fi fs.FileInfo) error {
		out = append(out, fileInfo(guestPath(child), fi, ids))
		return nil
	})
	if err != nil {
		writeFilesErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// walkDir calls fn for every entry below the directory name, maxDepth levels
// deep (maxDepth < 0 = unlimited), in name order, each directory before its
// contents. It never follows symlinks. Entries that vanish while walking are
// skipped.
//
// # Errors
// ctx's error when cancelled; fsErr-rewritten errors from the os.Root; fn's
// error.
func walkDir(ctx context.Context, root *os.Root, name string, maxDepth int,
	fn func(child string, d fs.DirEntry, fi fs.FileInfo) error,
) error {
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := root.Open(dir)
		if err != nil {
			if level > 0 && errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return fsErr(guestPath(dir), err)
		}
		entries, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			return fsErr(guestPath(dir), err)
		}
		slices.SortFunc(entries, func(x, y fs.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
		for _, e := range entries {
			child := joinName(dir, e.Name())
			fi, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return fsErr(guestPath(child), err)
			}
			if err := fn(child, e, fi); err != nil {
				return err
			}
			if fi.IsDir() && (maxDepth < 0 || level+1 < maxDepth) {
				if err := walk(child, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if maxDepth == 0 {
		return nil
	}
	return walk(name, 0)
}

// makeDirs serves POST /directories {path: {owner, group, mode}}: mkdir -p.
// Mode (default 755) and ownership apply to the directories this request
// creates; existing directories are left as they are.
func (a *filesAPI) makeDirs(w http.ResponseWriter, r *http.Request, root *os.Root) {
	applyEach(w, r, root, makeDir)
}

func makeDir(root *os.Root, ids *idNames, p string, perm permission) error {
	name, err := guestName(p)
	if err != nil {
		return err
	}
	mode, set, err := fileModeOf(perm.Mode)
	if err != nil {
		return err
	}
	if !set {
		mode = 0o755
	}
	if perm.Owner != "" || perm.Group != "" {
		if _, _, err := ids.resolve(perm.Owner, perm.Group); err != nil {
			return err
		}
	}
	// Find the directories this request creates: name and its missing parents.
	var created []string
	for cur := name; cur != "."; cur = parentName(cur) {
		fi, err := root.Stat(cur)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s: %w (not a directory)", guestPath(cur), fs.ErrExist)
			}
			break
		}
		// ENOTDIR: a parent is a file; the loop reaches it and reports it.
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return fsErr(guestPath(cur), err)
		}
		created = append(created, cur)
	}
	if len(created) == 0 {
		return nil
	}
	if err := root.MkdirAll(name, mode.Perm()); err != nil {
		return fsErr(p, err)
	}
	for _, dir := range created {
		// MkdirAll's mode is filtered by the umask; set it exactly.
		if err := root.Chmod(dir, mode); err != nil {
			return fsErr(guestPath(dir), err)
		}
		fi, err := root.Stat(dir)
		if err != nil {
			return fsErr(guestPath(dir), err)
		}
		if err := chownIfNeeded(ids, guestPath(dir), fi, perm.Owner, perm.Group, func(uid, gid int) error {
			return root.Chown(dir, uid, gid)
		}); err != nil {
			return err
		}
	}
	return nil
}

// removeDirs serves DELETE /directories?path=..: rm -rf of each path.
// Missing paths are not an error; "/" itself cannot be removed.
func (a *filesAPI) removeDirs(w http.ResponseWriter, r *http.Request, root *os.Root) {
	paths := queryPaths(w, r)
	if paths == nil {
		return
	}
	for _, p := range paths {
		name, err := guestName(p)
		if err != nil {
			writeFilesErr(w, err)
			return
		}
		if name == "." {
			writeFilesErr(w, fmt.Errorf("%w: refusing to remove /", errFileKind))
			return
		}
		if err := root.RemoveAll(name); err != nil {
			writeFilesErr(w, fsErr(p, err))
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// maxPattern bounds a search pattern's length.
const maxPattern = 1024

// globPattern matches paths below a search root. A pattern without "/"
// matches base names at any depth ("*.go"); a pattern with "/" matches the
// path relative to the search root segment by segment, where a "**"
// segment matches any number of segments ("src/**/*.go"). "**" alone
// matches everything.
type globPattern struct {
	segs     []string
	baseOnly bool
}

// compileGlob parses a search pattern ("" means "**").
//
// # Errors
// errBadRequest for a malformed pattern (unclosed "[", trailing "\").
func compileGlob(p string) (globPattern, error) {
	if len(p) > maxPattern {
		return globPattern{}, fmt.Errorf("%w: pattern longer than %d bytes", errBadRequest, maxPattern)
	}
	p = strings.Trim(p, "/")
	if p == "" {
		p = "**"
	}
	g := globPattern{baseOnly: !strings.Contains(p, "/")}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." {
			continue
		}
		if seg != "**" {
			if _, err := path.Match(seg, ""); err != nil {
				return globPattern{}, fmt.Errorf("%w: bad pattern %q", errBadRequest, p)
			}
		}
		g.segs = append(g.segs, seg)
	}
	if len(g.segs) == 0 {
		g.segs = []string{"**"}
	}
	return g, nil
}

// match reports whether rel (a "/"-separated path relative to the search
// root, non-empty) matches.
func (g globPattern) match(rel string) bool {
	if g.baseOnly {
		if g.segs[0] == "**" {
			return true
		}
		ok, _ := path.Match(g.segs[0], baseName(rel))
		return ok
	}
	return matchSegments(g.segs, strings.Split(rel, "/"))
}

// matchSegments matches path segments against pattern segments where "**"
// stands for any number of segments. It runs in O(len(pat)·len(name)).
func matchSegments(pat, name []string) bool {
	// ok[j] reports whether pat[i:] matches name[j:], for the current i.
	ok := make([]bool, len(name)+1)
	ok[len(name)] = true // empty pattern matches only the empty path
	for i := len(pat) - 1; i >= 0; i-- {
		next := ok
		ok = make([]bool, len(name)+1)
		if pat[i] == "**" {
			// "**" matches name[j:k] for any k ≥ j.
			seen := false
			for j := len(name); j >= 0; j-- {
				seen = seen || next[j]
				ok[j] = seen
			}
			continue
		}
		for j := len(name) - 1; j >= 0; j-- {
			if next[j+1] {
				m, _ := path.Match(pat[i], name[j])
				ok[j] = m
			}
		}
	}
	return ok[0]
}

// search serves GET /files/search?path=&pattern=: every non-directory entry
// at any depth below path whose name (or relative path, for patterns with
// "/") matches pattern, in walk order. Symlinks are matched but not
// followed.
func (a *filesAPI) search(w http.ResponseWriter, r *http.Request, root *os.Root) {
	p := queryPath(w, r)
	if p == "" {
		return
	}
	g, err := compileGlob(r.URL.Query().Get("pattern"))
	if err != nil {
		writeFilesErr(w, err)
		return
	}
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
	ids := newIDNames(root)
	out := []FileInfo{}
	if !fi.IsDir() {
		if g.match(baseName(name)) {
			out = append(out, fileInfo(guestPath(name), fi, ids))
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	prefix := len(name) + 1
	if name == "." {
		prefix = 0
	}
	err = walkDir(r.Context(), root, name, -1, func(child string, d fs.DirEntry, fi fs.FileInfo) error {
		if !fi.IsDir() && g.match(child[prefix:]) {
			out = append(out, fileInfo(guestPath(child), fi, ids))
		}
		return nil
	})
	if err != nil {
		writeFilesErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
