package hybox_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func TestFiles(t *testing.T) {
	c := newClient(t, server(t))
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	ctx := ctxFor(t, 2*time.Minute)

	if err := sb.MakeDir(ctx, "/tmp/d/sub", 0o750); err != nil {
		t.Fatalf("mkdir: %v", err)
	}
	if err := sb.WriteFile(ctx, "/tmp/d/a.txt", []byte("hello world\nhello again\n"), 0o640); err != nil {
		t.Fatalf("write: %v", err)
	}
	got, err := sb.ReadFile(ctx, "/tmp/d/a.txt")
	if err != nil || string(got) != "hello world\nhello again\n" {
		t.Fatalf("read: %v %q", err, got)
	}
	info, err := sb.FileInfo(ctx, "/tmp/d/a.txt", "/tmp/d/sub")
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	if fi := info["/tmp/d/a.txt"]; fi.Type != api.FileInfoTypeFile || fi.Size != 24 || fi.Mode != 640 {
		t.Errorf("info of a.txt: %+v", fi)
	}
	if fi := info["/tmp/d/sub"]; fi.Type != api.FileInfoTypeDirectory || fi.Mode != 750 {
		t.Errorf("info of sub: %+v", fi)
	}

	// A large upload and download, streamed from a reader to a writer.
	const size = 8 << 20
	src := rand.New(rand.NewPCG(1, 2))
	want := sha256.New()
	content := io.TeeReader(io.LimitReader(readerFunc(func(p []byte) (int, error) {
		for i := range p {
			p[i] = byte(src.Uint32())
		}
		return len(p), nil
	}), size), want)
	if err := sb.Upload(ctx, hybox.Upload{Path: "/tmp/d/big.bin", Content: content},
		hybox.Upload{Path: "/tmp/d/sub/b.txt", Mode: 0o600, Content: strings.NewReader("b")}); err != nil {
		t.Fatalf("upload: %v", err)
	}
	gotSum := sha256.New()
	n, err := sb.Download(ctx, "/tmp/d/big.bin", gotSum)
	if err != nil || n != size || !bytes.Equal(gotSum.Sum(nil), want.Sum(nil)) {
		t.Fatalf("download: %v, %d bytes, same content: %v", err, n, bytes.Equal(gotSum.Sum(nil), want.Sum(nil)))
	}

	list, err := sb.ListDir(ctx, "/tmp/d", 2)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if names := paths(list); !contains(names, "/tmp/d/a.txt") || !contains(names, "/tmp/d/sub/b.txt") {
		t.Errorf("list: %v", names)
	}
	found, err := sb.SearchFiles(ctx, "/tmp/d", "*.txt")
	if err != nil {
		t.Fatalf("search: %v", err)
	}
	if names := paths(found); len(names) != 2 || !contains(names, "/tmp/d/a.txt") || !contains(names, "/tmp/d/sub/b.txt") {
		t.Errorf("search: %v", names)
	}

	counts, err := sb.Replace(ctx, map[string]api.ReplaceItem{"/tmp/d/a.txt": {Old: "hello", New: "bye"}})
	if err != nil || counts["/tmp/d/a.txt"].ReplacedCount != 2 {
		t.Fatalf("replace: %v %+v", err, counts)
	}
	if got, _ := sb.ReadFile(ctx, "/tmp/d/a.txt"); string(got) != "bye world\nbye again\n" {
		t.Errorf("after replace: %q", got)
	}

	if err := sb.SetPermissions(ctx, map[string]api.Permission{"/tmp/d/a.txt": {Mode: hybox.Mode(0o604)}}); err != nil {
		t.Fatalf("chmod: %v", err)
	}
	if info, _ := sb.FileInfo(ctx, "/tmp/d/a.txt"); info["/tmp/d/a.txt"].Mode != 604 {
		t.Errorf("mode after chmod: %d", info["/tmp/d/a.txt"].Mode)
	}

	if err := sb.Rename(ctx, "/tmp/d/a.txt", "/tmp/d/c.txt"); err != nil {
		t.Fatalf("rename: %v", err)
	}
	if _, err := sb.FileInfo(ctx, "/tmp/d/a.txt"); !errors.Is(err, hybox.ErrNotFound) {
		t.Errorf("info of a renamed file: %v, want ErrNotFound", err)
	}
	if err := sb.Remove(ctx, "/tmp/d/c.txt"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := sb.ReadFile(ctx, "/tmp/d/c.txt"); !errors.Is(err, hybox.ErrNotFound) {
		t.Errorf("read a removed file: %v, want ErrNotFound", err)
	}
	if err := sb.RemoveDir(ctx, "/tmp/d"); err != nil {
		t.Fatalf("rmdir: %v", err)
	}
	if _, err := sb.ListDir(ctx, "/tmp/d", 1); !errors.Is(err, hybox.ErrNotFound) {
		t.Errorf("list a removed directory: %v, want ErrNotFound", err)
	}
}

func TestMode(t *testing.T) {
	tests := []struct {
		in   fs.FileMode
		want api.FileMode
	}{
		{0o644, 644}, {0o755, 755}, {0o755 | fs.ModeSetuid, 4755}, {0o1777&0o777 | fs.ModeSticky, 1777},
	}
	for _, tt := range tests {
		if got := hybox.Mode(tt.in); got != tt.want {
			t.Errorf("Mode(%v) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func paths(list []api.FileInfo) []string {
	var out []string
	for _, f := range list {
		out = append(out, f.Path)
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
