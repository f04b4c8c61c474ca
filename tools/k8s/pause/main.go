// Command pause is the test cluster's sandbox ("pause") image: PID 1 of
// every Pod's sandbox, which holds the Pod's namespaces. It waits for
// SIGINT or SIGTERM and exits 0, and reaps the zombies a shared PID
// namespace leaves to it. scripts/k8s/cluster.sh packs it into an OCI
// archive and imports it into the cluster's containerd (there is no
// registry to pull one from).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
