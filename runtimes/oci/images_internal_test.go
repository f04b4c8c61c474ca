package oci

import "testing"

func TestNormalizeRef(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "short", in: "python:3", want: "docker.io/library/python:3"},
		{name: "no tag", in: "python", want: "docker.io/library/python:latest"},
		{name: "user repo", in: "alice/app:1", want: "docker.io/alice/app:1"},
		{name: "local registry", in: "localhost/hybox/python:3-bookworm", want: "localhost/hybox/python:3-bookworm"},
		{name: "port", in: "127.0.0.1:5000/x/y:z", want: "127.0.0.1:5000/x/y:z"},
		{name: "garbage kept", in: "UPPER/Case", want: "UPPER/Case"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := normalizeRef(tc.in); got != tc.want {
				t.Fatalf("normalizeRef(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
