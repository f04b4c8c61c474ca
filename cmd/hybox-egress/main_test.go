package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunRefuses: usage errors exit 2, a configuration that is missing or
// incomplete exits 1 with the reason, before anything is installed.
func TestRunRefuses(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "agent.json")
	if err := os.WriteFile(bad, []byte(`{"id":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		code int
		say  string
	}{
		{"NoCommand", nil, 2, "usage"},
		{"UnknownCommand", []string{"bogus"}, 2, "unknown command"},
		{"NoConfig", []string{"init"}, 1, "--config is required"},
		{"MissingFile", []string{"serve", "--config", filepath.Join(t.TempDir(), "none"), "--listen", "10.0.0.1"}, 1, "no such file"},
		{"Incomplete", []string{"init", "--config", bad}, 1, "key"},
		{"BadLogLevel", []string{"init", "--log-level", "loud"}, 2, "log-level"},
		{"BadFirewall", []string{"init", "--firewall", "pf"}, 2, "--firewall"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := run(tt.args, &out); code != tt.code || !strings.Contains(out.String(), tt.say) {
				t.Fatalf("exit %d, output %q; want %d saying %q", code, out.String(), tt.code, tt.say)
			}
		})
	}
}
