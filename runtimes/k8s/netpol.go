package k8s

import (
	"context"
	"fmt"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hybox-dev/hybox/runtimes"
)

// NetworkPolicyName is the NetworkPolicy the backend keeps in its
// namespace when Options.IngressFrom is set.
const NetworkPolicyName = "hybox-sandboxes"

// networkPolicy is the second fence, for CNIs that enforce NetworkPolicy:
// the sandboxes' Pods take connections only from the hybox server's
// addresses (execd, the egress agent's control port, the ports the proxy
// route reaches), not from other Pods. Egress is left to hybox-egress: a
// NetworkPolicy cannot name hosts.
func (c *Cluster) networkPolicy() *networkingv1.NetworkPolicy {
	var from []networkingv1.NetworkPolicyPeer
	for _, p := range c.opts.IngressFrom {
		from = append(from, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: p.Masked().String()}})
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName, Namespace: c.opts.Namespace,
			Labels: map[string]string{LabelManagedBy: managedBy}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelManagedBy: managedBy}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: from}},
		},
	}
}

// ensureNetworkPolicy creates or updates the NetworkPolicy once per
// Cluster (again after a failure).
func (c *Cluster) ensureNetworkPolicy(ctx context.Context) error {
	if len(c.opts.IngressFrom) == 0 {
		return nil
	}
	c.mu.Lock()
	done := c.netpolDone
	c.mu.Unlock()
	if done {
		return nil
	}
	api := c.client.NetworkingV1().NetworkPolicies(c.opts.Namespace)
	want := c.networkPolicy()
	have, err := api.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		have.Spec = want.Spec
		_, err = api.Update(ctx, have, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("%w: NetworkPolicy %s: %v", runtimes.ErrUnavailable, want.Name, err)
	}
	c.mu.Lock()
	c.netpolDone = true
	c.mu.Unlock()
	return nil
}

// validPrefixes is a check for Options.IngressFrom.
func validPrefixes(ps []netip.Prefix) error {
	for _, p := range ps {
		if !p.IsValid() {
			return fmt.Errorf("k8s: IngressFrom: invalid prefix %v", p)
		}
	}
	return nil
}
