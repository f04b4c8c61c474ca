package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hybox-dev/hybox/internal/mounts"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Takeover. A sandbox that lives in one replica's process (wasm) keeps
// its directory (workspace, saved contexts) in Options.SharedDir, under
// replicas/<replica>/sandboxes/<id>, when that is set. When its owner is
// gone (its heartbeat lapsed), the first replica that meets it takes it
// over: it names itself the owner in the shared store, on the condition
// that the record still names the old owner (shared.Store.TakeOver, so two
// replicas never both take it), moves the directory into its own part of
// SharedDir (one rename, same filesystem), and restores the sandbox from
// what was saved there, as after a restart. The old owner, started again,
// finds the record naming another owner and drops its own.

// sandboxesRoot is the directory that holds this replica's sandbox
// directories.
func sandboxesRoot(o Options) string {
	if o.SharedDir != "" {
		return replicaSandboxes(o.SharedDir, o.Replica)
	}
	return filepath.Join(o.DataDir, "sandboxes")
}

// replicaSandboxes is where replica keeps its sandboxes in sharedDir.
func replicaSandboxes(sharedDir, replica string) string {
	return filepath.Join(sharedDir, "replicas", replica, "sandboxes")
}

// validReplicaDir reports whether a replica's name can name its directory
// in SharedDir.
func validReplicaDir(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= 253 &&
		!strings.ContainsAny(name, "/\\\x00")
}

// errNoSavedState: the owner left nothing in SharedDir to restore from.
var errNoSavedState = errors.New("no saved state in the shared directory")

// takeOver makes this replica the owner of rec, a sandbox whose owner is
// gone, and restores it from the owner's directory in SharedDir. It
// returns the sandbox's record as it is now.
//
// # Errors
// errdefs.ErrConflict when another replica took it over first (read the
// record again); errNoSavedState when the old owner's directory is not
// there; the shared store's failure otherwise. A sandbox taken over that
// cannot be restored is not an error: its record says Failed and why.
func (s *Server) takeOver(ctx context.Context, rec *Record) (*Record, error) {
	unlock := s.adopting.lock(rec.ID)
	defer unlock()
	if s.store.hasLocal(rec.ID) {
		return s.store.get(rec.ID) // taken over here meanwhile
	}
	from := rec.Owner
	if !validReplicaDir(from) {
		return nil, fmt.Errorf("%w: the owner %q names no directory", errNoSavedState, from)
	}
	src := filepath.Join(replicaSandboxes(s.opts.SharedDir, from), rec.ID)
	if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s", errNoSavedState, src)
	}
	nr := *rec
	nr.Owner, nr.OwnerAddress = s.opts.Replica, s.opts.ReplicaAddress
	if nr.State == StateFailed && nr.Reason == reasonOwnerLost {
		nr.State = nr.LostState
	}
	if nr.State != StatePaused {
		nr.State = StateRunning
	}
	nr.Reason, nr.Message, nr.LostState = "", "", ""
	nr.LastTransitionAt = time.Now().UTC()
	b, err := json.Marshal(&nr)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, sharedTimeout)
	defer cancel()
	if err := s.opts.Shared.TakeOver(sctx, sharedRecord(&nr, b), from); err != nil {
		return nil, sharedErr("take over "+rec.ID, err)
	}
	// This replica owns the sandbox from here on: whatever fails below is
	// recorded on the sandbox, which stays deletable.
	s.log.Info("taking over a sandbox whose replica is gone", "id", rec.ID, "from", from)
	blob, err := s.opts.Shared.GetBlob(sctx, rec.ID)
	if err != nil {
		s.log.Warn("take over: the sandbox's egress state", "id", rec.ID, "err", err)
	}
	if err := s.store.putLocal(&nr, blob); err != nil {
		return nil, fmt.Errorf("take over %s: %w", rec.ID, err)
	}
	if err := os.Rename(src, s.sandboxDir(rec.ID)); err != nil {
		s.setState(&nr, StateFailed, "RestoreFailed", fmt.Sprintf("taking over from replica %s: %v", from, err))
		return &nr, nil
	}
	s.restoreLocal(ctx, &nr)
	return &nr, nil
}

// dropTakenOver returns recs without the records of sandboxes that another
// replica has taken over while this one was gone (their shared copy names
// another owner); those records are forgotten here, and their directories
// are the new owner's.
func (s *Server) dropTakenOver(ctx context.Context, recs []*Record) []*Record {
	if s.opts.Shared == nil {
		return recs
	}
	kept := recs[:0]
	for _, r := range recs {
		if s.store.isShared(r) || r.Owner == "" {
			kept = append(kept, r)
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, sharedTimeout)
		cp, err := s.store.getShared(sctx, r.ID)
		cancel()
		if err != nil || cp.Owner == "" || cp.Owner == s.opts.Replica {
			// Not taken over (a copy that is missing or unreadable
			// is written again with the record's next write).
			kept = append(kept, r)
			continue
		}
		s.log.Info("forgetting a sandbox another replica took over", "id", r.ID, "owner", cp.Owner)
		if err := s.store.deleteLocal(r.ID); err != nil {
			s.log.Warn("forget a sandbox taken over", "id", r.ID, "err", err)
		}
	}
	return kept
}

// sweepShared, on the leading replica, takes over the sandboxes of
// replicas that are gone, so that they are listed as they are rather than
// as their owner last wrote them, and removes directories in SharedDir
// that such replicas left without a record (a create they were in the
// middle of).
func (s *Server) sweepShared(ctx context.Context, recs []*Record, alive func(string) bool) {
	if s.opts.SharedDir == "" {
		return
	}
	owned := map[string]bool{} // replica/id of every record's sandbox
	for _, r := range recs {
		if r.Owner == "" || s.store.isShared(r) {
			continue
		}
		owned[r.Owner+"/"+r.ID] = true
		if r.Owner == s.opts.Replica || alive(r.Owner) {
			continue
		}
		if _, err := s.takeOver(ctx, r); err != nil && !errors.Is(err, errdefs.ErrConflict) {
			s.log.Warn("sweep: take over a sandbox of a replica that is gone", "id", r.ID, "owner", r.Owner, "err", err)
			if errors.Is(err, errNoSavedState) {
				s.markLost(r, err)
			}
		}
	}
	replicas, err := os.ReadDir(filepath.Join(s.opts.SharedDir, "replicas"))
	if err != nil {
		return
	}
	for _, e := range replicas {
		name := e.Name()
		if name == s.opts.Replica || alive(name) {
			continue
		}
		dir := replicaSandboxes(s.opts.SharedDir, name)
		ids, _ := os.ReadDir(dir)
		left := 0
		for _, id := range ids {
			if owned[name+"/"+id.Name()] {
				left++
				continue
			}
			s.log.Info("sweep: removing a sandbox directory a replica that is gone left without a record", "replica", name, "id", id.Name())
			if err := mounts.RemoveAll(filepath.Join(dir, id.Name())); err != nil {
				s.log.Warn("sweep: remove a directory left in the shared directory", "dir", filepath.Join(dir, id.Name()), "err", err)
				left++
			}
		}
		if left == 0 {
			_ = os.RemoveAll(filepath.Join(s.opts.SharedDir, "replicas", name))
		}
	}
}

// checkFence keeps this replica from serving sandboxes another replica
// may have taken over while its heartbeat lapsed (shared.Store.Lapses;
// forward answers 503 for its sandboxes meanwhile): once the heartbeat is
// renewed again, it forgets each sandbox whose record names another owner,
// and then serves the others again. It reports whether this replica is
// sure its records are its own.
func (s *Server) checkFence(ctx context.Context) bool {
	if s.opts.SharedDir == "" {
		return true
	}
	n, now := s.opts.Shared.Lapses()
	if now {
		return false
	}
	if n == s.verified.Load() {
		return true
	}
	s.log.Warn("this replica's heartbeat lapsed: making sure no other replica took its sandboxes over before serving them again")
	recs, err := s.store.listLocal()
	if err != nil {
		return false
	}
	for _, r := range recs {
		if r.Owner == "" || s.store.isShared(r) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, sharedTimeout)
		cp, err := s.store.getShared(sctx, r.ID)
		cancel()
		switch {
		case errors.Is(err, runtimes.ErrNotFound):
		case err != nil:
			return false // ask again next round
		case cp.Owner != "" && cp.Owner != s.opts.Replica:
			s.forgetTaken(r.ID)
		}
	}
	if n2, now := s.opts.Shared.Lapses(); now || n2 != n {
		return false // lapsed again meanwhile: check again
	}
	s.verified.Store(n)
	s.log.Info("this replica's sandboxes are its own: serving them again")
	return true
}

// sharedLapses is the shared store's Lapses when this replica's sandboxes
// can be taken over by others (SharedDir), else none.
func (s *Server) sharedLapses() (uint64, bool) {
	if s.opts.SharedDir == "" {
		return 0, false
	}
	return s.opts.Shared.Lapses()
}

// forgetTaken drops this replica's sandbox id, which another replica has
// taken over: the live instance is closed without saving anything (its
// directory is the new owner's now), the record is forgotten here, and
// whatever the old instance wrote at the old place since is removed.
func (s *Server) forgetTaken(id string) {
	unlock := s.lock(id)
	defer unlock()
	sb, eg := s.detach(id)
	if sb != nil {
		discard(sb)
		_ = sb.Close(context.Background())
	}
	if eg != nil {
		_ = eg.Close()
	}
	if err := s.store.deleteLocal(id); err != nil {
		s.log.Warn("forget a sandbox another replica took over", "id", id, "err", err)
	}
	// The new owner moved the directory away; what is at its old place
	// now is what the old instance wrote since (a late save).
	if err := mounts.RemoveAll(s.sandboxDir(id)); err != nil {
		s.log.Warn("remove what is left of a sandbox another replica took over", "id", id, "err", err)
	}
	s.log.Info("forgot a sandbox another replica took over", "id", id)
}
