package server

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// Writes made at once are all committed, fewer transactions than writes
// when they overlap, and a write whose function fails fails alone.
func TestGroupCommit(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "db"), nil, slog.Default())
	require.NoError(t, err)
	defer st.close()
	const n = 64
	bad := errors.New("this write fails")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.update(func(tx *bolt.Tx) error {
				if i%10 == 3 {
					return bad
				}
				return tx.Bucket(bucketPools).Put(fmt.Appendf(nil, "k%02d", i), []byte("v"))
			})
		}()
	}
	wg.Wait()
	st.commits.mu.Lock()
	txs := st.commits.commits
	st.commits.mu.Unlock()
	assert.Less(t, txs, n, "overlapping writes share transactions")
	for i, err := range errs {
		if i%10 == 3 {
			assert.ErrorIs(t, err, bad, "write %d", i)
		} else {
			assert.NoError(t, err, "write %d", i)
		}
	}
	require.NoError(t, st.db.View(func(tx *bolt.Tx) error {
		for i := range n {
			v := tx.Bucket(bucketPools).Get(fmt.Appendf(nil, "k%02d", i))
			if i%10 == 3 {
				assert.Nil(t, v, "the failed write %d wrote nothing", i)
			} else {
				assert.Equal(t, []byte("v"), v, "write %d", i)
			}
		}
		return nil
	}))
	t.Logf("%d writes in %d write transactions", n, txs)
}
