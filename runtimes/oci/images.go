package oci

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/errdefs"

	"github.com/hybox-dev/hybox/runtimes"
)

var _ runtimes.ImageStore = (*Backend)(nil)

const snapshotter = "overlayfs"

func wireImage(ctx context.Context, img containerd.Image) runtimes.Image {
	size, _ := img.Size(ctx)
	return runtimes.Image{Name: img.Name(), Digest: img.Target().Digest.String(), Size: size, CreatedAt: img.Metadata().CreatedAt}
}

// Import reads an OCI or docker archive, stores its images and unpacks
// them for the overlayfs snapshotter.
func (b *Backend) Import(ctx context.Context, archive io.Reader) ([]runtimes.Image, error) {
	ctx = b.ctx(ctx)
	imgs, err := b.client.Import(ctx, archive, containerd.WithSkipDigestRef(func(name string) bool { return name != "" }))
	if err != nil {
		return nil, fmt.Errorf("%w: import: %v", runtimes.ErrInvalid, err)
	}
	var out []runtimes.Image
	for _, im := range imgs {
		img := containerd.NewImage(b.client, im)
		if err := img.Unpack(ctx, snapshotter); err != nil {
			return nil, fmt.Errorf("unpack %s: %w", im.Name, err)
		}
		out = append(out, wireImage(ctx, img))
	}
	return out, nil
}

// List lists the stored images.
func (b *Backend) List(ctx context.Context) ([]runtimes.Image, error) {
	ctx = b.ctx(ctx)
	imgs, err := b.client.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]runtimes.Image, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, wireImage(ctx, img))
	}
	return out, nil
}

// Remove deletes an image.
func (b *Backend) Remove(ctx context.Context, name string) error {
	ctx = b.ctx(ctx)
	if err := b.client.ImageService().Delete(ctx, name, images.SynchronousDelete()); err != nil {
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("%w: image %s", runtimes.ErrNotFound, name)
		}
		return err
	}
	return nil
}

// Pull fetches ref from its registry with optional credentials.
func (b *Backend) Pull(ctx context.Context, ref string, auth *runtimes.RegistryAuth) (runtimes.Image, error) {
	ctx = b.ctx(ctx)
	opts := docker.ResolverOptions{Client: &http.Client{Timeout: 10 * time.Minute}}
	if auth != nil {
		opts.Hosts = docker.ConfigureDefaultRegistries(docker.WithAuthorizer(docker.NewDockerAuthorizer(
			docker.WithAuthCreds(func(string) (string, string, error) { return auth.Username, auth.Password, nil }))))
	}
	img, err := b.client.Pull(ctx, ref, containerd.WithPullUnpack, containerd.WithPullSnapshotter(snapshotter),
		containerd.WithResolver(docker.NewResolver(opts)))
	if err != nil {
		return runtimes.Image{}, fmt.Errorf("%w: pull %s: %v", runtimes.ErrUnavailable, ref, err)
	}
	return wireImage(ctx, img), nil
}
