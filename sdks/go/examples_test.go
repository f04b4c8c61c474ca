package hybox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's quickstart is examples/quickstart/main.go, verbatim.
func TestReadmeQuickstart(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("examples", "quickstart", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(src)+"```") {
		t.Fatal("README.md's quickstart differs from examples/quickstart/main.go")
	}
}

// Every example builds and runs as written against a real server.
func TestExamples(t *testing.T) {
	srv := server(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "./examples/...")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the examples: %v\n%s", err, out)
	}
	readme, _ := os.ReadFile("README.md")
	tests := []struct {
		name string
		want []string // lines the output must have
	}{
		{"quickstart", nil}, // checked against the README's output below
		{"codeinterpreter", []string{"    out: loaded 8 values", "    result: 3.875", "    result: 4",
			"    error: ZeroDivisionError: float division by zero", `    result: '{"mean": 3.875, "max": 9}'`}},
		{"egress", []string{"policy (enforcing, default deny):", "  allow *.githubusercontent.com", "  deny  10.0.0.0/8",
			"  allow api.github.com", "vault revision 1:", "  credential github (inline; its value is never returned)",
			"  binding github-api: bearer for [api.github.com]"}},
		{"webserver", nil}, // says it skipped on a wasm-only server
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bin, tt.name))
			cmd.Env = append(os.Environ(), "HYBOX_DOMAIN="+srv.URL, "HYBOX_API_KEY="+srv.APIKey, "GITHUB_TOKEN=")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", tt.name, err, out)
			}
			switch tt.name {
			case "quickstart":
				if !strings.Contains(string(readme), "It prints:\n\n```\n"+string(out)+"```") {
					t.Errorf("the quickstart printed\n%s\nwhich is not what the README says", out)
				}
			case "webserver":
				if !strings.HasPrefix(string(out), "skipped: ") && !strings.Contains(string(out), "hello from a sandbox") {
					t.Errorf("webserver printed\n%s", out)
				}
			}
			for _, w := range tt.want {
				if !strings.Contains("\n"+string(out), "\n"+w+"\n") {
					t.Errorf("%s printed\n%s\nwithout the line %q", tt.name, out, w)
				}
			}
		})
	}
}
