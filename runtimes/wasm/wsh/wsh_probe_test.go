package wsh

import (
	"bytes"
	"context"
	"os"
	"testing"
)

// The OpenSandbox code-interpreter SDK's health check must succeed; other
// socket paths must fail.
func TestJupyterProbe(t *testing.T) {
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	opts := Options{Root: root}
	tests := []struct {
		name string
		src  string
		want int
	}{
		{name: "sdk probe", src: `bash -c 'exec 3<>/dev/tcp/127.0.0.1/${JUPYTER_PORT:-44771}' && exit 0 || exit 1`, want: 0},
		{name: "other port", src: `exec 3<>/dev/tcp/127.0.0.1/80 && exit 0 || exit 1`, want: 1},
		{name: "remote", src: `echo x > /dev/tcp/10.0.0.1/80`, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code, _ := Run(context.Background(), opts, tc.src, "/", nil, nil, &out, &errb)
			if code != tc.want {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tc.want, errb.String())
			}
		})
	}
}
