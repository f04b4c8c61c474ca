package execd

import (
	"bytes"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzPathsGuestName checks that every accepted guest path becomes a clean
// os.Root name that cannot climb out of the root, and that conversion is
// stable.
func FuzzPathsGuestName(f *testing.F) {
	for _, s := range []string{"/", "", ".", "..", "/tmp/a.txt", "a/../..", "//x//", "/a/./b/../c", "\x00", "/..a/b..", `\..\`, "\xf4", "/a/\xff/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		name, err := guestName(p)
		if err != nil {
			return
		}
		if name != "." {
			// Any bytes but "/" and NUL may form a name (not only UTF-8).
			for seg := range strings.SplitSeq(name, "/") {
				if seg == ".." || seg == "." || seg == "" {
					t.Fatalf("guestName(%q) = %q has segment %q", p, name, seg)
				}
			}
		}
		again, err := guestName(guestPath(name))
		if err != nil || again != name {
			t.Fatalf("round trip of %q: %q, %v (want %q)", p, again, err, name)
		}
		if strings.Contains(name, "\x00") || len(name) > maxGuestPath {
			t.Fatalf("guestName(%q) = %q", p, name)
		}
	})
}

// FuzzFilesUploadMultipart feeds arbitrary multipart bodies to the upload
// route on a real root and checks that the server neither fails internally
// nor leaves temporary files or writes outside the root.
func FuzzFilesUploadMultipart(f *testing.F) {
	const boundary = "fuzzboundary"
	seed := func(parts ...uploadPart) []byte {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		_ = mw.SetBoundary(boundary)
		for _, p := range parts {
			w, _ := mw.CreateFormFile(p.name, p.name)
			_, _ = io.WriteString(w, p.content)
		}
		_ = mw.Close()
		return buf.Bytes()
	}
	f.Add(seed(metaPart("/a/b.txt", 644), uploadPart{"file", "hello"}))
	f.Add(seed(metaPart("/x", 755), uploadPart{"file", "1"}, metaPart("y/z", 0), uploadPart{"file", "2"}))
	f.Add(seed(uploadPart{"metadata", `{"path":"/../../etc/x"}`}, uploadPart{"file", "x"}))
	f.Add(seed(uploadPart{"metadata", `{"path":"/d","mode":"7777","owner":"0"}`}, uploadPart{"file", strings.Repeat("z", 3000)}))
	f.Add(seed(uploadPart{"file", "x"}))
	f.Add([]byte("--" + boundary + "\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"path\":\"/q\"}\r\n--" + boundary))

	base := f.TempDir()
	f.Fuzz(func(t *testing.T, body []byte) {
		dir, err := os.MkdirTemp(base, "case")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		rootDir := filepath.Join(dir, "root")
		if err := os.Mkdir(rootDir, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(rootDir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		mux := http.NewServeMux()
		RegisterFiles(mux, func() *os.Root { return root }, FilesOptions{MaxUploadBytes: 4096})
		req := httptest.NewRequest("POST", "/files/upload", bytes.NewReader(body))
		req.Header.Set("Content-Type", "multipart/form-data; boundary="+boundary)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)

		switch rec.Code {
		case 200, 400, 404, 409, 413:
		case 403:
			if os.Getuid() != 0 {
				break // an unprivileged chown may be refused
			}
			t.Fatalf("status 403: %s", rec.Body)
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		ents, err := os.ReadDir(dir)
		if err != nil || len(ents) != 1 {
			t.Fatalf("something was written beside the root: %v %v", ents, err)
		}
		_ = filepath.WalkDir(rootDir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasPrefix(d.Name(), ".hybox-") {
				t.Fatalf("temporary file left: %s", p)
			}
			return nil
		})
	})
}

// FuzzFilesReplaceStream compares the streaming replacement with
// bytes.ReplaceAll for any input, pattern and chunk size.
func FuzzFilesReplaceStream(f *testing.F) {
	f.Add([]byte("abcabcabc"), []byte("cab"), []byte("X"), uint8(2))
	f.Add([]byte("aaaaa"), []byte("aa"), []byte(""), uint8(1))
	f.Fuzz(func(t *testing.T, in, old, new []byte, chunk uint8) {
		if len(old) == 0 {
			return
		}
		var out bytes.Buffer
		n, err := replaceStream(&out, bytes.NewReader(in), old, new, int(chunk)+1)
		if err != nil {
			t.Fatal(err)
		}
		if want := bytes.ReplaceAll(in, old, new); !bytes.Equal(out.Bytes(), want) {
			t.Fatalf("got %q, want %q", out.Bytes(), want)
		}
		if want := bytes.Count(in, old); n != want {
			t.Fatalf("count %d, want %d", n, want)
		}
	})
}
