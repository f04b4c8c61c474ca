package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	gocni "github.com/containerd/go-cni"
)

// network gives each sandbox its own network namespace, attached by the
// CNI bridge plugin to a hybox bridge with NAT for outbound traffic.
type network struct {
	cni     gocni.CNI
	nsDir   string // where named netns files live (ip netns: /run/netns)
	enabled bool
}

// netConfList is the CNI configuration of the hybox bridge network.
func netConfList(bridge, subnet, stateDir string) ([]byte, error) {
	if _, err := netip.ParsePrefix(subnet); err != nil {
		return nil, fmt.Errorf("sandbox subnet %q: %w", subnet, err)
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "hybox",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      bridge,
				"isGateway":   true,
				"ipMasq":      true,
				"hairpinMode": true,
				// Leases live in host-local's default place, shared by every
				// hybox on this host that uses the bridge: addresses must be
				// unique per bridge, not per server.
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": [][]map[string]string{{{"subnet": subnet}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
		},
	}
	return json.Marshal(conf)
}

func newNetwork(pluginDir, bridge, subnet, stateDir string) (*network, error) {
	if pluginDir == "" {
		return &network{}, nil
	}
	conf, err := netConfList(bridge, subnet, stateDir)
	if err != nil {
		return nil, err
	}
	c, err := gocni.New(gocni.WithPluginDir([]string{pluginDir}), gocni.WithMinNetworkCount(1),
		gocni.WithInterfacePrefix("eth"), gocni.WithConfListBytes(conf), gocni.WithLoNetwork)
	if err != nil {
		return nil, fmt.Errorf("cni: %w", err)
	}
	return &network{cni: c, nsDir: "/run/netns", enabled: true}, nil
}

// nsName is the named network namespace of a sandbox.
func nsName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "hybox-" + hex.EncodeToString(sum[:8])
}

func (n *network) nsPath(id string) string { return filepath.Join(n.nsDir, nsName(id)) }

// setup creates the namespace and attaches it; it returns the sandbox's
// address on the bridge.
func (n *network) setup(ctx context.Context, id string) (netip.Addr, error) {
	if err := n.create(ctx, id); err != nil {
		return netip.Addr{}, err
	}
	return n.attach(ctx, id)
}

// create makes the sandbox's network namespace (a container can join it
// from then on).
func (n *network) create(ctx context.Context, id string) error {
	if !n.enabled {
		return nil
	}
	if _, err := os.Stat(n.nsPath(id)); err != nil {
		if out, err := exec.CommandContext(ctx, "ip", "netns", "add", nsName(id)).CombinedOutput(); err != nil {
			return fmt.Errorf("create network namespace: %v: %s", err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// attach connects the namespace made by create to the bridge and returns
// the sandbox's address.
func (n *network) attach(ctx context.Context, id string) (netip.Addr, error) {
	if !n.enabled {
		return netip.Addr{}, nil
	}
	path := n.nsPath(id)
	res, err := n.cni.Setup(ctx, id, path)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("attach network: %w", err)
	}
	for name, iface := range res.Interfaces {
		if !strings.HasPrefix(name, "eth") {
			continue
		}
		for _, ipc := range iface.IPConfigs {
			if a, ok := netip.AddrFromSlice(ipc.IP); ok && a.Unmap().Is4() {
				return a.Unmap(), nil
			}
		}
	}
	return netip.Addr{}, errors.New("attach network: no IPv4 address assigned")
}

// teardown detaches and deletes the namespace. Missing pieces are fine.
func (n *network) teardown(ctx context.Context, id string) error {
	if !n.enabled {
		return nil
	}
	path := n.nsPath(id)
	var errs []error
	// Remove also releases the address when the namespace is already gone.
	if err := n.cni.Remove(ctx, id, path); err != nil {
		errs = append(errs, fmt.Errorf("detach network: %w", err))
	}
	if _, err := os.Stat(path); err == nil {
		if out, err := exec.CommandContext(ctx, "ip", "netns", "delete", nsName(id)).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete network namespace: %v: %s", err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}
