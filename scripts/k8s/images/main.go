// Command images builds the two images a cluster needs to run hybox from
// deploy/kubernetes: the server's (a static hybox and the wasm guests) and
// hybox-execd's, as OCI image archives in -out, and prints their names
// (make k8s-images). Import them into each node's containerd
// (ctr -n k8s.io images import FILE) or push them to a registry.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/hybox-dev/hybox/runtimes/k8s"
)

func main() {
	out := flag.String("out", "build/k8s", "directory for the archives")
	guests := flag.String("guests", "build/guests", "the wasm guests (make guests)")
	flag.Parse()
	if err := run(*out, *guests); err != nil {
		fmt.Fprintln(os.Stderr, "k8s-images:", err)
		os.Exit(1)
	}
}

func run(out, guests string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	ctx := context.Background()
	for _, img := range []struct {
		pkg, bin, archive string
		pack              func(f *os.File, bin string) (string, error)
	}{
		{"./cmd/hybox", "hybox", "hybox-server.oci.tar", func(f *os.File, bin string) (string, error) {
			return k8s.ServerImageArchive(ctx, f, bin, guests)
		}},
		{"./cmd/hybox-execd", "hybox-execd", "hybox-execd.oci.tar", func(f *os.File, bin string) (string, error) {
			return k8s.ExecdImageArchive(ctx, f, bin)
		}},
	} {
		bin := filepath.Join(out, img.bin)
		fmt.Fprintf(os.Stderr, "k8s-images: building a static %s\n", img.pkg)
		build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, img.pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build %s: %w", img.pkg, err)
		}
		path := filepath.Join(out, img.archive)
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		name, err := img.pack(f, bin)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", img.archive, err)
		}
		fmt.Printf("%s\t%s\n", name, path)
	}
	return nil
}
