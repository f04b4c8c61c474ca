package oci

import (
	"context"
	"errors"
	"fmt"
	distref "github.com/distribution/reference"
	"io"
	"net/http"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/pkg/reference"
	"github.com/containerd/errdefs"

	"github.com/hybox-dev/hybox/runtimes"
)

var _ runtimes.ImageStore = (*Containerd)(nil)

const snapshotter = "overlayfs"

func wireImage(ctx context.Context, img containerd.Image) runtimes.Image {
	size, _ := img.Size(ctx)
	return runtimes.Image{Name: img.Name(), Digest: img.Target().Digest.String(), Size: size, CreatedAt: img.Metadata().CreatedAt}
}

// Import reads an OCI or docker archive, stores its images and unpacks
// them for the overlayfs snapshotter.
func (b *Containerd) Import(ctx context.Context, archive io.Reader) ([]runtimes.Image, error) {
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
func (b *Containerd) List(ctx context.Context) ([]runtimes.Image, error) {
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
func (b *Containerd) Remove(ctx context.Context, name string) error {
	ctx = b.ctx(ctx)
	if err := b.client.ImageService().Delete(ctx, name, images.SynchronousDelete()); err != nil {
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("%w: image %s", runtimes.ErrNotFound, name)
		}
		return err
	}
	return nil
}

// Pull fetches ref from its registry with optional credentials and unpacks
// it. Registries on the loopback interface (localhost, 127.0.0.1, ::1) are
// reached over plain HTTP, every other one over HTTPS; credentials are only
// ever given to the registry host that ref names.
//
// # Errors
// runtimes.ErrUnavailable wrapping the registry's or containerd's error,
// with a hint when the registry refused the credentials (or their absence).
func (b *Containerd) Pull(ctx context.Context, ref string, auth *runtimes.RegistryAuth) (runtimes.Image, error) {
	ctx = b.ctx(ctx)
	ref = normalizeRef(ref)
	resolver, err := newResolver(ref, auth)
	if err != nil {
		return runtimes.Image{}, fmt.Errorf("%w: pull %s: %v", runtimes.ErrInvalid, ref, err)
	}
	img, err := b.client.Pull(ctx, ref, containerd.WithPullUnpack, containerd.WithPullSnapshotter(snapshotter),
		containerd.WithResolver(resolver))
	if err != nil {
		if isAuthError(err) {
			hint := "the registry requires credentials: set image.auth"
			if auth != nil {
				hint = "the registry refused the credentials of image.auth"
			}
			return runtimes.Image{}, fmt.Errorf("%w: pull %s: %s: %v", runtimes.ErrUnavailable, ref, hint, err)
		}
		return runtimes.Image{}, fmt.Errorf("%w: pull %s: %v", runtimes.ErrUnavailable, ref, err)
	}
	return wireImage(ctx, img), nil
}

// newResolver builds the registry resolver for ref: plain HTTP only for
// loopback registries, and auth's credentials answered only for the host
// ref's registry is reached at (docker.io is served by
// registry-1.docker.io), never for another host that challenges a request.
func newResolver(ref string, auth *runtimes.RegistryAuth) (remotes.Resolver, error) {
	spec, err := reference.Parse(ref)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 10 * time.Minute}
	base := []docker.RegistryOpt{docker.WithClient(client), docker.WithPlainHTTP(docker.MatchLocalhost)}
	var creds func(string) (string, string, error)
	if auth != nil {
		targets, err := docker.ConfigureDefaultRegistries(base...)(spec.Hostname())
		if err != nil {
			return nil, err
		}
		allowed := map[string]bool{spec.Hostname(): true}
		for _, h := range targets {
			allowed[h.Host] = true
		}
		creds = func(host string) (string, string, error) {
			if !allowed[host] {
				return "", "", nil
			}
			return auth.Username, auth.Password, nil
		}
	}
	authorizer := docker.NewDockerAuthorizer(docker.WithAuthClient(client), docker.WithAuthCreds(creds))
	hosts := docker.ConfigureDefaultRegistries(append(base, docker.WithAuthorizer(authorizer))...)
	return docker.NewResolver(docker.ResolverOptions{Hosts: hosts}), nil
}

// isAuthError reports whether a pull failed because the registry did not
// accept the request's authorization.
func isAuthError(err error) bool {
	if errors.Is(err, docker.ErrInvalidAuthorization) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "401 Unauthorized") || strings.Contains(msg, "403 Forbidden")
}

// Get implements runtimes.ImageStore.
func (b *Containerd) Get(ctx context.Context, ref string) (runtimes.Image, error) {
	ctx = b.ctx(ctx)
	img, err := b.client.GetImage(ctx, ref)
	if errdefs.IsNotFound(err) {
		if full := normalizeRef(ref); full != ref {
			img, err = b.client.GetImage(ctx, full)
		}
	}
	if errdefs.IsNotFound(err) {
		return runtimes.Image{}, fmt.Errorf("%w: image %s is not present (import it with `hybox image import FILE` or pull it)", runtimes.ErrNotFound, ref)
	}
	if err != nil {
		return runtimes.Image{}, err
	}
	return wireImage(ctx, img), nil
}

// normalizeRef expands a short image name as Docker does ("python:3" →
// "docker.io/library/python:3"); a name it cannot parse is kept as given.
func normalizeRef(ref string) string {
	named, err := distref.ParseDockerRef(ref)
	if err != nil {
		return ref
	}
	return named.String()
}
