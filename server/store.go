package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hybox-dev/hybox/internal/shared"
	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Record is the persisted state of one sandbox.
type Record struct {
	ID               string            `json:"id"`
	Image            string            `json:"image"`
	Runtime          string            `json:"runtime"`
	Entrypoint       []string          `json:"entrypoint,omitempty"`
	Env              map[string]string `json:"env,omitempty"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	Extensions       map[string]string `json:"extensions,omitempty"`
	ResourceLimits   map[string]string `json:"resourceLimits,omitempty"`
	MemoryBytes      int64             `json:"memoryBytes,omitempty"`
	CPUMillis        int64             `json:"cpuMillis,omitempty"`
	Platform         *api.Platform     `json:"platform,omitempty"`
	Volumes          []runtimes.Volume `json:"volumes,omitempty"`
	State            string            `json:"state"`
	Reason           string            `json:"reason,omitempty"`
	Message          string            `json:"message,omitempty"`
	LastTransitionAt time.Time         `json:"lastTransitionAt"`
	CreatedAt        time.Time         `json:"createdAt"`
	ExpiresAt        *time.Time        `json:"expiresAt,omitempty"`
	// Token authorises requests to this sandbox's execd (X-EXECD-ACCESS-TOKEN).
	Token string `json:"token"`
	// NetworkPolicy is the current egress policy; nil = unrestricted.
	NetworkPolicy *policy.Policy `json:"networkPolicy,omitempty"`
	// CredentialProxy says the sandbox has a credential vault.
	CredentialProxy bool `json:"credentialProxy,omitempty"`
	// Pool names the warm pool the sandbox was claimed from ("" = cold).
	Pool string `json:"pool,omitempty"`
	// Claims are the named volumes it mounts.
	Claims []volumeClaim `json:"claims,omitempty"`
	// Owner names the replica that holds the sandbox and OwnerAddress is
	// its base URL, when the sandbox lives in one replica of several (a
	// wasm sandbox beside shared state; replicas.go).
	Owner        string `json:"owner,omitempty"`
	OwnerAddress string `json:"ownerAddress,omitempty"`
	// LostState is the state the sandbox had when its owner was found
	// gone (State is then Failed, OwnerLost); a takeover brings it back.
	LostState string `json:"lostState,omitempty"`
	// TakenFrom, in this replica's own record only, names the replica
	// a takeover under way takes the sandbox from (takeover.go).
	TakenFrom string `json:"takenFrom,omitempty"`
}

var (
	bucketSandboxes = []byte("sandboxes")
	// bucketEgress holds each sandbox's sealed vault and CA.
	bucketEgress = []byte("egress")
	// bucketPools holds the pools created through the API.
	bucketPools = []byte("pools")
	// bucketMembers holds the idle members of every pool.
	bucketMembers = []byte("poolMembers")
)

// store persists records in a bbolt database and, when the server is one
// of several replicas, the records of sandboxes every replica serves in the
// shared store (internal/shared; a cluster's API server).
type store struct {
	db      *bolt.DB
	commits committer // every write goes through update (commit.go)
	// shared keeps the records of the runtimes it Shares; nil = none.
	shared shared.Store
	// copyBlobs also keeps the sealed egress state of this replica's own
	// sandboxes in the shared store, for a replica that takes one over
	// (Options.SharedDir); copies of records are then written only while
	// they name this replica's record's owner, and takenOver is told of a
	// copy that names another (a replica took the sandbox over), or of one
	// that is gone while holdsDir says the directory is gone too (taken
	// over and deleted since).
	copyBlobs bool
	takenOver func(id string)
	holdsDir  func(id string) bool
	log       *slog.Logger
}

// sharedTimeout bounds each call to the shared store.
const sharedTimeout = 15 * time.Second

func openStore(path string, sh shared.Store, log *slog.Logger) (*store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSandboxes, bucketEgress, bucketPools, bucketMembers, bucketVolumes} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &store{db: db, shared: sh, log: log}, nil
}

func (s *store) close() error { return s.db.Close() }

// isShared reports whether r's record lives in the shared store.
func (s *store) isShared(r *Record) bool { return s.sharesRuntime(r.Runtime) }

// sharesRuntime reports whether the records of runtime's sandboxes (and
// its pools' members) live in the shared store.
func (s *store) sharesRuntime(runtime string) bool {
	return s.shared != nil && s.shared.Shares(runtime)
}

func sharedCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), sharedTimeout)
}

// sharedErr maps a shared store's failure to the wire: not found and
// conflicts stay what they are, anything else is the store not answering
// (503).
func sharedErr(what string, err error) error {
	if err == nil {
		return nil
	}
	var e *errdefs.Error
	if errors.Is(err, runtimes.ErrNotFound) || errors.Is(err, errdefs.ErrConflict) || errors.As(err, &e) {
		return err
	}
	return errdefs.New(api.ErrorCodeUNAVAILABLE, "the shared sandbox store does not answer (%s): %v", what, err)
}

// put writes r, the record of a sandbox that exists (create writes the
// first one).
func (s *store) put(r *Record) error { return s.write(r, false) }

// create writes the first record of a sandbox.
func (s *store) create(r *Record) error { return s.write(r, true) }

func (s *store) write(r *Record, first bool) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if s.isShared(r) {
		return s.writeShared(r, b, first)
	}
	err = s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).Put([]byte(r.ID), b)
	})
	if err != nil || s.shared == nil {
		return err
	}
	// The copy the other replicas list and forward by. Its owner's own
	// record is the one that counts, so a copy that cannot be written
	// fails nothing here (the wasm tier keeps working without the API
	// server); the next write brings it up to date.
	err = s.writeShared(r, b, first)
	switch {
	case errors.Is(err, errdefs.ErrConflict) && first:
		err = s.writeShared(r, b, false) // made before the copy was
	case errors.Is(err, runtimes.ErrNotFound) && !first:
		if s.copyBlobs && !s.holdsDir(r.ID) {
			s.log.Warn("this sandbox was taken over and deleted by another replica", "id", r.ID)
			s.takenOver(r.ID)
			return nil
		}
		err = s.writeShared(r, b, true) // a copy that was never made
	}
	if s.copyBlobs && errors.Is(err, errdefs.ErrConflict) {
		s.log.Warn("another replica has taken this sandbox over", "id", r.ID)
		s.takenOver(r.ID)
		return nil
	}
	if err != nil {
		s.log.Warn("the shared copy of a record could not be written; other replicas see the sandbox after its next write", "id", r.ID, "err", err)
	}
	return nil
}

func (s *store) writeShared(r *Record, b []byte, first bool) error {
	ctx, cancel := sharedCtx()
	defer cancel()
	sr := sharedRecord(r, b)
	if first {
		return sharedErr("create "+r.ID, s.shared.Create(ctx, sr))
	}
	if s.copyBlobs && !s.isShared(r) {
		// Another replica may have taken the sandbox over: the copy
		// changes only while it names the owner r names.
		return sharedErr("put "+r.ID, s.shared.TakeOver(ctx, sr, r.Owner))
	}
	return sharedErr("put "+r.ID, s.shared.Put(ctx, sr))
}

// sharedRecord is r (whose JSON is b) as the shared store keeps it.
func sharedRecord(r *Record, b []byte) shared.Record {
	return shared.Record{ID: r.ID, Runtime: r.Runtime, Image: r.Image,
		State: r.State, Reason: r.Reason, Message: r.Message, LastTransitionAt: r.LastTransitionAt, Data: b}
}

// get reads the record of id: this server's own first, then the shared
// store's.
func (s *store) get(id string) (*Record, error) {
	r, err := s.getLocal(id)
	if err != nil || r != nil {
		return r, err
	}
	notFound := errdefs.New(api.ErrorCodeSANDBOXNOTFOUND, "sandbox %s not found", id)
	if s.shared == nil {
		return nil, notFound
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	sr, err := s.shared.Get(ctx, id)
	if errors.Is(err, runtimes.ErrNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, sharedErr("get "+id, err)
	}
	r = &Record{}
	if err := json.Unmarshal(sr.Data, r); err != nil {
		return nil, fmt.Errorf("shared record %s: %w", id, err)
	}
	return r, nil
}

func (s *store) delete(r *Record) error {
	if s.isShared(r) {
		ctx, cancel := sharedCtx()
		defer cancel()
		return sharedErr("delete "+r.ID, s.shared.Delete(ctx, r.ID))
	}
	err := s.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketEgress).Delete([]byte(r.ID)); err != nil {
			return err
		}
		return tx.Bucket(bucketSandboxes).Delete([]byte(r.ID))
	})
	if err != nil || s.shared == nil {
		return err
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	if err := s.shared.Delete(ctx, r.ID); err != nil {
		s.log.Warn("the shared copy of a deleted record could not be deleted", "id", r.ID, "err", err)
	}
	return nil
}

// putEgress stores a sandbox's sealed egress state.
func (s *store) putEgress(r *Record, b []byte) error {
	if s.isShared(r) {
		ctx, cancel := sharedCtx()
		defer cancel()
		return sharedErr("put the egress state of "+r.ID, s.shared.PutBlob(ctx, r.ID, b))
	}
	err := s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEgress).Put([]byte(r.ID), b)
	})
	if err != nil || !s.copyBlobs {
		return err
	}
	// As for the record's copy: this replica's own state is the one that
	// counts, so a copy that cannot be written fails nothing here.
	ctx, cancel := sharedCtx()
	defer cancel()
	if err := s.shared.PutBlob(ctx, r.ID, b); err != nil {
		s.log.Warn("the shared copy of a sandbox's egress state could not be written; a replica taking it over would miss its vault", "id", r.ID, "err", err)
	}
	return nil
}

// putLocal writes r, and its sealed egress state when blob is not nil,
// into this server's own database only (a sandbox taken over, whose
// shared copy is written already).
func (s *store) putLocal(r *Record, blob []byte) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		if blob != nil {
			if err := tx.Bucket(bucketEgress).Put([]byte(r.ID), blob); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketSandboxes).Put([]byte(r.ID), b)
	})
}

// deleteLocal forgets id's record and egress state in this server's own
// database only (a sandbox another replica took over).
func (s *store) deleteLocal(id string) error {
	return s.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketEgress).Delete([]byte(id)); err != nil {
			return err
		}
		return tx.Bucket(bucketSandboxes).Delete([]byte(id))
	})
}

// getShared reads the shared store's record of id (a sandbox of this
// replica's has a copy there) and its version.
func (s *store) getShared(ctx context.Context, id string) (*Record, string, error) {
	sr, err := s.shared.Get(ctx, id)
	if err != nil {
		return nil, "", err
	}
	r := &Record{}
	if err := json.Unmarshal(sr.Data, r); err != nil {
		return nil, "", fmt.Errorf("shared record %s: %w", id, err)
	}
	return r, sr.Version, nil
}

// claimCopy writes the shared copy of r, a record of this replica's, on
// the condition that it still names r's owner: an error wrapping
// errdefs.ErrConflict when another replica took the sandbox over,
// runtimes.ErrNotFound when the copy is gone.
func (s *store) claimCopy(r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	return s.shared.TakeOver(ctx, sharedRecord(r, b), r.Owner)
}

// getLocal reads this server's own record of id; nil when it has none.
func (s *store) getLocal(id string) (*Record, error) {
	var r *Record
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSandboxes).Get([]byte(id))
		if b == nil {
			return nil
		}
		r = &Record{}
		return json.Unmarshal(b, r)
	})
	return r, err
}

// getEgress returns a sandbox's sealed egress state, nil when it has none.
func (s *store) getEgress(r *Record) ([]byte, error) {
	if s.isShared(r) {
		ctx, cancel := sharedCtx()
		defer cancel()
		b, err := s.shared.GetBlob(ctx, r.ID)
		return b, sharedErr("get the egress state of "+r.ID, err)
	}
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketEgress).Get([]byte(r.ID)); b != nil {
			out = append([]byte(nil), b...)
		}
		return nil
	})
	return out, err
}

// list returns this server's records and the shared store's.
func (s *store) list() ([]*Record, error) {
	recs, err := s.listLocal()
	if err != nil || s.shared == nil {
		return recs, err
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	srs, err := s.shared.List(ctx)
	if err != nil {
		return nil, sharedErr("list", err)
	}
	own := map[string]bool{}
	for _, r := range recs {
		own[r.ID] = true
	}
	for _, sr := range srs {
		if own[sr.ID] {
			continue // this replica's own record, and its copy
		}
		r := &Record{}
		if err := json.Unmarshal(sr.Data, r); err != nil {
			return nil, fmt.Errorf("shared record %s: %w", sr.ID, err)
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// hasLocal reports whether this server holds the record of id itself.
func (s *store) hasLocal(id string) bool {
	found := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		found = tx.Bucket(bucketSandboxes).Get([]byte(id)) != nil
		return nil
	})
	return found
}

// putCopy writes only the shared copy of another replica's record.
func (s *store) putCopy(r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.writeShared(r, b, false)
}

// listLocal returns this server's own records only.
func (s *store) listLocal() ([]*Record, error) {
	return listBucket[*Record](s, bucketSandboxes, "record")
}

var errConflict = errors.New("conflict")
