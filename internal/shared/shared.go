// Package shared is the contract between the server and a store that
// several server replicas share (a Kubernetes API server, runtimes/k8s):
// the records of the sandboxes that any replica can serve, their sealed
// egress state, keys every replica must hold alike, and which replica
// leads the work that must run once (the TTL reaper).
//
// The server keeps every other record in its own database, and a copy of
// it here naming the replica that holds the sandbox (its owner), so that
// every replica lists it and forwards requests for it to its owner. A
// replica that meets a shared record it has no live sandbox for adopts it
// (the runtime's Restore) on first use.
package shared

import (
	"context"
	"time"
)

// Record is one sandbox's record as the shared store keeps it.
type Record struct {
	ID      string
	Runtime string
	Image   string
	// State, Reason, Message and LastTransitionAt are the sandbox's
	// status, kept apart from Data so that the store can show them (a
	// custom resource's status and printer columns).
	State            string
	Reason           string
	Message          string
	LastTransitionAt time.Time
	// Data is the server's whole record (JSON), opaque to the store.
	Data []byte
	// Version names this state of the record (Get and List set it; a
	// write changes it): TakeOver can write on the condition that the
	// record has not changed since it was read.
	Version string
}

// Member is an idle member of a warm pool whose runtime the store Shares:
// every replica can claim it, and the leading replica starts new ones.
type Member struct {
	ID   string
	Pool string
	// Data is the server's member record (JSON), opaque to the store.
	Data []byte
}

// Store keeps shared records. Every method is bounded by ctx and by the
// store's own call timeout; a store that does not answer fails with an
// error the server maps to 503.
type Store interface {
	// Shares reports whether sandboxes of runtime keep their records here
	// (the runtimes whose sandboxes every replica can reach).
	Shares(runtime string) bool
	// Create writes the first record of a sandbox; an error wrapping
	// errdefs.ErrConflict when one exists.
	Create(ctx context.Context, r Record) error
	// Put replaces the record of r.ID (last write wins); an error wrapping
	// runtimes.ErrNotFound when it is gone, so that a write racing a
	// delete by another replica cannot bring the record back.
	Put(ctx context.Context, r Record) error
	// Get reads the record of id; an error wrapping runtimes.ErrNotFound
	// when there is none.
	Get(ctx context.Context, id string) (Record, error)
	// Delete removes the record of id and its blob; no error when absent.
	Delete(ctx context.Context, id string) error
	// List returns every record.
	List(ctx context.Context) ([]Record, error)
	// PutBlob keeps b (a sealed vault and CA) for id, apart from its
	// record; GetBlob returns it, nil when there is none.
	PutBlob(ctx context.Context, id string, b []byte) error
	GetBlob(ctx context.Context, id string) ([]byte, error)
	// Key returns the shared key called name, size random bytes made by
	// the first replica that asks and read by every other.
	Key(ctx context.Context, name string, size int) ([]byte, error)
	// PutPool keeps the definition of the pool called name (JSON, made
	// through the API), replacing one there is unless create is set:
	// then an error wrapping errdefs.ErrConflict when one exists.
	PutPool(ctx context.Context, name string, def []byte, create bool) error
	// DeletePool removes a pool's definition; no error when absent.
	DeletePool(ctx context.Context, name string) error
	// Pools returns every pool definition by name.
	Pools(ctx context.Context) (map[string][]byte, error)
	// CreateMember writes the record of a new pool member (before its
	// sandbox starts; PutMember marks it started).
	CreateMember(ctx context.Context, m Member) error
	// PutMember replaces a member's record; runtimes.ErrNotFound when it
	// is no longer a member (claimed or removed).
	PutMember(ctx context.Context, m Member) error
	// Members returns the members of pool ("" = of every pool). Members
	// are not records: Get, List and Create do not see them.
	Members(ctx context.Context, pool string) ([]Member, error)
	// DeleteMember forgets a member; no error when absent.
	DeleteMember(ctx context.Context, id string) error
	// ClaimMember turns member r.ID into the sandbox record r in one
	// write: an error wrapping errdefs.ErrConflict when it is no longer a
	// member (another replica claimed it first).
	ClaimMember(ctx context.Context, r Record) error
	// TakeOver replaces the record of r.ID with r only while the stored
	// record still names from as its owner and, when r.Version is set,
	// is still at that version: an error wrapping errdefs.ErrConflict
	// when it is not (another replica took it over, or its owner wrote
	// it since it was read), runtimes.ErrNotFound when the record is gone.
	// A replica takes over a sandbox whose owner is gone with the version
	// it read before it found the owner gone; the owner writes its
	// records after a lapse of its heartbeat with its own name and no
	// version: of the two, only the first write applies.
	TakeOver(ctx context.Context, r Record, from string) error
	// Lapses counts the times this replica's heartbeat went unrenewed for
	// three quarters of its lease (the others take it for gone after the
	// whole lease and may then take over what lives in its process), and
	// says whether that is the case now. From the start of a lapse until
	// the replica has made sure they are still its own, it must not run
	// such sandboxes.
	Lapses() (n uint64, now bool)
	// Leading reports whether this replica leads now.
	Leading() bool
	// Alive reports whether the replica called name still runs (it
	// renews a heartbeat of its own while it does).
	Alive(ctx context.Context, name string) (bool, error)
	// Close gives up the lead and stops the store's background work.
	Close()
}
