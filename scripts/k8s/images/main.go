// Command images builds the two images a cluster needs to run hybox from
// deploy/kubernetes: the server's (a static hybox and the wasm guests) and
// hybox-execd's (with hybox-egress), as OCI image archives in -out, and prints their names
// (make k8s-images). Import them into each node's containerd
// (ctr -n k8s.io images import FILE) or push them to a registry.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
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
	bins := map[string]string{}
	for _, b := range []struct{ pkg, name string }{{"./cmd/hybox", "hybox"}, {"./cmd/hybox-execd", "hybox-execd"}, {"./cmd/hybox-egress", "hybox-egress"}} {
		bins[b.name] = filepath.Join(out, b.name)
		fmt.Fprintf(os.Stderr, "k8s-images: building a static %s\n", b.pkg)
		build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bins[b.name], b.pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build %s: %w", b.pkg, err)
		}
	}
	ctx := context.Background()
	for _, img := range []struct {
		archive string
		pack    func(w io.Writer) (string, error)
	}{
		{"hybox-server.oci.tar", func(w io.Writer) (string, error) {
			return k8s.ServerImageArchive(ctx, w, bins["hybox"], guests)
		}},
		{"hybox-execd.oci.tar", func(w io.Writer) (string, error) {
			return k8s.ExecdImageArchive(ctx, w, bins["hybox-execd"], bins["hybox-egress"])
		}},
	} {
		path := filepath.Join(out, img.archive)
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		name, err := img.pack(f)
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
