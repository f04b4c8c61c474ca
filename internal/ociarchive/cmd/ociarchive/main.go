// Command ociarchive packs a rootfs tarball into a single-layer OCI image
// archive that containerd imports under the given name (see package
// ociarchive). scripts/containers/build-image.sh runs it after mmdebstrap.
//
//	ociarchive -rootfs rootfs.tar -o image.tar -name localhost/hybox/python:3-bookworm \
//	    -created 1704067200 -cmd '["/bin/bash"]'
//
// It prints the digests and sizes as JSON on stdout. The archive is written
// to a temporary file beside -o and renamed, so -o is never half-written.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hybox-dev/hybox/internal/ociarchive"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociarchive:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ociarchive", flag.ContinueOnError)
	rootfs := fs.String("rootfs", "", "rootfs tarball to pack (required)")
	out := fs.String("o", "", "OCI archive to write (required)")
	name := fs.String("name", "", "full image name with tag (required)")
	created := fs.Int64("created", 0, "creation time, unix seconds (required; e.g. $SOURCE_DATE_EPOCH)")
	arch := fs.String("arch", "amd64", "image architecture (GOARCH spelling)")
	cmdJSON := fs.String("cmd", `["/bin/bash"]`, "image Cmd as a JSON array")
	createdBy := fs.String("created-by", "", "history entry: how the rootfs was made")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rootfs == "" || *out == "" || *name == "" || *created == 0 {
		fs.Usage()
		return fmt.Errorf("-rootfs, -o, -name and -created are required")
	}
	var cmd []string
	if err := json.Unmarshal([]byte(*cmdJSON), &cmd); err != nil {
		return fmt.Errorf("-cmd: %w", err)
	}
	in, err := os.Open(*rootfs)
	if err != nil {
		return err
	}
	defer in.Close()
	dir := filepath.Dir(*out)
	tmp, err := os.CreateTemp(dir, ".ociarchive-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	res, err := ociarchive.Pack(ctx, tmp, in, ociarchive.Options{
		Name:         *name,
		Created:      time.Unix(*created, 0),
		Architecture: *arch,
		Cmd:          cmd,
		CreatedBy:    *createdBy,
		TempDir:      dir,
	})
	if err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), *out); err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}
