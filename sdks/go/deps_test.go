package hybox_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A user's `go get` pulls the standard library and one WebSocket library,
// nothing of the server (no containerd, wazero or gin).
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasPrefix(p, "github.com/hybox-dev/hybox/sdks/go") && !strings.HasPrefix(p, "github.com/coder/websocket") {
			t.Errorf("the SDK depends on %s", p)
		}
	}
	mods, err := exec.Command("go", "list", "-m", "all").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	if n := len(strings.Split(strings.TrimSpace(string(mods)), "\n")); n != 2 {
		t.Errorf("the SDK's module graph has %d modules, want itself and github.com/coder/websocket:\n%s", n, mods)
	}
}
