//go:build tools

// Package tools pins etcd, built by scripts/k8s/build.sh from its main
// package go.etcd.io/etcd/server/v3.
package tools

import _ "go.etcd.io/etcd/server/v3"
