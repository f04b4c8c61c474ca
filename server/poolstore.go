package server

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// putJSON stores v under key in bucket.
func (s *store) putJSON(bucket []byte, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put([]byte(key), b) })
}

func (s *store) deleteKey(bucket []byte, key string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Delete([]byte(key)) })
}

func (s *store) putPool(p api.CreatePoolRequest) error { return s.putJSON(bucketPools, p.Name, p) }
func (s *store) deletePool(name string) error          { return s.deleteKey(bucketPools, name) }
func (s *store) putMember(m *member) error             { return s.putJSON(bucketMembers, m.ID, m) }

// deleteMember forgets a member, and the egress state a claim of it may
// have sealed.
func (s *store) deleteMember(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketEgress).Delete([]byte(id)); err != nil {
			return err
		}
		return tx.Bucket(bucketMembers).Delete([]byte(id))
	})
}

func (s *store) listPools() ([]api.CreatePoolRequest, error) {
	var out []api.CreatePoolRequest
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPools).ForEach(func(k, v []byte) error {
			var p api.CreatePoolRequest
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("pool %s: %w", k, err)
			}
			out = append(out, p)
			return nil
		})
	})
	return out, err
}

func (s *store) listMembers() ([]*member, error) {
	var out []*member
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMembers).ForEach(func(k, v []byte) error {
			m := &member{}
			if err := json.Unmarshal(v, m); err != nil {
				return fmt.Errorf("pool member %s: %w", k, err)
			}
			out = append(out, m)
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
	return s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketMembers).Delete([]byte(id)); err != nil {
			return err
		}
		return tx.Bucket(bucketSandboxes).Put([]byte(r.ID), b)
	})
}
