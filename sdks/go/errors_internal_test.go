package hybox

import (
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
