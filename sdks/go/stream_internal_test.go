package hybox

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

func readAll(t testing.TB, in string) ([]api.Event, []error) {
	er := newEventReader(strings.NewReader(in))
	var evs []api.Event
	var errs []error
	for range 1000 {
		ev, err := er.next()
		if errors.Is(err, io.EOF) {
			return evs, errs
		}
		if err != nil {
			errs = append(errs, err)
			if !errors.Is(err, ErrMalformedEvent) {
				return evs, errs
			}
			continue
		}
		evs = append(evs, ev)
	}
	t.Fatalf("no end after 1000 events")
	return nil, nil
}

func TestEventReader(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		types []api.EventType
		texts []string
		bad   int
	}{
		{name: "blank-line separated", in: `{"type":"init","text":"id1"}` + "\n\n" + `{"type":"stdout","text":"a"}` + "\n\n",
			types: []api.EventType{"init", "stdout"}, texts: []string{"id1", "a"}},
		{name: "sse data prefix", in: "data: {\"type\":\"stdout\",\"text\":\"x\"}\n\ndata:{\"type\":\"stderr\",\"text\":\"y\"}\n\n",
			types: []api.EventType{"stdout", "stderr"}, texts: []string{"x", "y"}},
		{name: "other sse fields and comments", in: ": keep-alive\nevent: message\nid: 3\nretry: 10\ndata: {\"type\":\"ping\"}\n\n",
			types: []api.EventType{"ping"}, texts: []string{""}},
		{name: "one object per line", in: "{\"type\":\"stdout\",\"text\":\"1\"}\n{\"type\":\"stdout\",\"text\":\"2\"}\n",
			types: []api.EventType{"stdout", "stdout"}, texts: []string{"1", "2"}},
		{name: "an object over several data lines", in: "data: {\"type\":\"stdout\",\ndata: \"text\":\"joined\"}\n\n",
			types: []api.EventType{"stdout"}, texts: []string{"joined"}},
		{name: "no final blank line", in: `{"type":"execution_complete","execution_time":3}`, types: []api.EventType{"execution_complete"}, texts: []string{""}},
		{name: "crlf", in: "{\"type\":\"stdout\",\"text\":\"w\"}\r\n\r\n", types: []api.EventType{"stdout"}, texts: []string{"w"}},
		{name: "garbage is skipped", in: "not json\n\n{\"type\":\"stdout\",\"text\":\"ok\"}\n\n", types: []api.EventType{"stdout"}, texts: []string{"ok"}, bad: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, errs := readAll(t, tt.in)
			if len(errs) != tt.bad {
				t.Fatalf("errors %v, want %d", errs, tt.bad)
			}
			if len(evs) != len(tt.types) {
				t.Fatalf("events %+v, want types %v", evs, tt.types)
			}
			for i, ev := range evs {
				if ev.Type != tt.types[i] || ev.Text != tt.texts[i] {
					t.Errorf("event %d = %+v, want %s %q", i, ev, tt.types[i], tt.texts[i])
				}
			}
		})
	}
}

func FuzzEventReader(f *testing.F) {
	f.Add("data: {\"type\":\"stdout\",\"text\":\"x\"}\n\n")
	f.Add("{\"type\":\"result\",\"results\":{\"text\":\"2\",\"image/png\":\"iVBOR\"}}\n\n")
	f.Add(": c\n\n\n{}\n{")
	f.Fuzz(func(t *testing.T, in string) {
		evs, errs := readAll(t, in)
		for _, err := range errs {
			if !errors.Is(err, ErrMalformedEvent) {
				t.Fatalf("a read of a string failed with %v", err)
			}
		}
		_ = evs
	})
}

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
