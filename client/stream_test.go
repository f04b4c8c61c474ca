package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func readAll(t testing.TB, r io.Reader) ([]Event, []error) {
	t.Helper()
	er := NewEventReader(r)
	var evs []Event
	var errs []error
	for i := 0; i < 10000; i++ {
		ev, err := er.Next()
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
	t.Fatal("reader did not reach EOF")
	return nil, nil
}

func TestEventReader(t *testing.T) {
	initEv := Event{Type: "init", Text: "abc"}
	out := Event{Type: "stdout", Text: "hello"}
	done := Event{Type: "execution_complete", ExecutionTime: 5}
	tests := []struct {
		name    string
		in      string
		want    []Event
		wantErr int // number of ErrMalformedEvent errors
	}{
		{name: "empty", in: ""},
		{name: "only blank lines", in: "\n\n\r\n  \n"},
		{name: "plain", in: `{"type":"init","text":"abc"}` + "\n\n" + `{"type":"stdout","text":"hello"}` + "\n\n", want: []Event{initEv, out}},
		{name: "data prefix", in: `data: {"type":"init","text":"abc"}` + "\n\n" + `data:{"type":"stdout","text":"hello"}` + "\n\n", want: []Event{initEv, out}},
		{name: "crlf", in: `{"type":"init","text":"abc"}` + "\r\n\r\n" + `data: {"type":"stdout","text":"hello"}` + "\r\n\r\n", want: []Event{initEv, out}},
		{name: "no trailing blank line", in: `{"type":"init","text":"abc"}` + "\n\n" + `{"type":"stdout","text":"hello"}`, want: []Event{initEv, out}},
		{name: "ndjson without blank lines", in: `{"type":"init","text":"abc"}` + "\n" + `{"type":"stdout","text":"hello"}` + "\n", want: []Event{initEv, out}},
		{name: "sse fields and comments ignored", in: ": keep-alive\nevent: message\nid: 7\nretry: 100\ndata: {\"type\":\"init\",\"text\":\"abc\"}\n\n", want: []Event{initEv}},
		{name: "multi-line data joined", in: "data: {\"type\":\"stdout\",\ndata: \"text\":\"hello\"}\n\n", want: []Event{out}},
		{name: "pretty printed", in: "{\n  \"type\": \"execution_complete\",\n  \"execution_time\": 5\n}\n\n", want: []Event{done}},
		{name: "text containing blank-line escapes", in: `{"type":"stdout","text":"a\n\nb"}` + "\n\n", want: []Event{{Type: "stdout", Text: "a\n\nb"}}},
		{name: "error event", in: `{"type":"error","error":{"ename":"CommandExecError","evalue":"3","traceback":["x"]}}` + "\n\n",
			want: []Event{{Type: "error", Error: &ExecError{EName: "CommandExecError", EValue: "3", Traceback: []string{"x"}}}}},
		{name: "result", in: `{"type":"result","results":{"text":"42","image/png":"AAA"},"execution_count":2}` + "\n\n",
			want: []Event{{Type: "result", ExecutionCount: 2, Results: map[string]any{"text": "42", "image/png": "AAA"}}}},
		{name: "garbage then event", in: "not json\n\n" + `{"type":"init","text":"abc"}` + "\n\n", want: []Event{initEv}, wantErr: 1},
		{name: "array is malformed", in: "[1,2]\n\n" + `{"type":"init","text":"abc"}` + "\n\n", want: []Event{initEv}, wantErr: 1},
		{name: "truncated object at EOF", in: `{"type":"init","text":"abc"}` + "\n\n" + `{"type":"std`, want: []Event{initEv}, wantErr: 1},
		{name: "wrong field type", in: `{"type":"stdout","text":5}` + "\n\n" + `{"type":"init","text":"abc"}` + "\n\n", want: []Event{initEv}, wantErr: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range []struct {
				name string
				r    io.Reader
			}{
				{"whole", strings.NewReader(tt.in)},
				{"one byte at a time", iotest.OneByteReader(strings.NewReader(tt.in))},
			} {
				got, errs := readAll(t, r.r)
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("%s: events\n got %+v\nwant %+v", r.name, got, tt.want)
				}
				if len(errs) != tt.wantErr {
					t.Errorf("%s: errors = %v, want %d", r.name, errs, tt.wantErr)
				}
			}
		})
	}
}

func TestEventReaderTooLarge(t *testing.T) {
	big := `{"type":"stdout","text":"` + strings.Repeat("x", MaxEventBytes) + `"}`
	in := big + "\n\n" + `{"type":"init","text":"after"}` + "\n\n"
	got, errs := readAll(t, strings.NewReader(in))
	if len(errs) != 1 || !errors.Is(errs[0], ErrMalformedEvent) {
		t.Fatalf("errors = %v, want one ErrMalformedEvent", errs)
	}
	if len(got) != 1 || got[0].Text != "after" {
		t.Fatalf("events after the large one = %+v", got)
	}
}

func TestEventReaderReadError(t *testing.T) {
	boom := errors.New("connection reset")
	r := io.MultiReader(strings.NewReader(`{"type":"init","text":"a"}`+"\n\n"+`{"type":"std`), iotest.ErrReader(boom))
	er := NewEventReader(r)
	if ev, err := er.Next(); err != nil || ev.Text != "a" {
		t.Fatalf("first = %+v, %v", ev, err)
	}
	if _, err := er.Next(); !errors.Is(err, boom) {
		t.Fatalf("second error = %v, want the read error", err)
	}
	if _, err := er.Next(); !errors.Is(err, boom) {
		t.Fatalf("error not sticky: %v", err)
	}
}

func TestCollect(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantCode int
		wantOK   bool
		wantErr  error
		stdout   []string
	}{
		{name: "success", in: ev(`{"type":"init","text":"id1"}`, `{"type":"stdout","text":"a"}`, `{"type":"execution_complete","execution_time":4}`), wantOK: true, stdout: []string{"a"}},
		{name: "exit 3", in: ev(`{"type":"init","text":"id1"}`, `{"type":"error","error":{"ename":"CommandExecError","evalue":"3"}}`), wantCode: 3, wantOK: true},
		{name: "timeout", in: ev(`{"type":"init","text":"id1"}`, `{"type":"error","error":{"ename":"TimeoutError","evalue":"late"}}`)},
		{name: "cut short", in: ev(`{"type":"init","text":"id1"}`, `{"type":"stdout","text":"a"}`), wantErr: ErrIncomplete, stdout: []string{"a"}},
		{name: "error without object", in: ev(`{"type":"error","text":"bad"}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen int
			x, err := NewStream(io.NopCloser(strings.NewReader(tt.in))).Collect(func(Event) { seen++ })
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			code, ok := x.ExitCode()
			if code != tt.wantCode || ok != tt.wantOK {
				t.Errorf("ExitCode = %d, %v; want %d, %v", code, ok, tt.wantCode, tt.wantOK)
			}
			if !reflect.DeepEqual(x.Stdout, tt.stdout) {
				t.Errorf("stdout = %q, want %q", x.Stdout, tt.stdout)
			}
			if seen == 0 {
				t.Error("onEvent never called")
			}
			if strings.Contains(tt.in, `"init"`) && x.ID != "id1" {
				t.Errorf("ID = %q", x.ID)
			}
		})
	}
}

func ev(objs ...string) string { return strings.Join(objs, "\n\n") + "\n\n" }

func TestResultText(t *testing.T) {
	for _, tt := range []struct {
		name string
		res  map[string]any
		want string
		ok   bool
	}{
		{name: "renamed", res: map[string]any{"text": "1"}, want: "1", ok: true},
		{name: "mime", res: map[string]any{"text/plain": "2"}, want: "2", ok: true},
		{name: "image only", res: map[string]any{"image/png": "x"}},
		{name: "non-string", res: map[string]any{"text": 3.0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Event{Results: tt.res}.ResultText()
			if got != tt.want || ok != tt.ok {
				t.Errorf("got %q, %v", got, ok)
			}
		})
	}
}

// FuzzEventReader checks that the parser never panics or loops on any
// input, and that events written in either framing read back unchanged.
func FuzzEventReader(f *testing.F) {
	f.Add([]byte(`{"type":"init","text":"x"}`+"\n\n"), "hello", "world", true)
	f.Add([]byte("data: {\"type\":\"stdout\"}\n\n: c\n\nid: 1\n"), "a\n\nb", "data: x", false)
	f.Add([]byte("\r\n\r\n{\n}\n\n["), "{\"type\":", "\r", true)
	f.Fuzz(func(t *testing.T, raw []byte, text1, text2 string, prefix bool) {
		// Arbitrary input: must terminate without panicking.
		er := NewEventReader(bytes.NewReader(raw))
		for i := 0; ; i++ {
			if i > len(raw)+2 {
				t.Fatalf("more results than input bytes")
			}
			_, err := er.Next()
			if err != nil && !errors.Is(err, ErrMalformedEvent) {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("unexpected error: %v", err)
				}
				break
			}
		}

		// Well-formed events round-trip in both framings.
		want := []Event{
			{Type: "stdout", Text: text1},
			{Type: "stderr", Text: text2, Timestamp: 12},
			{Type: "error", Error: &ExecError{EName: text2, EValue: text1}},
		}
		var buf bytes.Buffer
		for _, e := range want {
			b, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			if prefix {
				buf.WriteString("data: ")
			}
			buf.Write(b)
			buf.WriteString("\n\n")
		}
		got, errs := readAll(t, &buf)
		if len(errs) > 0 {
			t.Fatalf("errors: %v", errs)
		}
		// json.Marshal replaces invalid UTF-8; compare against the same.
		for i := range want {
			b, _ := json.Marshal(want[i])
			want[i] = Event{}
			_ = json.Unmarshal(b, &want[i])
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
		}
	})
}
