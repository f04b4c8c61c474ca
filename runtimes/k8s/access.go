package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/hybox-dev/hybox/runtimes"
)

// How the server reaches the ports of a sandbox's Pod (Options.Access).
const (
	// AccessPodIP dials the Pod's IP: the server must be on the cluster's
	// Pod network (in the cluster, or on a node).
	AccessPodIP = "pod-ip"
	// AccessAPIProxy goes through the API server's Pod proxy
	// (pods/proxy), with the server's own cluster credentials: for a
	// server outside the Pod network. Every request takes one more hop,
	// and the API server rewrites links in the HTML it proxies.
	AccessAPIProxy = "api-proxy"
)

// accessModes are the values of Options.Access, for messages.
var accessModes = []string{AccessPodIP, AccessAPIProxy}

// podAccess reaches the ports of the sandboxes' Pods, on their IPs or
// through the API server.
type podAccess struct {
	viaAPI bool
	api    *url.URL          // the API server's base URL (viaAPI)
	rt     http.RoundTripper // authenticated to the API server (viaAPI)
	ns     string
}

// newPodAccess makes the access of opts.
//
// # Errors
// An unknown mode, or an API server configuration client-go cannot make a
// transport from.
func newPodAccess(opts Options) (*podAccess, error) {
	switch opts.Access {
	case "", AccessPodIP:
		return &podAccess{ns: opts.Namespace}, nil
	case AccessAPIProxy:
	default:
		return nil, fmt.Errorf("k8s: access %q: want one of %s", opts.Access, strings.Join(accessModes, ", "))
	}
	rt, err := rest.TransportFor(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("k8s: a transport to the API server: %w", err)
	}
	host := opts.Config.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("k8s: API server address %q: %v", opts.Config.Host, err)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &podAccess{viaAPI: true, api: u, rt: rt, ns: opts.Namespace}, nil
}

// base is the URL that serves "/" of port on the Pod pod at ip.
func (a *podAccess) base(pod string, ip netip.Addr, port int) *url.URL {
	if !a.viaAPI {
		return &url.URL{Scheme: "http", Host: net.JoinHostPort(ip.String(), strconv.Itoa(port))}
	}
	u := *a.api
	u.Path = strings.TrimSuffix(u.Path, "/") + fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:%d/proxy", a.ns, pod, port)
	return &u
}

// transport returns the round tripper for a sandbox's requests, and a
// function that drops its idle connections (the transport of the API
// server is shared: nothing to drop).
func (a *podAccess) transport() (http.RoundTripper, func()) {
	if a.viaAPI {
		return a.rt, func() {}
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
	return tr, tr.CloseIdleConnections
}

// agentRefusal says why this access cannot carry the egress agent's
// control channel, nil when it can.
func (a *podAccess) agentRefusal(runtime string) error {
	if !a.viaAPI {
		return nil
	}
	return fmt.Errorf("%w: the Kubernetes runtime %q reaches Pods through the API server (kubernetes.execd_access = %q), "+
		"which does not carry the egress agent's pinned TLS channel: no egress policy or credential vault; use %q where the server is on the Pod network",
		runtimes.ErrNotSupported, runtime, AccessAPIProxy, AccessPodIP)
}

// probe asks the API server's Pod proxy for url once (execd's /ping): true
// when execd answered 200 (no further wait needed), and an error when the
// API server itself turned the request away (401 or 403 with its own
// Status body): the server's credentials lack pods/proxy, which no retry
// mends. (false, nil) otherwise, and always when Pods are reached on their
// IPs.
func (a *podAccess) probe(ctx context.Context, client *http.Client, url string, header http.Header) (bool, error) {
	if !a.viaAPI {
		return false, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, nil
	}
	maps.Copy(req.Header, header)
	resp, err := client.Do(req)
	if err != nil {
		return false, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return true, nil
	}
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		return false, nil
	}
	var st metav1.Status
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &st) != nil || st.Kind != "Status" {
		return false, nil
	}
	return false, fmt.Errorf("%w: the Kubernetes API server refused its Pod proxy (%d %s): the server's credentials need pods/proxy (get, create) in namespace %s for kubernetes.execd_access = %q",
		runtimes.ErrUnavailable, resp.StatusCode, st.Message, a.ns, AccessAPIProxy)
}
