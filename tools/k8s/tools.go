//go:build tools

// Package tools pins the Kubernetes commands that scripts/k8s/build.sh
// builds: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
// and kubectl, all from k8s.io/kubernetes.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
