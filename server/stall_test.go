package server

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// Busy loops in more sandboxes than there are cores must not stall the
// server or the other sandboxes: in the interpreter's own loop, and in a
// loop in C that polls no interrupt (the loop guard leaves compiled code
// every few thousand iterations, so Go's scheduler gets its cores back).
func TestBusyLoopsDoNotStallServer(t *testing.T) {
	for _, c := range []struct{ name, language, code string }{
		{"python", "python", "while True: pass"},
		{"python in C", "python", "sum(range(10**15))"},
		{"javascript", "javascript", "while (true) {}"},
		{"javascript in C", "javascript", "new Array(4e9).join('').length"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, "", harnessOpts{execTimeout: 4 * time.Second})
			var busy []api.Sandbox // one more than the server has cores
			for range runtime.GOMAXPROCS(0) + 1 {
				busy = append(busy, h.create(nil))
			}
			calm := h.create(nil)
			require.Nil(t, h.code(calm.ID, "javascript", "0").err)
			var (
				wg        sync.WaitGroup
				mu        sync.Mutex
				firstBusy time.Time
			)
			for _, sb := range busy {
				wg.Add(1)
				go func(id string) {
					defer wg.Done()
					o := h.code(id, c.language, c.code)
					assert.NotNil(t, o.err)
					mu.Lock()
					if firstBusy.IsZero() {
						firstBusy = time.Now()
					}
					mu.Unlock()
				}(sb.ID)
			}
			time.Sleep(500 * time.Millisecond)
			o := h.code(calm.ID, "javascript", "40+2")
			calmDone := time.Now()
			require.Nil(t, o.err)
			assert.Equal(t, "42", o.results[0]["text"])
			st, _, _ := h.do("GET", "/health", nil)
			assert.Equal(t, 200, st)
			wg.Wait()
			// An ordering, not a speed, assertion: the calm sandbox answered
			// before any busy loop was stopped by its timeout.
			assert.True(t, calmDone.Before(firstBusy), "the server stalled behind busy guests")
		})
	}
}

// TestDeleteStopsStuckCell: deleting a sandbox whose cell loops in C
// (where no interrupt is polled) answers and ends the cell, without
// waiting for the cell's timeout (ten minutes here); other sandboxes
// are unaffected.
func TestDeleteStopsStuckCell(t *testing.T) {
	for _, c := range []struct{ language, code string }{
		{"python", "sum(range(10**15))"},
		{"javascript", "new Array(4e9).join('').length"},
	} {
		t.Run(c.language, func(t *testing.T) {
			h := newHarness(t, "", harnessOpts{execTimeout: 10 * time.Minute})
			stuck, other := h.create(nil), h.create(nil)
			require.Nil(t, h.code(other.ID, c.language, "kept = 7").err)
			done := make(chan outcome, 1)
			go func() { done <- h.code(stuck.ID, c.language, c.code) }()
			time.Sleep(500 * time.Millisecond) // the cell is in its loop
			deleted := make(chan int, 1)
			go func() {
				st, body, _ := h.do("DELETE", "/v1/sandboxes/"+stuck.ID, nil)
				if st != 204 {
					t.Errorf("delete: %d %s", st, body)
				}
				deleted <- st
			}()
			select {
			case <-deleted:
			case <-time.After(time.Minute):
				t.Fatal("the delete has not answered after a minute")
			}
			select {
			case o := <-done:
				// The cell ran and was stopped (a cell refused because the
				// delete came first would fail otherwise).
				require.NotNil(t, o.err, "the stuck cell ended without an error")
				assert.Contains(t, o.err.EValue, "state lost", "the stuck cell's error")
			case <-time.After(time.Minute):
				t.Fatal("the stuck cell still runs a minute after its sandbox was deleted")
			}
			o := h.code(other.ID, c.language, "kept")
			require.Nil(t, o.err)
			assert.Equal(t, "7", o.results[0]["text"])
		})
	}
}
