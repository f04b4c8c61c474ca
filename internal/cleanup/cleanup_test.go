package cleanup

import (
	"slices"
	"testing"
)

func TestCleanRunsInReverseOnce(t *testing.T) {
	var got []int
	cu := Make(func() { got = append(got, 1) })
	cu.Add(func() { got = append(got, 2) })
	cu.Add(func() { got = append(got, 3) })
	cu.Clean()
	cu.Clean()
	if want := []int{3, 2, 1}; !slices.Equal(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
}

func TestReleaseKeepsEverything(t *testing.T) {
	var got []int
	cu := Make(func() { got = append(got, 1) })
	cu.Add(func() { got = append(got, 2) })
	undo := cu.Release()
	cu.Clean()
	if len(got) != 0 {
		t.Fatalf("released cleanup ran %v", got)
	}
	undo()
	if want := []int{2, 1}; !slices.Equal(got, want) {
		t.Fatalf("released undo ran %v, want %v", got, want)
	}
}

func TestZeroValue(t *testing.T) {
	var cu Cleanup
	ran := false
	cu.Add(func() { ran = true })
	cu.Clean()
	if !ran {
		t.Fatal("zero Cleanup did not run its function")
	}
}
