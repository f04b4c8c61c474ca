package k8s

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"time"

	"github.com/hybox-dev/hybox/internal/ociarchive"
)

// execdImageRepo is the repository of the hybox-execd image.
const execdImageRepo = "localhost/hybox/execd"

// execdImageCreated is the image's fixed creation time (2024-01-01), so
// that the same binary always makes the same archive.
var execdImageCreated = time.Unix(1704067200, 0).UTC()

// ExecdImageArchive writes the hybox-execd image as an OCI image archive
// to out: one layer holding the two static binaries, hybox-execd at
// /hybox-execd and hybox-egress at /hybox-egress (mode 0755), nothing
// else. It is named localhost/hybox/execd:<first 12 hex digits of the
// sha256 of both binaries>, so that another build is another image; the
// name is returned. Import the archive into every node's containerd
// (namespace k8s.io) and pass the name as Options.ExecdImage.
//
// # Errors
// When a binary cannot be read or the archive cannot be written.
func ExecdImageArchive(ctx context.Context, out io.Writer, execdBinary, egressBinary string) (string, error) {
	return packImage(ctx, out, execdImageRepo, []imageFile{
		{Name: ExecdInImage[1:], Path: execdBinary, Mode: 0o755},
		{Name: EgressInImage[1:], Path: egressBinary, Mode: 0o755},
	}, []string{ExecdInImage}, "runtimes/k8s.ExecdImageArchive: the static hybox-execd and hybox-egress")
}

// Where the hybox server's image holds its parts.
const (
	serverImageRepo = "localhost/hybox/hybox"
	// ServerInImage is the hybox binary in the server's image.
	ServerInImage = "/usr/local/bin/hybox"
	// GuestDirInImage holds the wasm guests in the server's image (its
	// configuration's wasm.guest_dir).
	GuestDirInImage = "/opt/hybox/guests"
)

// ServerImageArchive writes the hybox server's image, which
// deploy/kubernetes/hybox.yaml runs, as an OCI image archive to out: the
// static hybox binary (built with CGO_ENABLED=0) at ServerInImage and the
// regular files of guestDir (make guests: python-hybox.wasm and its
// stdlib, quickjs.wasm) under GuestDirInImage, plus /tmp. It is named
// localhost/hybox/hybox:<12 hex digits of the files' sha256>; the name is
// returned.
//
// # Errors
// When a file cannot be read or the archive cannot be written.
func ServerImageArchive(ctx context.Context, out io.Writer, hyboxBinary, guestDir string) (string, error) {
	files := []imageFile{{Name: ServerInImage[1:], Path: hyboxBinary, Mode: 0o755}, {Name: "tmp", Mode: 0o1777, Dir: true}}
	entries, err := os.ReadDir(guestDir)
	if err != nil {
		return "", fmt.Errorf("guests: %w", err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			files = append(files, imageFile{Name: GuestDirInImage[1:] + "/" + e.Name(), Path: filepath.Join(guestDir, e.Name()), Mode: 0o644})
		}
	}
	return packImage(ctx, out, serverImageRepo, files, []string{ServerInImage, "serve"}, "runtimes/k8s.ServerImageArchive: hybox and its wasm guests")
}

// imageFile is one entry of an image built by packImage: a file read from
// Path, or a directory.
type imageFile struct {
	Name string // inside the image, without the leading /
	Path string
	Mode int64
	Dir  bool
}

// packImage packs files (and their parent directories) as the one layer
// of an image named repo:<12 hex digits of the sha256 of its entries>.
func packImage(ctx context.Context, out io.Writer, repo string, files []imageFile, cmd []string, createdBy string) (string, error) {
	var rootfs bytes.Buffer
	tw := tar.NewWriter(&rootfs)
	sum := sha256.New()
	dirs := map[string]bool{}
	for _, f := range files {
		for d := path.Dir(f.Name); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: execdImageCreated}); err != nil {
			return "", err
		}
	}
	for _, f := range files {
		fmt.Fprintf(sum, "%s %o %t\n", f.Name, f.Mode, f.Dir)
		if f.Dir {
			if err := tw.WriteHeader(&tar.Header{Name: f.Name + "/", Mode: f.Mode, Typeflag: tar.TypeDir, ModTime: execdImageCreated}); err != nil {
				return "", err
			}
			continue
		}
		b, err := os.ReadFile(f.Path)
		if err != nil {
			return "", fmt.Errorf("image file %s: %w", f.Name, err)
		}
		sum.Write(b)
		if err := tw.WriteHeader(&tar.Header{Name: f.Name, Mode: f.Mode, Size: int64(len(b)),
			Typeflag: tar.TypeReg, ModTime: execdImageCreated}); err != nil {
			return "", err
		}
		if _, err := tw.Write(b); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	name := repo + ":" + hex.EncodeToString(sum.Sum(nil))[:12]
	_, err := ociarchive.Pack(ctx, out, &rootfs, ociarchive.Options{
		Name: name, Created: execdImageCreated, Cmd: cmd, CreatedBy: createdBy,
	})
	if err != nil {
		return "", err
	}
	return name, nil
}
