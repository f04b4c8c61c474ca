package server

import (
	"errors"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// Group commit. Every write of the store is one bbolt transaction, and
// every transaction ends in an fsync (1-3 ms here): fifty sandboxes created
// at once would wait for fifty fsyncs one after another. So writes go
// through update: a write that finds none being committed commits at once,
// alone, with no added delay; writes that arrive while one is committed
// wait, and the next commit takes all of them in one transaction (one
// fsync). Each write's function must be idempotent (a put or a delete):
// when one fails, the transaction is rolled back and done again without
// it.

// pendingWrite is a write waiting for its commit.
type pendingWrite struct {
	fn   func(*bolt.Tx) error
	done chan error
}

// committer queues the store's writes.
type committer struct {
	mu         sync.Mutex
	queue      []*pendingWrite
	committing bool // a goroutine is committing; it will take the queue too
	commits    int  // transactions committed (for tests)
}

// update runs fn in a write transaction, shared with the writes that wait
// with it, and returns when that transaction is committed.
//
// # Errors
// fn's error (the others' writes are committed without it), or the
// commit's.
func (s *store) update(fn func(*bolt.Tx) error) error {
	w := &pendingWrite{fn: fn, done: make(chan error, 1)}
	c := &s.commits
	c.mu.Lock()
	c.queue = append(c.queue, w)
	if c.committing {
		c.mu.Unlock()
		return <-w.done
	}
	c.committing = true
	c.mu.Unlock()
	for {
		c.mu.Lock()
		batch := c.queue
		c.queue = nil
		if len(batch) == 0 {
			c.committing = false
			c.mu.Unlock()
			break
		}
		c.mu.Unlock()
		s.commit(batch)
	}
	return <-w.done
}

// commit writes batch in one transaction and answers each write.
func (s *store) commit(batch []*pendingWrite) {
	for len(batch) > 0 {
		failed := -1
		s.commits.mu.Lock()
		s.commits.commits++
		s.commits.mu.Unlock()
		err := s.db.Update(func(tx *bolt.Tx) error {
			for i, w := range batch {
				if err := w.fn(tx); err != nil {
					failed = i
					return &writeError{err}
				}
			}
			return nil
		})
		var we *writeError
		if failed < 0 || !errors.As(err, &we) {
			for _, w := range batch {
				w.done <- err // nil, or the commit's own failure
			}
			return
		}
		batch[failed].done <- we.err
		batch = append(batch[:failed:failed], batch[failed+1:]...)
	}
}

// writeError marks the error of one write's function, as opposed to the
// commit's.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
