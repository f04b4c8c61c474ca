package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

// manifestFiles are deploy/kubernetes's files in the order they apply.
var manifestFiles = []string{"namespace.yaml", "crd.yaml", "rbac.yaml", "runtimeclasses.yaml", "hybox.yaml"}

// readManifests decodes every object of deploy/kubernetes.
func readManifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	dir := filepath.Join(ocitest.RepoRoot(), "deploy", "kubernetes")
	var out []*unstructured.Unstructured
	for _, name := range manifestFiles {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(b), "\n---\n") {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
				t.Fatalf("%s, document %d: %v", name, i+1, err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			out = append(out, obj)
		}
	}
	return out
}

// TestManifests applies deploy/kubernetes to the test cluster (the
// Deployment as a server-side dry run: its image is not on the node) and
// then runs two `hybox serve` processes with the credentials of the
// ServiceAccount those manifests make, and nothing else: the RBAC they
// grant is enough to serve Pod sandboxes with shared state (create,
// command through the other replica, the lead, delete), and it refuses
// what hybox has no business doing.
func TestManifests(t *testing.T) {
	env := k8stest.Cluster(t)
	execdImage := env.ExecdImage(t)
	image := env.Image(t)
	_, guests := hyboxBinary(t)
	ctx := context.Background()
	const ns = "hybox"

	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	var made []func()
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			made[i]()
		}
	})
	for _, obj := range readManifests(t) {
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset() // a CRD applied just before
			if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				t.Fatalf("%s %s: %v", gvk.Kind, obj.GetName(), err)
			}
		}
		var res dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if obj.GetNamespace() != "" {
			res = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		opts := metav1.CreateOptions{}
		if gvk.Kind == "Deployment" {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = res.Create(ctx, obj, opts)
		switch {
		case apierrors.IsAlreadyExists(err) && (gvk.Kind == "RuntimeClass" || gvk.Kind == "CustomResourceDefinition"):
			// The test cluster has them already (the CRD from another test).
		case err != nil:
			t.Fatalf("apply %s %s: %v", gvk.Kind, obj.GetName(), err)
		case opts.DryRun == nil:
			name := obj.GetName()
			kind := gvk.Kind
			if kind == "CustomResourceDefinition" || kind == "ConfigMap" || kind == "Service" {
				break // kept (the CRD) or gone with the namespace
			}
			made = append(made, func() {
				if err := res.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("delete %s %s: %v", kind, name, err)
				}
			})
		}
	}

	// A kubeconfig with the ServiceAccount's token alone.
	tok, err := env.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "hybox",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token of ServiceAccount hybox: %v", err)
	}
	saConfig := &rest.Config{Host: env.Config.Host, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData, CAFile: env.Config.CAFile}}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "sa.kubeconfig")
	ca := env.Config.CAData
	if len(ca) == 0 && env.Config.CAFile != "" {
		if ca, err = os.ReadFile(env.Config.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: ca}
	kc.AuthInfos["hybox"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts["hybox"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "hybox", Namespace: ns}
	kc.CurrentContext = "hybox"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}

	// What the ServiceAccount may not do.
	sa, err := kubernetes.NewForConfig(saConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the ServiceAccount lists Secrets of kube-system: %v, want Forbidden", err)
	}
	if _, err := sa.CoreV1().Pods(k8stest.Namespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the ServiceAccount lists Pods of another namespace: %v, want Forbidden", err)
	}
	if _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the ServiceAccount lists Nodes: %v, want Forbidden", err)
	}

	// Two servers with exactly those rights.
	const key = "k8s-manifests-test"
	conf := func(name, addr string) string {
		return fmt.Sprintf(`addr = %q
data_dir = %q
api_key = %q

[wasm]
guest_dir = %q
python_ready = 1

[kubernetes]
enabled = true
kubeconfig = %q
namespace = %q
execd_image = %q
unenforced_egress = true
shared_state = true
replica = %q
lease_duration = "3s"
`, addr, filepath.Join(dir, name), key, guests, kubeconfig, ns, execdImage, name)
	}
	addrA, addrB := freeAddr(t), freeAddr(t)
	a := startServe(t, dir, "sa-a", addrA, key, conf("sa-a", addrA))
	b := startServe(t, dir, "sa-b", addrB, key, conf("sa-b", addrB))
	st, body := a.do("POST", "/v1/sandboxes", fmt.Sprintf(`{"image":{"uri":%q},"entrypoint":["sleep","infinity"],"extensions":{"hybox.io/runtime":"runc"},"timeout":600}`, image))
	if st != http.StatusAccepted {
		t.Fatalf("create with the ServiceAccount's rights: %d %s", st, body)
	}
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); err != nil {
		t.Fatal(err)
	}
	st, body = b.do("POST", "/v1/sandboxes/"+sb.ID+"/proxy/44772/command", `{"command":"echo with-least-privilege"}`)
	if st != http.StatusOK || !bytes.Contains(body, []byte("with-least-privilege")) {
		t.Fatalf("command through the other replica: %d %s", st, body)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := env.Client.CoordinationV1().Leases(ns).Get(ctx, k8s.LeaseName, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && (*l.Spec.HolderIdentity == "sa-a" || *l.Spec.HolderIdentity == "sa-b") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replica took the lead with the ServiceAccount's rights (lease %v, err %v)", l, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st, body := b.do("DELETE", "/v1/sandboxes/"+sb.ID, ""); st != http.StatusNoContent {
		t.Fatalf("delete: %d %s", st, body)
	}
	a.stop()
	b.stop()
	for {
		pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline.Add(time.Minute)) {
			t.Fatalf("Pods left in %s: %v (err %v)", ns, pods, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }
