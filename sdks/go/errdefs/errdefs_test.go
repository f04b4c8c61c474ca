package errdefs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

func TestHTTP(t *testing.T) {
	secret := errors.New("dial unix /run/secret.sock: refused")
	tests := []struct {
		name   string
		err    error
		status int
		code   api.ErrorCode
		msg    string // exact message; "" = do not check
	}{
		{"coded", New(api.ErrorCodeCONTEXTNOTFOUND, "context %s", "c1"), 404, api.ErrorCodeCONTEXTNOTFOUND, "context c1"},
		{"wrapped coded keeps context", fmt.Errorf("sandbox s1: %w", New(api.ErrorCodeINVALIDSTATE, "paused")), 409, api.ErrorCodeINVALIDSTATE, "sandbox s1: paused"},
		{"kind", fmt.Errorf("image x: %w", ErrNotFound), 404, api.ErrorCodeNOTFOUND, "image x: not found"},
		{"kind 5xx hides text", fmt.Errorf("%w: %v", ErrUnavailable, secret), 503, api.ErrorCodeUNAVAILABLE, fixed5xx[ErrUnavailable]},
		{"coded 503 keeps its context", fmt.Errorf("sandbox s1 is paused: %w", New(api.ErrorCodeUNAVAILABLE, "unavailable")), 503, api.ErrorCodeUNAVAILABLE, "sandbox s1 is paused: unavailable"},
		{"coded 500 keeps only its own message", fmt.Errorf("%v: %w", secret, New(api.ErrorCodeINTERNALERROR, "internal error")), 500, api.ErrorCodeINTERNALERROR, "internal error"},
		{"unknown code is internal", New("NO_SUCH_CODE", "x"), 500, api.ErrorCodeINTERNALERROR, "internal error"},
		{"fs not exist", fmt.Errorf("open a: %w", fs.ErrNotExist), 404, api.ErrorCodeFILENOTFOUND, ""},
		{"fs exist", fs.ErrExist, 409, api.ErrorCodeFILEEXISTS, ""},
		{"fs permission", fs.ErrPermission, 403, api.ErrorCodePERMISSIONDENIED, ""},
		{"deadline", context.DeadlineExceeded, 504, api.ErrorCodeTIMEOUT, fixed5xx[ErrTimeout]},
		{"plain", secret, 500, api.ErrorCodeINTERNALERROR, "internal error"},
		{"upgrade", New(api.ErrorCodeUPGRADEREQUIRED, "use 13"), 426, api.ErrorCodeUPGRADEREQUIRED, "use 13"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, body := HTTP(tt.err)
			if st != tt.status || body.Code != tt.code {
				t.Fatalf("HTTP = %d %s, want %d %s", st, body.Code, tt.status, tt.code)
			}
			if tt.msg != "" && body.Message != tt.msg {
				t.Errorf("message %q, want %q", body.Message, tt.msg)
			}
			if st >= 500 && strings.Contains(body.Message, "secret.sock") {
				t.Errorf("a 5xx body carries an internal detail: %q", body.Message)
			}
		})
	}
}

func TestEveryCodeHasAKindAndStatus(t *testing.T) {
	for _, c := range Codes() {
		if Kind(c) == nil {
			t.Errorf("%s has no kind", c)
		}
		st := Status(c)
		if st < 400 || st > 599 {
			t.Errorf("%s has status %d", c, st)
		}
		e := New(c, "x")
		if !errors.Is(e, Kind(c)) {
			t.Errorf("errors.Is(New(%s), its kind) is false", c)
		}
		if got, _ := HTTP(e); got != st {
			t.Errorf("HTTP(New(%s)) = %d, want %d", c, got, st)
		}
	}
}

func TestFromResponse(t *testing.T) {
	err := FromResponse(429, &api.Error{Code: api.ErrorCodeTOOMANYEXECUTIONS, Message: "busy"}, "req-1", "3")
	var e *Error
	if !errors.As(err, &e) || e.Status != 429 || e.RequestID != "req-1" || e.RetryAfter != 3*time.Second {
		t.Fatalf("FromResponse = %#v", err)
	}
	if !errors.Is(err, ErrRateLimited) || !Retryable(err) {
		t.Error("a 429 is ErrRateLimited and retryable")
	}
	// A code the table lacks falls back to the status.
	err = FromResponse(404, &api.Error{Code: "SOMETHING_NEW", Message: "gone"}, "", "")
	if !errors.Is(err, ErrNotFound) || Retryable(err) {
		t.Errorf("unknown code with 404: %v", err)
	}
	// No body at all.
	err = FromResponse(503, nil, "", time.Now().Add(2*time.Second).UTC().Format(http.TimeFormat))
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &e) || e.RetryAfter <= 0 || e.Message == "" {
		t.Errorf("bare 503: %#v", err)
	}
	if errors.Is(FromResponse(409, &api.Error{Code: api.ErrorCodeCONTEXTBUSY}, "", ""), ErrNotFound) {
		t.Error("a 409 is not ErrNotFound")
	}
}

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Length", "99")
	Write(rec, fmt.Errorf("path a: %w", New(api.ErrorCodeINVALIDPATH, "invalid path")))
	if rec.Code != 400 || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Content-Length") != "" {
		t.Fatalf("status %d headers %v", rec.Code, rec.Header())
	}
	var body api.Error
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Code != api.ErrorCodeINVALIDPATH || body.Message != "path a: invalid path" {
		t.Errorf("body %q (%v)", rec.Body.String(), err)
	}
}

func TestDescribeJSON(t *testing.T) {
	type inner struct {
		Egress []string `json:"egress"`
	}
	type doc struct {
		Image struct {
			URI string `json:"uri"`
		} `json:"image"`
		Policy inner `json:"networkPolicy"`
		N      int   `json:"n"`
	}
	tests := []struct{ in, want string }{
		{`{"image":"x"}`, "image: want an object, got a string"},
		{`{"networkPolicy":{"egress":{}}}`, "networkPolicy.egress: want an array, got an object"},
		{`{"n":"x"}`, "n: want an integer, got a string"},
		{`{"n":1.5}`, "n: want an integer, got a number 1.5"},
		{`{"image":`, "the JSON document ends early"},
		{``, "the body is empty; a JSON document is required"},
		{`{"image" 1}`, "malformed JSON at byte 10: invalid character '1' after object key"},
	}
	for _, tt := range tests {
		var d doc
		err := json.NewDecoder(strings.NewReader(tt.in)).Decode(&d)
		if err == nil {
			t.Fatalf("%s decoded", tt.in)
		}
		if got := DescribeJSON(err); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.in, got, tt.want)
		}
	}
	d := json.NewDecoder(strings.NewReader(`{"x":1}`))
	d.DisallowUnknownFields()
	var v struct{}
	if got := DescribeJSON(d.Decode(&v)); got != `unknown field "x"` {
		t.Errorf("unknown field: %q", got)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, fmt.Errorf("queue full: %w", New(api.ErrorCodeTOOMANYEXECUTIONS, "too many")))
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("429: status %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	rec = httptest.NewRecorder()
	Write(rec, &Error{Code: api.ErrorCodeUNAVAILABLE, Message: "restarting", RetryAfter: 1500 * time.Millisecond})
	if rec.Header().Get("Retry-After") != "2" {
		t.Errorf("503 with a wait: Retry-After %q, want 2", rec.Header().Get("Retry-After"))
	}
	rec = httptest.NewRecorder()
	Write(rec, New(api.ErrorCodeSANDBOXNOTFOUND, "gone"))
	if rec.Header().Get("Retry-After") != "" {
		t.Errorf("404 carries Retry-After %q", rec.Header().Get("Retry-After"))
	}
}

func TestStatusKind(t *testing.T) {
	for status, want := range map[int]error{400: ErrInvalid, 422: ErrInvalid, 404: ErrNotFound, 409: ErrConflict,
		429: ErrRateLimited, 501: ErrNotSupported, 502: ErrUnreachable, 503: ErrUnavailable, 504: ErrTimeout,
		408: ErrTimeout, 418: ErrInvalid, 599: ErrInternal, 200: nil, 302: nil} {
		if got := StatusKind(status); got != want {
			t.Errorf("StatusKind(%d) = %v, want %v", status, got, want)
		}
	}
}
