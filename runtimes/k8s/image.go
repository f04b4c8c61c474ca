package k8s

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
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
	h := sha256.New()
	var rootfs bytes.Buffer
	tw := tar.NewWriter(&rootfs)
	for _, f := range []struct{ name, path string }{{ExecdInImage, execdBinary}, {EgressInImage, egressBinary}} {
		bin, err := os.ReadFile(f.path)
		if err != nil {
			return "", fmt.Errorf("%s binary: %w", f.name[1:], err)
		}
		h.Write(bin)
		if err := tw.WriteHeader(&tar.Header{Name: f.name[1:], Mode: 0o755, Size: int64(len(bin)),
			Typeflag: tar.TypeReg, ModTime: execdImageCreated}); err != nil {
			return "", err
		}
		if _, err := tw.Write(bin); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	name := execdImageRepo + ":" + hex.EncodeToString(h.Sum(nil))[:12]
	_, err := ociarchive.Pack(ctx, out, &rootfs, ociarchive.Options{
		Name: name, Created: execdImageCreated, Cmd: []string{ExecdInImage},
		CreatedBy: "runtimes/k8s.ExecdImageArchive: the static hybox-execd and hybox-egress",
	})
	if err != nil {
		return "", err
	}
	return name, nil
}
