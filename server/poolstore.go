package server

import (
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// putJSON stores v under key in bucket.
func (s *store) putJSON(bucket []byte, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put([]byte(key), b) })
}

func (s *store) deleteKey(bucket []byte, key string) error {
	return s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Delete([]byte(key)) })
}

func (s *store) putPool(p api.CreatePoolRequest) error { return s.putJSON(bucketPools, p.Name, p) }
func (s *store) deletePool(name string) error          { return s.deleteKey(bucketPools, name) }

// hasPool reports whether this server's database holds pool name.
func (s *store) hasPool(name string) bool {
	found := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		found = tx.Bucket(bucketPools).Get([]byte(name)) != nil
		return nil
	})
	return found
}
func (s *store) putMember(m *member) error { return s.putJSON(bucketMembers, m.ID, m) }

// deleteMember forgets a member, and the egress state a claim of it may
// have sealed.
func (s *store) deleteMember(id string) error {
	return s.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketEgress).Delete([]byte(id)); err != nil {
			return err
		}
		return tx.Bucket(bucketMembers).Delete([]byte(id))
	})
}

func (s *store) listPools() ([]api.CreatePoolRequest, error) {
	return listBucket[api.CreatePoolRequest](s, bucketPools, "pool")
}

func (s *store) listMembers() ([]*member, error) {
	return listBucket[*member](s, bucketMembers, "pool member")
}

// listBucket decodes every value of bucket as a T.
func listBucket[T any](s *store, bucket []byte, what string) ([]T, error) {
	var out []T
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			var x T
			if err := json.Unmarshal(v, &x); err != nil {
				return fmt.Errorf("%s %s: %w", what, k, err)
			}
			out = append(out, x)
			return nil
		})
	})
	return out, err
}

// claimMember turns member id into the sandbox r in one transaction: a
// crash leaves either the member or the sandbox, never both or neither.
func (s *store) claimMember(id string, r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if s.isShared(r) {
		// The member's shared record becomes the sandbox's in one write,
		// which fails when another replica claimed it first.
		ctx, cancel := sharedCtx()
		defer cancel()
		err := s.shared.ClaimMember(ctx, sharedRecord(r, b))
		if errors.Is(err, errdefs.ErrConflict) {
			return err
		}
		return sharedErr("claim pool member "+id, err)
	}
	return s.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketMembers).Delete([]byte(id)); err != nil {
			return err
		}
		return tx.Bucket(bucketSandboxes).Put([]byte(r.ID), b)
	})
}
