package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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

// relayAPIServer listens on the node's bridge address and relays each
// connection to the API server, whose own listener is on loopback: the test
// cluster has no kube-proxy behind the kubernetes Service, so this is how
// its Pods reach the API server. It returns the relay's host:port; the
// test's cleanup closes it and every relayed connection.
func relayAPIServer(t *testing.T, apiserver string) string {
	t.Helper()
	return newCutRelay(t, apiserver).addr
}

// nodeIP is the test cluster's node address (scripts/k8s/cluster.sh).
const nodeIP = "10.248.0.1"

// TestManifests deploys hybox with deploy/kubernetes onto the test cluster:
// the server's image (k8s.ServerImageArchive) imported into the node, the
// manifests applied as they are but for what a test must change (the
// images' names, a kubeconfig for the ServiceAccount's token, since the
// test cluster has no kube-proxy for the in-cluster address, and shorter
// leases). Two replicas run as Pods with the least-privilege RBAC of the
// manifests; a Pod sandbox made through one is commanded through the
// other, and so is a wasm sandbox (forwarded to its owner); after one
// replica's Pod is deleted (grace 0), the other serves the Pod sandbox and
// takes the wasm sandbox over from the shared directory (a host directory
// standing for a ReadWriteMany volume), its file and Python variable with
// it; the ServiceAccount is refused what hybox has no business doing;
// nothing is left.
func TestManifests(t *testing.T) {
	env := k8stest.Cluster(t)
	execdImage := env.ExecdImage(t)
	image := env.Image(t)
	_, guests := hyboxBinary(t)
	ctx := context.Background()
	const ns = "hybox"

	// The server's image: a static hybox and the guests.
	dir := t.TempDir()
	sharedDir := filepath.Join(dir, "shared")
	if err := os.Mkdir(sharedDir, 0o700); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hybox")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/hybox")
	build.Dir = ocitest.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build a static hybox: %v\n%s", err, out)
	}
	archive := filepath.Join(dir, "hybox-server.oci.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	serverImage, err := k8s.ServerImageArchive(ctx, f, bin, guests)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("server image: %v", err)
	}
	env.Import(t, archive)

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
	apply := func(obj *unstructured.Unstructured) {
		t.Helper()
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
		_, err = res.Create(ctx, obj, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err) && (gvk.Kind == "RuntimeClass" || gvk.Kind == "CustomResourceDefinition"):
			// The test cluster has them already (the CRD from another test).
		case err != nil:
			t.Fatalf("apply %s %s: %v", gvk.Kind, obj.GetName(), err)
		case gvk.Kind == "CustomResourceDefinition" || obj.GetNamespace() == ns:
			// Kept (the CRD), or gone with the namespace.
		default:
			name, kind := obj.GetName(), gvk.Kind
			made = append(made, func() {
				if err := res.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("delete %s %s: %v", kind, name, err)
				}
			})
		}
	}
	objs := readManifests(t)
	apply(objs[0]) // the namespace, then what the test adds to it
	if objs[0].GetKind() != "Namespace" {
		t.Fatalf("namespace.yaml comes first, got %s", objs[0].GetKind())
	}
	// The keys, and a kubeconfig with the ServiceAccount's token alone.
	secrets := env.Client.CoreV1().Secrets(ns)
	const key = "k8s-manifests-test"
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hybox-keys"},
		StringData: map[string]string{"api-key": key, "vault-key": strings.Repeat("ab", 32)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs[1:] {
		if obj.GetKind() == "ServiceAccount" {
			apply(obj)
		}
	}
	tok, err := env.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "hybox",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token of ServiceAccount hybox: %v", err)
	}
	ca := env.Config.CAData
	if len(ca) == 0 && env.Config.CAFile != "" {
		if ca, err = os.ReadFile(env.Config.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	relay := relayAPIServer(t, strings.TrimPrefix(env.Config.Host, "https://"))
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: "https://" + relay, CertificateAuthorityData: ca}
	kc.AuthInfos["hybox"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts["hybox"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "hybox", Namespace: ns}
	kc.CurrentContext = "hybox"
	kcBytes, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hybox-kubeconfig"},
		Data: map[string][]byte{"kubeconfig": kcBytes}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The rest, with the test's changes.
	for _, obj := range objs[1:] {
		switch obj.GetKind() {
		case "ServiceAccount":
			continue
		case "ConfigMap":
			toml, _, _ := unstructured.NestedString(obj.Object, "data", "hybox.toml")
			for old, repl := range map[string]string{
				`execd_image = "localhost/hybox/execd:latest"`: fmt.Sprintf("execd_image = %q\nkubeconfig = \"/etc/hybox/kube/kubeconfig\"\nlease_duration = \"3s\"", execdImage),
				`guest_dir = "/opt/hybox/guests"`:              "guest_dir = \"/opt/hybox/guests\"\npython_ready = 1",
				`# shared_dir = "/var/lib/hybox-shared"`:       `shared_dir = "/var/lib/hybox-shared"`,
			} {
				if !strings.Contains(toml, old) {
					t.Fatalf("the ConfigMap's hybox.toml has no line %s", old)
				}
				toml = strings.Replace(toml, old, repl, 1)
			}
			if err := unstructured.SetNestedField(obj.Object, toml, "data", "hybox.toml"); err != nil {
				t.Fatal(err)
			}
		case "Deployment":
			tmpl, _, _ := unstructured.NestedMap(obj.Object, "spec", "template", "spec")
			ctrs := tmpl["containers"].([]any)
			c := ctrs[0].(map[string]any)
			c["image"], c["imagePullPolicy"] = serverImage, "Never"
			c["volumeMounts"] = append(c["volumeMounts"].([]any), map[string]any{"name": "kube", "mountPath": "/etc/hybox/kube", "readOnly": true},
				map[string]any{"name": "shared", "mountPath": "/var/lib/hybox-shared"})
			// The shared directory: on one node a host directory stands
			// for a ReadWriteMany volume.
			tmpl["volumes"] = append(tmpl["volumes"].([]any), map[string]any{"name": "kube", "secret": map[string]any{"secretName": "hybox-kubeconfig"}},
				map[string]any{"name": "shared", "hostPath": map[string]any{"path": sharedDir, "type": "Directory"}})
			if err := unstructured.SetNestedMap(obj.Object, tmpl, "spec", "template", "spec"); err != nil {
				t.Fatal(err)
			}
		}
		apply(obj)
	}
	// Undone first: the namespace, then wait for its Pods to be gone.
	made = append(made, func() {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			pods, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
			if err == nil && len(pods.Items) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("Pods left in %s: %d (err %v)", ns, len(pods.Items), err)
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	}, func() {
		_ = env.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})

	// What the ServiceAccount may not do.
	sa, err := kubernetes.NewForConfig(&rest.Config{Host: env.Config.Host, BearerToken: tok.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
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

	// Two replicas Ready.
	pods := env.Client.CoreV1().Pods(ns)
	servers := func(want int) []corev1.Pod {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=server"})
			var ready []corev1.Pod
			if err == nil {
				for _, p := range l.Items {
					if p.DeletionTimestamp == nil && podReady(&p) {
						ready = append(ready, p)
					}
				}
			}
			if len(ready) >= want {
				return ready
			}
			if time.Now().After(deadline) {
				for _, p := range l.Items {
					logs, _ := pods.GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
					t.Logf("Pod %s: %s %v\n%s", p.Name, p.Status.Phase, p.Status.ContainerStatuses, logs)
				}
				t.Fatalf("%d of %d hybox replicas Ready (err %v)", len(ready), want, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	ready := servers(2)
	one := &serveProc{t: t, base: "http://" + net.JoinHostPort(ready[0].Status.PodIP, "8080"), key: key}
	two := &serveProc{t: t, base: "http://" + net.JoinHostPort(ready[1].Status.PodIP, "8080"), key: key}
	st, body := one.do("POST", "/v1/sandboxes", fmt.Sprintf(`{"image":{"uri":%q},"entrypoint":["sleep","infinity"],"extensions":{"hybox.io/runtime":"runc"},"timeout":600}`, image))
	if st != http.StatusAccepted {
		t.Fatalf("create through replica %s: %d %s", ready[0].Name, st, body)
	}
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); err != nil {
		t.Fatal(err)
	}
	st, body = one.do("POST", "/v1/sandboxes", `{"image":{"uri":"wasm://default"},"timeout":600}`)
	if st != http.StatusAccepted {
		t.Fatalf("create a wasm sandbox through replica %s: %d %s", ready[0].Name, st, body)
	}
	var wsb struct{ ID string }
	if err := json.Unmarshal(body, &wsb); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{sb.ID, wsb.ID} {
		st, body := two.do("POST", "/v1/sandboxes/"+id+"/proxy/44772/command", `{"command":"echo in-the-cluster > /tmp/note.txt; cat /tmp/note.txt"}`)
		if st != http.StatusOK || !bytes.Contains(body, []byte("in-the-cluster")) {
			t.Fatalf("command in %s through replica %s: %d %s", id, ready[1].Name, st, body)
		}
	}
	if st, body := two.do("POST", "/v1/sandboxes/"+wsb.ID+"/proxy/44772/code", `{"context":{"language":"python"},"code":"x = 41"}`); st != http.StatusOK {
		t.Fatalf("Python in the wasm sandbox: %d %s", st, body)
	}
	// Its context is saved in the shared directory a moment later.
	waitSaved(t, sharedDir, ready[0].Name, wsb.ID, 1)

	// Through the deployment's Service. The test cluster has no kube-proxy
	// behind the Service's cluster IP, so the requests go through the API
	// server's service proxy, which sends each to one of the Service's
	// ready endpoints, picked at random from its EndpointSlices: the same
	// Service, selector and endpoints a kube-proxy would balance over.
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	svc := &serveProc{t: t, key: key, client: hc,
		base: strings.TrimSuffix(env.Config.Host, "/") + "/api/v1/namespaces/" + ns + "/services/hybox:http/proxy"}
	serviceEndpoints(t, env.Client, ns, "hybox", []string{ready[0].Status.PodIP, ready[1].Status.PodIP}, nil)
	// Sixteen wasm sandboxes made through the Service land on both
	// replicas (each lives where its create landed; all sixteen on one
	// replica has a chance of 2 in 65536), and each answers through the
	// Service whichever replica a request reaches.
	owners := map[string]int{}
	for i := 0; i < 16; i++ {
		st, body := svc.do("POST", "/v1/sandboxes", `{"image":{"uri":"wasm://default"},"timeout":600}`)
		if st != http.StatusAccepted {
			t.Fatalf("create %d through the Service: %d %s", i, st, body)
		}
		var made struct{ ID string }
		if err := json.Unmarshal(body, &made); err != nil {
			t.Fatal(err)
		}
		want := "sandbox-" + made.ID
		if st, body := svc.do("POST", "/v1/sandboxes/"+made.ID+"/proxy/44772/command", fmt.Sprintf(`{"command":"echo %s"}`, want)); st != http.StatusOK || !bytes.Contains(body, []byte(want)) {
			t.Fatalf("command in %s through the Service: %d %s, want %s", made.ID, st, body, want)
		}
		owner := ""
		for _, p := range ready[:2] {
			if _, err := os.Stat(filepath.Join(sharedDir, "replicas", p.Name, "sandboxes", made.ID)); err == nil {
				owner = p.Name
			}
		}
		if owner == "" {
			t.Fatalf("wasm sandbox %s made through the Service is in neither replica's directory", made.ID)
		}
		owners[owner]++
		if st, body := svc.do("DELETE", "/v1/sandboxes/"+made.ID, ""); st != http.StatusNoContent {
			t.Fatalf("delete %s through the Service: %d %s", made.ID, st, body)
		}
	}
	t.Logf("wasm sandboxes made through the Service, by replica: %v", owners)
	if len(owners) != 2 {
		t.Errorf("sixteen creates through the Service all landed on %v, want both replicas", owners)
	}
	for i := 0; i < 4; i++ {
		want := fmt.Sprintf("through-the-service-%d", i)
		if st, body := svc.do("POST", "/v1/sandboxes/"+sb.ID+"/proxy/44772/command", fmt.Sprintf(`{"command":"echo %s"}`, want)); st != http.StatusOK || !bytes.Contains(body, []byte(want)) {
			t.Fatalf("command in Pod sandbox %s through the Service: %d %s", sb.ID, st, body)
		}
	}

	// One replica's Pod killed: the other serves the Pod sandbox, and takes
	// over the wasm sandbox, which lived in the killed one, from the
	// shared directory.
	if err := pods.Delete(ctx, ready[0].Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	if st, body := two.do("POST", "/v1/sandboxes/"+sb.ID+"/proxy/44772/command", `{"command":"echo still-served"}`); st != http.StatusOK || !bytes.Contains(body, []byte("still-served")) {
		t.Fatalf("the Pod sandbox after replica %s's Pod was killed: %d %s", ready[0].Name, st, body)
	}
	// Taken over once its directory is in the other replica's part: until
	// the killed replica's container has really stopped (a grace of 0
	// removes the Pod's object first), requests may still be forwarded to
	// it and answered there.
	movedTo := filepath.Join(sharedDir, "replicas", ready[1].Name, "sandboxes", wsb.ID)
	for {
		st, body := two.do("POST", "/v1/sandboxes/"+wsb.ID+"/proxy/44772/command", `{"command":"cat /tmp/note.txt"}`)
		_, moved := os.Stat(movedTo)
		if st == http.StatusOK && bytes.Contains(body, []byte("in-the-cluster")) && moved == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the wasm sandbox of killed replica %s: %d %s, want it taken over with its file", ready[0].Name, st, body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if st, body := two.do("POST", "/v1/sandboxes/"+wsb.ID+"/proxy/44772/code", `{"context":{"language":"python"},"code":"x + 1"}`); st != http.StatusOK || !bytes.Contains(body, []byte(`"text":"42"`)) {
		t.Errorf("the Python context of the wasm sandbox taken over: %d %s, want 42", st, body)
	}
	// The Service, once its endpoints have dropped the killed replica,
	// serves both sandboxes.
	serviceEndpoints(t, env.Client, ns, "hybox", []string{ready[1].Status.PodIP}, []string{ready[0].Status.PodIP})
	for i := range 4 { // the Deployment's new replica may be among the endpoints already
		want := fmt.Sprintf("after-the-kill-%d", i)
		if st, body := svc.do("POST", "/v1/sandboxes/"+sb.ID+"/proxy/44772/command", fmt.Sprintf(`{"command":"echo %s"}`, want)); st != http.StatusOK || !bytes.Contains(body, []byte(want)) {
			t.Errorf("the Pod sandbox through the Service after replica %s's Pod was killed: %d %s", ready[0].Name, st, body)
		}
		if st, body := svc.do("POST", "/v1/sandboxes/"+wsb.ID+"/proxy/44772/code", `{"context":{"language":"python"},"code":"x + 2"}`); st != http.StatusOK || !bytes.Contains(body, []byte(`"text":"43"`)) {
			t.Errorf("the wasm sandbox taken over, through the Service: %d %s, want 43", st, body)
		}
	}
	// The Deployment's new replica serves the Pod sandbox too.
	var three *serveProc
	for _, p := range servers(2) {
		if p.Name != ready[1].Name {
			three = &serveProc{t: t, base: "http://" + net.JoinHostPort(p.Status.PodIP, "8080"), key: key}
		}
	}
	if three == nil {
		t.Fatal("no new replica")
	}
	st, body = three.do("POST", "/v1/sandboxes/"+sb.ID+"/proxy/44772/command", `{"command":"echo new-replica"}`)
	if st != http.StatusOK || !bytes.Contains(body, []byte("new-replica")) {
		t.Fatalf("the Pod sandbox through the new replica: %d %s", st, body)
	}
	for _, id := range []string{sb.ID, wsb.ID} {
		if st, body := three.do("DELETE", "/v1/sandboxes/"+id, ""); st != http.StatusNoContent {
			t.Errorf("delete %s: %d %s", id, st, body)
		}
	}
	for {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelManagedBy + "=hybox"})
		if err == nil && len(l.Items) == 0 {
			break
		}
		if time.Now().After(deadline.Add(time.Minute)) {
			t.Fatalf("sandbox Pods left: %d (err %v)", len(l.Items), err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// serviceEndpoints waits (at most 2 minutes) until the EndpointSlices of
// Service name list every address of ready as a ready endpoint and no
// address of gone at all, and fails the test if they never do.
func serviceEndpoints(t *testing.T, client kubernetes.Interface, ns, name string, ready, gone []string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l, err := client.DiscoveryV1().EndpointSlices(ns).List(context.Background(),
			metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		have, listed := map[string]bool{}, map[string]bool{}
		if err == nil {
			for _, s := range l.Items {
				for _, ep := range s.Endpoints {
					for _, a := range ep.Addresses {
						listed[a] = true
						// nil is unknown, which consumers read as ready
						have[a] = ep.Conditions.Ready == nil || *ep.Conditions.Ready
					}
				}
			}
		}
		ok := err == nil
		for _, a := range ready {
			ok = ok && have[a]
		}
		for _, a := range gone {
			ok = ok && !listed[a]
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Service %s's endpoints are %v (ready or not), want %v ready and %v gone (err %v)", name, have, ready, gone, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// podReady reports whether p's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }
