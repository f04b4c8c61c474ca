package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/v2/core/snapshots"

	"github.com/hybox-dev/hybox/runtimes"
)

var _ runtimes.Sweeper = (*Containerd)(nil)

// markDir holds one empty file per sandbox whose creation began: it lets
// Sweep find a network namespace left by a crash before the container
// record existed.
func (b *Containerd) markDir() string { return filepath.Join(b.opts.StateDir, "sandboxes") }

func validID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00")
}

// mark records that the creation of id began.
func (b *Containerd) mark(id string) error {
	if !validID(id) {
		return fmt.Errorf("%w: sandbox id %q", runtimes.ErrInvalid, id)
	}
	if err := os.MkdirAll(b.markDir(), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.markDir(), id), nil, 0o644)
}

func (b *Containerd) unmark(id string) error {
	if !validID(id) {
		return nil
	}
	if err := os.Remove(filepath.Join(b.markDir(), id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Sweep removes every sandbox of the backend's namespace whose id keep
// rejects: its task (and shim), container, snapshot, network namespace
// and address lease. The server calls it at start-up with the ids it has
// records of, to remove what a crash in the middle of a create left. The
// sandboxes' own host directories belong to the server.
//
// # Errors
// When containerd cannot be listed; removal failures are joined.
func (b *Containerd) Sweep(ctx context.Context, keep func(id string) bool) error {
	ctx = b.ctx(ctx)
	ids := map[string]bool{}
	cs, err := b.client.Containers(ctx)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, c := range cs {
		ids[c.ID()] = true
	}
	// Snapshots of sandboxes are keyed by the sandbox id; image layers
	// are committed snapshots and are never touched.
	err = b.client.SnapshotService(snapshotter).Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if info.Kind == snapshots.KindActive && validID(info.Name) {
			ids[info.Name] = true
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	if ents, err := os.ReadDir(b.markDir()); err == nil {
		for _, e := range ents {
			ids[e.Name()] = true
		}
	}
	var errs []error
	for id := range ids {
		if keep(id) {
			continue
		}
		b.opts.Logger.Info("sweeping an orphaned sandbox", "id", id)
		b.unwatch(id)
		if err := b.remove(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("sweep %s: %w", id, err))
			continue
		}
		if err := b.unmark(id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Sweep implements runtimes.Sweeper for one runtime of the backend: it
// sweeps the whole backend (runc and runsc share it).
func (r *Runtime) Sweep(ctx context.Context, keep func(id string) bool) error {
	return r.b.Sweep(ctx, keep)
}

var _ runtimes.Sweeper = (*Runtime)(nil)
