package wsh

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// signalWriter closes first on its first write.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	first chan struct{}
	once  sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(func() { close(w.first) })
	return w.buf.Write(p)
}

func TestOutputStreams(t *testing.T) {
	_, root := workspace(t)
	w := &signalWriter{first: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan int, 1)
	go func() {
		code, _ := Run(ctx, Options{Root: root}, "echo early; cat /work/a.txt | head -n 1; sleep 5; echo late", "/", nil, nil, w, w)
		done <- code
	}()
	select {
	case <-w.first:
	case <-time.After(3 * time.Second):
		t.Fatal("no output before the script ended")
	}
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		w.mu.Lock()
		got := w.buf.String()
		w.mu.Unlock()
		if strings.Contains(got, "alpha\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pipeline output missing: %q", got)
		}
	}
	select {
	case <-done:
		t.Fatal("script ended early")
	default:
	}
	cancel()
	<-done
	w.mu.Lock()
	defer w.mu.Unlock()
	if got := w.buf.String(); !strings.HasPrefix(got, "early\nalpha\n") || strings.Contains(got, "late") {
		t.Errorf("output %q", got)
	}
}

func TestConcurrentWriters(t *testing.T) {
	_, root := workspace(t)
	// One non-thread-safe buffer for both streams, written by both sides of
	// pipelines and by background jobs; -race checks the locking.
	src := `(echo a >&2; seq 50) | (cat > /dev/null; echo c >&2) & { yes | head -n 100 >&2; } & wait; echo done`
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			var buf bytes.Buffer
			code, err := Run(context.Background(), Options{Root: root}, src, "/work", nil, nil, &buf, &buf)
			if err != nil || code != 0 || !strings.HasSuffix(buf.String(), "done\n") {
				t.Errorf("code %d err %v out %q", code, err, buf.String())
			}
		})
	}
	wg.Wait()
}

func TestUnreadStdinDoesNotBlock(t *testing.T) {
	_, root := workspace(t)
	big := strings.NewReader(strings.Repeat("x", 4<<20))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code, err := Run(ctx, Options{Root: root}, "head -c 3; echo", "/", nil, big, nil, nil)
	if err != nil || code != 0 {
		t.Fatalf("code %d err %v", code, err)
	}
}
