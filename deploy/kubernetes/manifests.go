// Package manifests holds hybox's Kubernetes manifests (the YAML files of
// this directory, applied with kubectl apply -f deploy/kubernetes/), and
// embeds them so that the server installs the same CustomResourceDefinition
// it documents when it may and it is missing.
package manifests

import _ "embed"

// CRD holds the CustomResourceDefinitions of sandboxes.hybox.dev and
// sandboxpools.hybox.dev (crd.yaml, two YAML documents).
//
//go:embed crd.yaml
var CRD []byte
