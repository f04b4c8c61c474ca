package jsguest

import (
	"context"
	"testing"
)

// discard is an execd.Output that drops everything.
type discard struct{}

func (discard) Stdout([]byte)            {}
func (discard) Stderr([]byte)            {}
func (discard) Result(map[string]string) {}

func BenchmarkNewInterpreter(b *testing.B) {
	m := newManager(b, Options{})
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		it, err := m.NewInterpreter(ctx, nil, "/", 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		_ = it.Close()
	}
}

func BenchmarkRunOnePlusOne(b *testing.B) {
	m := newManager(b, Options{})
	ctx := context.Background()
	it, err := m.NewInterpreter(ctx, nil, "/", 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer it.Close()
	b.ResetTimer()
	for b.Loop() {
		if ee, err := it.Run(ctx, "1 + 1", discard{}); err != nil || ee != nil {
			b.Fatal(err, ee)
		}
	}
}
