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
// over:
//
//  1. it reads the shared record and its version, then asks whether the
//     owner is gone (in that order: an owner that comes back writes its
//     records, which changes their version);
//  2. it writes its own record first, marked TakenFrom, so that a crash
//     from here on is finished or undone at its next start;
//  3. it writes the shared record naming itself, on the condition that it
//     still names the old owner at the version read (shared.Store.TakeOver),
//     so that of two replicas, or of a replica and the owner come back,
//     only one wins;
//  4. it moves the directory into its own part of SharedDir (one rename,
//     same filesystem) and restores the sandbox from what was saved there,
//     as after a restart.
//
// The owner's side is fencing: from the moment its heartbeat lapses
// (shared.Store.Lapses, a quarter of the lease before the others may take
// its sandboxes) it stops them without saving and answers 503 for them;
// once the heartbeat is renewed it writes each record on the condition
// that it still names it, restores those it still owns and forgets the
// others. An owner started again does the same before serving.

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

var (
	// errNoSavedState: the owner left nothing in SharedDir to restore from.
	errNoSavedState = errors.New("no saved state in the shared directory")
	// errOwnerAlive: the owner renews its heartbeat again.
	errOwnerAlive = errors.New("its replica is alive")
	// errEnded: the sandbox ended (Failed, Terminated): nothing to take over.
	errEnded = errors.New("the sandbox has ended")
)

// fenceEvery is how often a replica looks at its heartbeat's lapses: well
// within the quarter of the lease between a lapse and a takeover.
const fenceEvery = 250 * time.Millisecond

// takeoverState is the state a sandbox taken over comes back in: Running
// or Paused; "" for one that ended.
func takeoverState(r *Record) string {
	st := r.State
	if st == StateFailed && r.Reason == reasonOwnerLost {
		st = r.LostState
	}
	switch st {
	case StateRunning:
		return StateRunning
	case StatePaused, StatePausing:
		return StatePaused
	}
	return ""
}

// takeOver makes this replica the owner of sandbox id, whose owner is
// gone, and restores it from the owner's directory in SharedDir. It
// returns the sandbox's record as it is now.
//
// # Errors
// errdefs.ErrConflict when the record changed meanwhile (another replica
// took it over, or the owner came back), errOwnerAlive, errEnded (with the
// record), errNoSavedState when the old owner's directory is not there;
// the shared store's failure otherwise. A sandbox taken over that cannot
// be restored is not an error: its record says Failed and why.
func (s *Server) takeOver(ctx context.Context, id string) (*Record, error) {
	unlock := s.lock(id)
	defer unlock()
	if s.store.hasLocal(id) {
		return s.store.get(id) // taken over here meanwhile
	}
	sctx, cancel := context.WithTimeout(ctx, 2*sharedTimeout)
	defer cancel()
	cur, version, err := s.store.getShared(sctx, id)
	if err != nil {
		return nil, sharedErr("read "+id, err)
	}
	from := cur.Owner
	state := takeoverState(cur)
	switch {
	case state == "":
		return cur, errEnded
	case from == s.opts.Replica || !validReplicaDir(from):
		return nil, fmt.Errorf("%w: the record names the owner %q, of whom this replica holds nothing", errNoSavedState, from)
	}
	alive, err := s.opts.Shared.Alive(sctx, from)
	if err != nil {
		return nil, sharedErr("is replica "+from+" alive", err)
	}
	if alive {
		return nil, errOwnerAlive
	}
	src := filepath.Join(replicaSandboxes(s.opts.SharedDir, from), id)
	if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s", errNoSavedState, src)
	}
	blob, err := s.opts.Shared.GetBlob(sctx, id)
	if err != nil {
		return nil, sharedErr("read the egress state of "+id, err)
	}
	nr := *cur
	nr.Owner, nr.OwnerAddress, nr.State = s.opts.Replica, s.opts.ReplicaAddress, state
	nr.Reason, nr.Message, nr.LostState = "", "", ""
	nr.LastTransitionAt = time.Now().UTC()
	copyRec := nr
	nr.TakenFrom = from
	if err := s.store.putLocal(&nr, blob); err != nil {
		return nil, fmt.Errorf("take over %s: %w", id, err)
	}
	b, err := json.Marshal(&copyRec)
	if err != nil {
		return nil, err
	}
	sr := sharedRecord(&copyRec, b)
	sr.Version = version
	if err := s.opts.Shared.TakeOver(sctx, sr, from); err != nil {
		if derr := s.store.deleteLocal(id); derr != nil {
			s.log.Warn("take over: undo the record", "id", id, "err", derr)
		}
		return nil, sharedErr("take over "+id, err)
	}
	s.log.Info("taking over a sandbox whose replica is gone", "id", id, "from", from)
	s.finishTakeOver(ctx, &nr)
	return &nr, nil
}

// finishTakeOver moves the directory of r, a sandbox this replica took
// over from r.TakenFrom, into its own part of SharedDir (unless it is
// there already) and restores the sandbox.
func (s *Server) finishTakeOver(ctx context.Context, r *Record) {
	from := r.TakenFrom
	r.TakenFrom = ""
	dst := s.sandboxDir(r.ID)
	if _, err := os.Stat(dst); errors.Is(err, os.ErrNotExist) {
		if err := os.Rename(filepath.Join(replicaSandboxes(s.opts.SharedDir, from), r.ID), dst); err != nil {
			s.setState(r, StateFailed, "RestoreFailed", fmt.Sprintf("taking over from replica %s: %v", from, err))
			return
		}
	}
	s.restoreLocal(ctx, r)
}

// reconcile returns recs, this replica's own records at its start, as far
// as the shared store says they are still its own: a takeover that was
// under way is finished (the shared record names this replica) or undone
// (it does not); a record whose shared copy names another owner is
// forgotten here (its directory is that owner's), and so is one whose copy
// and directory are both gone (taken over and deleted meanwhile).
func (s *Server) reconcile(ctx context.Context, recs []*Record) []*Record {
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
		cp, _, err := s.store.getShared(sctx, r.ID)
		cancel()
		gone := errors.Is(err, runtimes.ErrNotFound)
		switch {
		case err != nil && !gone:
			// Cannot tell: kept as it is (a takeover under way is
			// looked at again at the next start).
			if r.TakenFrom == "" {
				kept = append(kept, r)
			}
		case r.TakenFrom != "" && !gone && cp.Owner == s.opts.Replica:
			s.log.Info("finishing the takeover of a sandbox", "id", r.ID, "from", r.TakenFrom)
			s.finishTakeOver(ctx, r)
		case r.TakenFrom != "":
			s.log.Info("undoing a takeover that did not happen", "id", r.ID, "from", r.TakenFrom)
			s.drop(r.ID)
		case gone && !s.holdsDir(r.ID):
			s.log.Info("forgetting a sandbox deleted elsewhere", "id", r.ID)
			s.drop(r.ID)
		case !gone && cp.Owner != "" && cp.Owner != s.opts.Replica:
			s.log.Info("forgetting a sandbox another replica took over", "id", r.ID, "owner", cp.Owner)
			s.drop(r.ID)
		default:
			kept = append(kept, r) // a copy missing is written again with the record
		}
	}
	return kept
}

// holdsDir reports whether this replica's directory of sandbox id is
// there (a sandbox taken over has had it moved away).
func (s *Server) holdsDir(id string) bool {
	_, err := os.Stat(s.sandboxDir(id))
	return err == nil
}

// drop forgets this replica's record of id (and its egress state) without
// touching anything else.
func (s *Server) drop(id string) {
	if err := s.store.deleteLocal(id); err != nil {
		s.log.Warn("forget a sandbox", "id", id, "err", err)
	}
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
	owned := map[string]bool{} // a directory of any of these ids is kept
	for _, r := range recs {
		owned[r.ID] = true
		if r.Owner == "" || r.Owner == s.opts.Replica || s.store.isShared(r) || takeoverState(r) == "" {
			continue
		}
		// takeOver asks again whether the owner is gone, after reading
		// the record's version: alive is only a first look.
		if alive(r.Owner) {
			continue
		}
		_, err := s.takeOver(ctx, r.ID)
		switch {
		case err == nil, errors.Is(err, errdefs.ErrConflict), errors.Is(err, errOwnerAlive), errors.Is(err, errEnded):
		case errors.Is(err, errNoSavedState):
			s.markLost(r, err)
		default:
			s.log.Warn("sweep: take over a sandbox of a replica that is gone", "id", r.ID, "owner", r.Owner, "err", err)
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
			if owned[id.Name()] {
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

// fence runs checkFence every fenceEvery until ctx is done.
func (s *Server) fence(ctx context.Context) {
	defer close(s.fenceDone)
	if s.opts.SharedDir == "" {
		return
	}
	t := time.NewTicker(fenceEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.checkFence(ctx)
		}
	}
}

// checkFence keeps this replica from running sandboxes another replica
// may take or have taken over while its heartbeat lapsed: during a lapse
// it stops every one of them without saving (forward answers 503 for
// them); once the heartbeat is renewed, it writes each record on the
// condition that it still names this replica (the write that makes a
// takeover read before it fail), restores those it still owns and
// forgets the others. It reports whether this replica is sure its records
// are its own.
func (s *Server) checkFence(ctx context.Context) bool {
	if s.opts.SharedDir == "" {
		return true
	}
	n, now := s.opts.Shared.Lapses()
	if !now && n == s.verified.Load() {
		return true
	}
	s.suspendOwn()
	if now {
		return false
	}
	s.log.Warn("this replica's heartbeat lapsed: making sure no other replica took its sandboxes over before running them again")
	recs, err := s.store.listLocal()
	if err != nil {
		return false
	}
	var own []*Record
	for _, r := range recs {
		if r.Owner == "" || s.store.isShared(r) || r.TakenFrom != "" {
			continue
		}
		switch err := s.store.claimCopy(r); {
		case err == nil:
			own = append(own, r)
		case errors.Is(err, errdefs.ErrConflict):
			s.forgetTaken(r.ID)
		case errors.Is(err, runtimes.ErrNotFound) && !s.holdsDir(r.ID):
			s.forgetTaken(r.ID) // taken over, then deleted
		case errors.Is(err, runtimes.ErrNotFound):
			own = append(own, r) // its copy is written again with it
		default:
			return false // ask again next round
		}
	}
	if n2, now := s.opts.Shared.Lapses(); now || n2 != n {
		return false // lapsed again meanwhile: check again
	}
	for _, r := range own {
		unlock := s.lock(r.ID)
		if _, live := s.liveSandbox(r.ID); !live && s.store.hasLocal(r.ID) {
			if cur, err := s.store.get(r.ID); err == nil && cur.State != StateFailed && cur.State != StateTerminated {
				s.restoreLocal(ctx, cur)
			}
		}
		unlock()
	}
	s.verified.Store(n)
	s.log.Info("this replica's sandboxes are its own: running them again")
	return true
}

// suspendOwn stops every live sandbox whose record this replica keeps
// with an owner (those another replica may take over), without saving:
// whatever they did since their last save may be another replica's to
// restore by now. checkFence restores those that stay this replica's.
func (s *Server) suspendOwn() {
	s.mu.Lock()
	ids := make([]string, 0, len(s.live))
	for id := range s.live {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		rec, err := s.store.getLocal(id)
		if err != nil || rec == nil || rec.Owner == "" {
			continue
		}
		sb, eg := s.detach(id)
		if sb != nil {
			s.log.Warn("stopping a sandbox while this replica's heartbeat lapses", "id", id)
			discard(sb)
			_ = sb.Close(context.Background())
		}
		if eg != nil {
			_ = eg.Close()
		}
	}
}

// sharedLapses is the shared store's Lapses when this replica's sandboxes
// can be taken over by others (SharedDir), else none.
func (s *Server) sharedLapses() (uint64, bool) {
	if s.opts.SharedDir == "" {
		return 0, false
	}
	return s.opts.Shared.Lapses()
}

// fenced reports whether this replica must not run the sandboxes others
// may take over: its heartbeat lapses, or lapsed and it has not checked
// since.
func (s *Server) fenced() bool {
	n, now := s.sharedLapses()
	return now || n != s.verified.Load()
}

// forgetTaken drops this replica's sandbox id, which another replica has
// taken over: the live instance is closed without saving anything (its
// directory is the new owner's now) and the record is forgotten here.
// Once the new owner holds the directory, what is at its old place was
// written by this replica's instance since (its saves go by path) and is
// removed; otherwise it is left for the new owner to move, or for this
// replica's next start.
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
	s.drop(id)
	s.log.Info("forgot a sandbox another replica took over", "id", id)
	ctx, cancel := sharedCtx()
	cp, _, err := s.store.getShared(ctx, id)
	cancel()
	if err != nil || cp.Owner == s.opts.Replica || !validReplicaDir(cp.Owner) {
		return
	}
	if _, err := os.Stat(filepath.Join(replicaSandboxes(s.opts.SharedDir, cp.Owner), id)); err == nil && s.holdsDir(id) {
		if err := mounts.RemoveAll(s.sandboxDir(id)); err != nil {
			s.log.Warn("remove what the old instance of a sandbox taken over wrote", "id", id, "err", err)
		}
	}
}
