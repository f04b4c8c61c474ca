//go:build race

package oci

import (
	"testing"

	"github.com/petermattis/goid"
)

// Under -race, go-cni guards its state with go-deadlock, which tells
// goroutines apart by goid. A goid that does not know this Go's runtime
// returns the same id everywhere, so two concurrent network attaches
// look like one goroutine taking a read lock twice, and go-deadlock ends
// the test binary with exit status 2. This pins the fix.
func TestGoroutineIDsDistinct(t *testing.T) {
	ids := make(chan int64, 2)
	for range 2 {
		go func() { ids <- goid.Get() }()
	}
	a, b := <-ids, <-ids
	if a == b {
		t.Fatalf("goid.Get() returned %d in two goroutines: go-deadlock (go-cni under -race) would report every concurrent lock as recursive", a)
	}
}
