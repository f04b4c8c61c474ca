package hybox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// TestFork: copies have the source's variables and files, and are
// independent of it and of each other.
func TestFork(t *testing.T) {
	c := newClient(t, server(t))
	ctx := ctxFor(t, 2*time.Minute)
	sb := newSandbox(t, c, api.CreateSandboxRequest{Metadata: api.Metadata{"suite": "fork"}})
	if _, err := sb.RunCode(ctx, hybox.CodeOf("python", "x = 1\nopen('/workspace/f', 'w').write('src')"), nil); err != nil {
		t.Fatal(err)
	}
	forks, err := sb.Fork(ctx, api.ForkSandboxRequest{Count: 2, Metadata: api.Metadata{"copy": "yes"}})
	if err != nil || len(forks) != 2 {
		t.Fatalf("fork: %v %d", err, len(forks))
	}
	for _, f := range forks {
		t.Cleanup(func() { _ = f.Kill(ctx) })
		if f.Info().Metadata["suite"] != "fork" || f.Info().Metadata["copy"] != "yes" {
			t.Errorf("metadata of the copy: %v", f.Info().Metadata)
		}
	}
	result := func(s *hybox.Sandbox, src string) string {
		t.Helper()
		x, err := s.RunCode(ctx, hybox.CodeOf("python", src), nil)
		if err != nil || x.Error != nil || len(x.Results) != 1 {
			t.Fatalf("%s: %v %+v", src, err, x)
		}
		return x.Results[0]["text"]
	}
	result(forks[0], "x = 2\nopen('/workspace/f', 'w').write('copy')\nx")
	if got := result(sb, "(x, open('/workspace/f').read())"); got != "(1, 'src')" {
		t.Errorf("source after the copy's write: %s", got)
	}
	if got := result(forks[1], "(x, open('/workspace/f').read())"); got != "(1, 'src')" {
		t.Errorf("other copy: %s", got)
	}
	if _, err := sb.Fork(ctx, api.ForkSandboxRequest{Count: 17}); !errors.Is(err, hybox.ErrInvalid) {
		t.Errorf("count 17: %v", err)
	}
}
