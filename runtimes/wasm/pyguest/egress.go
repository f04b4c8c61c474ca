package pyguest

// The Python channel to the sandbox's Egress.
//
// CPython's WASI build calls no host functions but WASI's, so Python code
// reaches the host through a file: every guest has a small virtual directory
// mounted at netDir holding one file, "http". The hybox_http module (in
// site/) opens it, writes one request frame, reads one response frame and
// closes it. The first read after the request performs it through
// engine.DoHTTP, blocking the guest as a read from a socket would.
//
// A file was chosen over the driver's framed stdin/stdout because it works
// the same in persistent contexts (driver.py owns stdio) and in one-shot
// `python3 script.py` commands (stdio belongs to the user's program, and no
// driver runs). Pooled guests are started before their sandbox is known, so
// a guest's Egress is bound when a sandbox claims it. A request runs under
// the guest's own context: a run that times out or is interrupted kills its
// guest, which cancels the request.
//
// Frames, both directions:
//
//	magic   4 bytes: "HBQ1" (request) or "HBR1" (response)
//	headLen uint32, big endian: length of head (at most maxFrameHead)
//	bodyLen uint64, big endian: length of body (at most engine.MaxHTTPBody)
//	head    JSON: engine.HTTPRequest, or engine.HTTPResponse / responseError
//	body    raw bytes
//
// A frame is exactly 16+headLen+bodyLen bytes; anything else is malformed.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sync/atomic"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// netDir is where the egress directory is mounted in every guest; netFile
// is the name of the exchange file in it (hybox_http.py uses both).
const (
	netDir  = "/.hybox/egress"
	netFile = "http"
)

// Frame layout.
const (
	requestMagic  = "HBQ1"
	responseMagic = "HBR1"
	frameHeader   = 16
	maxFrameHead  = 1 << 20
)

// maxRequestFrame caps what a guest may write to the exchange file.
const maxRequestFrame = frameHeader + maxFrameHead + engine.MaxHTTPBody

// errFrame marks a malformed frame.
var errFrame = errors.New("malformed frame")

// appendFrame appends a frame with magic, head and body to dst.
func appendFrame(dst []byte, magic string, head, body []byte) []byte {
	dst = append(dst, magic...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(head)))
	dst = binary.BigEndian.AppendUint64(dst, uint64(len(body)))
	dst = append(dst, head...)
	return append(dst, body...)
}

// parseFrame splits b, which must be exactly one frame with magic, into its
// head and body (both alias b).
//
// # Errors
// errFrame when b is not exactly one frame within the limits.
func parseFrame(b []byte, magic string) (head, body []byte, err error) {
	if len(b) < frameHeader {
		return nil, nil, fmt.Errorf("%w: %d bytes, shorter than its header", errFrame, len(b))
	}
	if string(b[:4]) != magic {
		return nil, nil, fmt.Errorf("%w: bad magic %q", errFrame, b[:4])
	}
	hl := uint64(binary.BigEndian.Uint32(b[4:8]))
	bl := binary.BigEndian.Uint64(b[8:16])
	if hl > maxFrameHead || bl > engine.MaxHTTPBody {
		return nil, nil, fmt.Errorf("%w: head of %d or body of %d bytes exceeds the limit", errFrame, hl, bl)
	}
	if uint64(len(b)-frameHeader) != hl+bl {
		return nil, nil, fmt.Errorf("%w: %d bytes, want %d", errFrame, len(b), frameHeader+hl+bl)
	}
	return b[frameHeader : frameHeader+hl], b[frameHeader+hl:], nil
}

// responseError is the head of a response frame for a failed request.
type responseError struct {
	Error   string `json:"error"`
	Timeout bool   `json:"timeout,omitempty"`
}

// egressSlot holds the Egress a guest's requests go through; empty until
// the guest is given to a sandbox.
type egressSlot struct{ p atomic.Pointer[egressRef] }

type egressRef struct{ eg engine.Egress }

func (s *egressSlot) set(eg engine.Egress) { s.p.Store(&egressRef{eg: eg}) }

func (s *egressSlot) get() engine.Egress {
	if r := s.p.Load(); r != nil {
		return r.eg
	}
	return nil
}

// serveHTTP performs one request frame and returns the response frame. It
// never fails: errors are reported to the guest in the frame.
func serveHTTP(ctx context.Context, eg engine.Egress, frame []byte) []byte {
	fail := func(e responseError) []byte {
		head, _ := json.Marshal(e)
		return appendFrame(nil, responseMagic, head, nil)
	}
	head, body, err := parseFrame(frame, requestMagic)
	if err != nil {
		return fail(responseError{Error: "hybox egress: " + err.Error()})
	}
	var req engine.HTTPRequest
	if err := json.Unmarshal(head, &req); err != nil {
		return fail(responseError{Error: "hybox egress: bad request head: " + err.Error()})
	}
	req.Body = body
	resp, err := engine.DoHTTP(ctx, eg, req)
	if err != nil {
		var he *engine.HTTPError
		if errors.As(err, &he) {
			return fail(responseError{Error: he.Msg, Timeout: he.Timeout})
		}
		return fail(responseError{Error: err.Error()})
	}
	rh, err := json.Marshal(resp)
	if err != nil {
		return fail(responseError{Error: "hybox egress: " + err.Error()})
	}
	return appendFrame(make([]byte, 0, frameHeader+len(rh)+len(resp.Body)), responseMagic, rh, resp.Body)
}

// netFS is the egress directory: "." and the exchange file. Each open of the
// file is one exchange.
type netFS struct {
	experimentalsys.UnimplementedFS
	ctx    context.Context // cancels requests in flight
	egress func() engine.Egress
}

var _ experimentalsys.FS = (*netFS)(nil)

func (n *netFS) OpenFile(path string, flag experimentalsys.Oflag, _ fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	switch relPath(path) {
	case ".":
		if flag&(experimentalsys.O_WRONLY|experimentalsys.O_RDWR) != 0 {
			return nil, experimentalsys.EISDIR
		}
		return &netDirFile{}, 0
	case netFile:
		if flag&experimentalsys.O_DIRECTORY != 0 {
			return nil, experimentalsys.ENOTDIR
		}
		if flag&experimentalsys.O_CREAT != 0 && flag&experimentalsys.O_EXCL != 0 {
			return nil, experimentalsys.EEXIST
		}
		return &exchangeFile{fs: n}, 0
	}
	if flag&experimentalsys.O_CREAT != 0 {
		return nil, experimentalsys.EACCES
	}
	return nil, experimentalsys.ENOENT
}

func (n *netFS) Stat(path string) (sys.Stat_t, experimentalsys.Errno) {
	switch relPath(path) {
	case ".":
		return sys.Stat_t{Mode: fs.ModeDir | 0o555, Nlink: 2, Ino: 1}, 0
	case netFile:
		return sys.Stat_t{Mode: 0o666, Nlink: 1, Ino: 2}, 0
	}
	return sys.Stat_t{}, experimentalsys.ENOENT
}

func (n *netFS) Lstat(path string) (sys.Stat_t, experimentalsys.Errno) { return n.Stat(path) }

// relPath turns a mount-relative path from wazero into a clean name.
func relPath(p string) string {
	for len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	if p == "" {
		return "."
	}
	return p
}

// netDirFile is the open egress directory. (It declares no Seek, which
// would trip vet's stdmethods check: rewinding is not supported.)
type netDirFile struct {
	experimentalsys.UnimplementedFile
	pos    int
	closed bool
}

func (d *netDirFile) IsDir() (bool, experimentalsys.Errno) { return true, 0 }

func (d *netDirFile) Dev() (uint64, experimentalsys.Errno)    { return 0, 0 }
func (d *netDirFile) Ino() (sys.Inode, experimentalsys.Errno) { return 1, 0 }
func (d *netDirFile) Stat() (sys.Stat_t, experimentalsys.Errno) {
	return sys.Stat_t{Mode: fs.ModeDir | 0o555, Nlink: 2, Ino: 1}, 0
}

func (d *netDirFile) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	if d.closed {
		return nil, experimentalsys.EBADF
	}
	if d.pos > 0 || n == 0 {
		return nil, 0
	}
	d.pos = 1
	return []experimentalsys.Dirent{{Ino: 2, Name: netFile}}, 0
}

func (d *netDirFile) Sync() experimentalsys.Errno                { return 0 }
func (d *netDirFile) Datasync() experimentalsys.Errno            { return 0 }
func (d *netDirFile) Utimens(int64, int64) experimentalsys.Errno { return experimentalsys.EPERM }
func (d *netDirFile) Close() experimentalsys.Errno               { d.closed = true; return 0 }

// exchangeFile is one open of the exchange file: writes collect a request
// frame, the first read performs it, reads then return the response frame
// and end of file.
type exchangeFile struct {
	experimentalsys.UnimplementedFile
	fs     *netFS
	req    []byte
	resp   []byte
	served bool
	closed bool
}

func (f *exchangeFile) IsDir() (bool, experimentalsys.Errno) { return false, 0 }

func (f *exchangeFile) Stat() (sys.Stat_t, experimentalsys.Errno) {
	return sys.Stat_t{Mode: 0o666, Nlink: 1, Ino: 2}, 0
}

func (f *exchangeFile) Write(p []byte) (int, experimentalsys.Errno) {
	switch {
	case f.closed:
		return 0, experimentalsys.EBADF
	case f.served:
		return 0, experimentalsys.EINVAL // one exchange per open
	case len(f.req)+len(p) > maxRequestFrame:
		return 0, experimentalsys.ERANGE // no EFBIG in wazero; the client sees "result too large"
	}
	f.req = append(f.req, p...)
	return len(p), 0
}

func (f *exchangeFile) Read(p []byte) (int, experimentalsys.Errno) {
	if f.closed {
		return 0, experimentalsys.EBADF
	}
	if !f.served {
		f.served = true
		f.resp = serveHTTP(f.fs.ctx, f.fs.egress(), f.req)
		f.req = nil
	}
	n := copy(p, f.resp)
	f.resp = f.resp[n:]
	return n, 0
}

func (f *exchangeFile) Close() experimentalsys.Errno {
	f.closed = true
	f.req, f.resp = nil, nil
	return 0
}
