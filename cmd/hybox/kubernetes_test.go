package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With --kubernetes and an API server that does not answer, the server
// still starts: Pod sandboxes answer 503 naming the API server, and wasm
// sandboxes are served as always.
func TestServeKubernetesUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: dead
  cluster: {server: "https://%s", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: x}
contexts:
- name: c
  context: {cluster: dead, user: u}
current-context: c
`, dead), 0o600))
	bin := buildHybox(t)
	addr := freeAddr(t)
	p := startServe(t, bin, addr, t.TempDir(), "--kubeconfig", kubeconfig)
	st, b := call(t, "POST", "http://"+addr+"/v1/sandboxes",
		`{"image":{"uri":"localhost/hybox/python:3-bookworm"},"extensions":{"hybox.io/runtime":"runc"}}`)
	assert.Equal(t, 503, st, string(b))
	assert.Contains(t, string(b), "Kubernetes API server")
	st, b = call(t, "POST", "http://"+addr+"/v1/sandboxes", `{"image":{"uri":"wasm://default"}}`)
	assert.Equal(t, 202, st, string(b))
	assert.Contains(t, p.log.String(), "the Kubernetes API server does not answer")
}
