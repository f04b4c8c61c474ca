package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

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

// store persists records in a bbolt database.
type store struct {
	db      *bolt.DB
	commits committer // every write goes through update (commit.go)
}

func openStore(path string) (*store, error) {
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
	return &store{db: db}, nil
}

func (s *store) close() error { return s.db.Close() }

func (s *store) put(r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).Put([]byte(r.ID), b)
	})
}

func (s *store) get(id string) (*Record, error) {
	var r *Record
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSandboxes).Get([]byte(id))
		if b == nil {
			return errdefs.New(api.ErrorCodeSANDBOXNOTFOUND, "sandbox %s not found", id)
		}
		r = &Record{}
		return json.Unmarshal(b, r)
	})
	return r, err
}

func (s *store) delete(id string) error {
	return s.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketEgress).Delete([]byte(id)); err != nil {
			return err
		}
		return tx.Bucket(bucketSandboxes).Delete([]byte(id))
	})
}

// putEgress stores a sandbox's sealed egress state.
func (s *store) putEgress(id string, b []byte) error {
	return s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEgress).Put([]byte(id), b)
	})
}

// getEgress returns a sandbox's sealed egress state, nil when it has none.
func (s *store) getEgress(id string) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketEgress).Get([]byte(id)); b != nil {
			out = append([]byte(nil), b...)
		}
		return nil
	})
	return out, err
}

func (s *store) list() ([]*Record, error) { return listBucket[*Record](s, bucketSandboxes, "record") }

var errConflict = errors.New("conflict")
