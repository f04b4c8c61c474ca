package hybox

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	if d := parseRetryAfter("3", time.Unix(0, 0)); d.Seconds() != 3 {
		t.Errorf("seconds: %v", d)
	}
	if d := parseRetryAfter("Thu, 01 Jan 1970 00:00:10 GMT", time.Unix(0, 0)); d.Seconds() != 10 {
		t.Errorf("date: %v", d)
	}
	for _, v := range []string{"", "-1", "soon"} {
		if d := parseRetryAfter(v, time.Unix(0, 0)); d != 0 {
			t.Errorf("%q: %v", v, d)
		}
	}
}

func TestEvents(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		n       int
		wantErr error
	}{
		{"events", "{\"type\":\"init\",\"text\":\"x\"}\n\ndata: {\"type\":\"stdout\",\"text\":\"a\"}\n\n", 2, nil},
		{"malformed", "{\"type\":\"init\"}\n\n{not json}\n\n", 1, ErrMalformedEvent},
		{"wrong type", "{\"type\":\"stdout\",\"text\":3}\n\n", 0, ErrMalformedEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			var got error
			for _, err := range events(io.NopCloser(strings.NewReader(tt.in))) {
				if err != nil {
					got = err
					break
				}
				n++
			}
			if n != tt.n || !errors.Is(got, tt.wantErr) || (tt.wantErr == nil) != (got == nil) {
				t.Errorf("%d events, error %v; want %d, %v", n, got, tt.n, tt.wantErr)
			}
		})
	}
}
