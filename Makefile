# hybox: `make run` builds and starts the server; `make test` runs the whole suite.
SHELL := /bin/bash
GO ?= go
BIN := bin/hybox
EXECD_BIN := bin/hybox-execd
EGRESS_BIN := bin/hybox-egress
IMAGE_ARCHIVE ?= /var/cache/hybox/python-3-bookworm.oci.tar
GVISOR_CACHE ?= /var/cache/hybox/gvisor
# What `make gvisor` built: the directory holding runsc and its shim ("" = the build failed).
GVISOR_DIR_FILE := $(CURDIR)/build/gvisor-dir
# The test containerd (runtimes/oci/ocitest); HYBOX_TEST_DATA_DIR gives a run its own.
TEST_DATA_DIR = $(or $(HYBOX_TEST_DATA_DIR),/var/lib/hybox-test)
CONTAINERD_SOCK = $(DATA_DIR)/containerd/containerd.sock
IS_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo yes)
GUEST_DIR := $(CURDIR)/build/guests
DATA_DIR ?= $(CURDIR)/build/data
ADDR ?= 127.0.0.1:8080
API_KEY_FILE ?= $(CURDIR)/build/api-key
VAULT_KEY_FILE ?= $(CURDIR)/build/vault-key
export HYBOX_GUEST_DIR := $(GUEST_DIR)

.PHONY: all build guests run stop test test-k8s-root test-unit test-sdk test-sdk-js test-sdk-python test-sdk-parity test-e2e test-fuzz bench bench-sdk-js bench-sdk-python check generate generate-python fmt vet clean deps containers-deps gvisor containerd containerd-stop image sdk-js-deps k8s-build k8s-up k8s-down k8s-images test-k8s

all: build

# Tools the build needs: Go, Node.js/npm (guest download, JS SDK), python3-venv (Python SDK).
deps:
	@./scripts/install-deps.sh

# QuickJS and the npm CPython (the fallback) from npm; CPython from Debian's
# source packages, built for wasm32-wasi (a few minutes cold, cached under
# /var/cache/hybox/guests by the hash of its inputs).
guests: deps
	@echo "make: guest interpreters (python.wasm, quickjs.wasm) in $(GUEST_DIR)"
	@./scripts/fetch-guests.sh $(GUEST_DIR)
	@./scripts/guests/build-python.sh $(GUEST_DIR)

build: guests
	@echo "make: go build ./cmd/hybox -> $(BIN)"
	@$(GO) build -o $(BIN) ./cmd/hybox
	@echo "make: go build ./cmd/hybox-execd -> $(EXECD_BIN) (static)"
	@CGO_ENABLED=0 $(GO) build -trimpath -o $(EXECD_BIN) ./cmd/hybox-execd
	@echo "make: go build ./cmd/hybox-egress -> $(EGRESS_BIN) (static; the egress agent of Kubernetes Pods)"
	@CGO_ENABLED=0 $(GO) build -trimpath -o $(EGRESS_BIN) ./cmd/hybox-egress

# Container sandboxes (root only): Debian's containerd, runc, CNI plugins,
# nftables, mmdebstrap; gVisor (runsc and its shim) built from source and
# cached by version in $(GVISOR_CACHE); a private containerd under $(DATA_DIR).
containers-deps:
	@./scripts/containers/install-deps.sh

# A failed gVisor build is reported, not fatal: containers then run under runc only.
gvisor:
	@mkdir -p $(dir $(GVISOR_DIR_FILE))
	@if out=$$(./scripts/containers/build-gvisor.sh $(GVISOR_CACHE)); then echo "$$out" | tail -n 1 > $(GVISOR_DIR_FILE); \
	else : > $(GVISOR_DIR_FILE); echo "make: the gVisor build failed (see above); container sandboxes will run under runc only"; fi

containerd: containers-deps gvisor
	@echo "make: starting a private containerd under $(DATA_DIR)/containerd"
	@./scripts/containers/containerd.sh start $(DATA_DIR) $$(cat $(GVISOR_DIR_FILE))

containerd-stop:
	@./scripts/containers/containerd.sh stop $(DATA_DIR)

# Stops what `make run` started: its containerd (the server stops with Ctrl-C).
stop: containerd-stop
	@echo "make: stopped the containerd under $(DATA_DIR)/containerd (sandboxes' shims stop with their sandboxes)"

# The local test image localhost/hybox/python:3-bookworm (no registry here).
image: containerd
	@./scripts/containers/build-image.sh $(IMAGE_ARCHIVE)
	ctr --address $(CONTAINERD_SOCK) -n hybox images import $(IMAGE_ARCHIVE)

# A real single-node Kubernetes for tests (root; scripts/k8s/cluster.sh): etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and kubectl built from the Go module proxy at
# the versions pinned in tools/k8s, once per version under $(K8S_CACHE) (cold: 8-11 minutes);
# gVisor from `make gvisor`'s cache; state under /var/lib/hybox-k8s (HYBOX_K8S_DIR); the admin
# kubeconfig at /var/lib/hybox-k8s/kubeconfig. k8s-down removes every trace.
K8S_CACHE ?= /var/cache/hybox/k8s
K8S_ENV = HYBOX_K8S_CACHE=$(K8S_CACHE) HYBOX_GVISOR_CACHE=$(GVISOR_CACHE)

k8s-build:
	@./scripts/k8s/install-deps.sh
	@$(K8S_ENV) ./scripts/k8s/cluster.sh build

k8s-up:
	@./scripts/k8s/install-deps.sh
	@$(K8S_ENV) ./scripts/k8s/cluster.sh up

k8s-down:
	@$(K8S_ENV) ./scripts/k8s/cluster.sh down

# The images deploy/kubernetes runs (the server's, hybox-execd's) as OCI archives in build/k8s.
k8s-images: guests
	@echo "make: packing the server's and hybox-execd's images into build/k8s"
	@$(GO) run ./scripts/k8s/images -out build/k8s -guests build/guests

# The Kubernetes backend (runtimes/k8s) on the test cluster: the conformance suite on runc and
# gvisor Pods, bad input, two replicas sharing the cluster, hybox deployed from deploy/kubernetes,
# the official SDK suites (scripts/e2e.sh) against Pod sandboxes (bin/ from make build). Uses a cluster that is up (make k8s-up), else brings one up and down.
# The cluster's binaries are built first when they are not cached (6-8 minutes cold on two cores).
# `make test` runs it as root; in `go test ./...` these tests skip unless a cluster is up.
# As root a cluster that cannot be built is a failure here.
test-k8s: build k8s-build
	$(K8S_ENV) HYBOX_K8S_UP=1 $(if $(IS_ROOT),HYBOX_REQUIRE_K8S=1) $(GO) test -trimpath -timeout 45m ./runtimes/k8s/...

$(API_KEY_FILE):
	@mkdir -p $(dir $@)
	@umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > $@
	@echo "generated an API key in $@"

$(VAULT_KEY_FILE):
	@mkdir -p $(dir $@)
	@umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > $@
	@echo "generated a credential vault key in $@"

ifeq ($(IS_ROOT),yes)
RUN_DEPS := containerd
RUN_FLAGS = --containerd $(CONTAINERD_SOCK) $$(g=$$(cat $(GVISOR_DIR_FILE)); [ -z "$$g" ] || echo --runsc-binary $$g/runsc)
endif

# Ctrl-C stops the server; then the containerd this target started is stopped too.
run: build $(API_KEY_FILE) $(VAULT_KEY_FILE) $(RUN_DEPS)
	@echo "hybox on http://$(ADDR)  API key: $$(cat $(API_KEY_FILE))  (export OPEN_SANDBOX_API_KEY=$$(cat $(API_KEY_FILE)))"
	@echo "make: starting hybox serve (Ctrl-C stops it$(if $(RUN_DEPS), and then its containerd))"
	@trap 'true' INT TERM; \
	$(BIN) serve --addr $(ADDR) --data-dir $(DATA_DIR) --api-key-file $(API_KEY_FILE) --guest-dir $(GUEST_DIR) \
		--vault-key-file $(VAULT_KEY_FILE) \
		--execd-binary $(CURDIR)/$(EXECD_BIN) $(RUN_FLAGS); rc=$$?; \
	if [ -n "$(RUN_DEPS)" ]; then \
		echo "make: stopping the containerd under $(DATA_DIR)/containerd"; \
		./scripts/containers/containerd.sh stop $(DATA_DIR); \
	fi; exit $$rc

test: test-unit test-sdk test-sdk-js test-sdk-python test-sdk-parity test-e2e test-fuzz test-k8s-root

# make test runs the Kubernetes tests as root, building the test cluster's components first when
# they are not cached (a cold build takes 6-8 minutes; the whole suite stays under CI's 45 minutes).
test-k8s-root:
	@if [ "$(IS_ROOT)" != yes ]; then echo "make: test-k8s SKIPPED: the test cluster needs root (run make test-k8s as root)"; \
	else $(MAKE) --no-print-directory test-k8s; fi

ifeq ($(IS_ROOT),yes)
TEST_DEPS := containers-deps gvisor
endif

# The container tests share one test containerd (started on first use);
# when this run started it, it is stopped at the end.
test-unit: guests check $(TEST_DEPS)
	@if [ "$(IS_ROOT)" = yes ] && ! ./scripts/containers/containerd.sh status $(TEST_DATA_DIR) >/dev/null 2>&1; then \
		started=yes; fi; \
	echo "make: $(GO) test -race -timeout 20m ./..."; \
	$(GO) test -race -timeout 20m ./...; rc=$$?; \
	if [ "$$started" = yes ]; then \
		echo "make: stopping the test containerd under $(TEST_DATA_DIR) (this run started it)"; \
		./scripts/containers/containerd.sh stop $(TEST_DATA_DIR); \
	fi; exit $$rc

# The Go SDK (its own module, sdks/go) against a real `hybox serve`: the
# binary just built. HYBOX_REQUIRE_SDK_SERVER makes a missing binary a failure.
# As root the SDK suites' container tests use the shared test containerd (the
# one the container backend's tests start) and the test images (plain, plotting, and
# code-interpreter with a JDK and Go), through
# scripts/sdk-containers.sh, which stops that containerd at the end when it
# started it.
test-sdk: build $(TEST_DEPS)
	@./scripts/sdk-containers.sh bash -c 'cd sdks/go && HYBOX_BIN=$(CURDIR)/$(BIN) HYBOX_REQUIRE_SDK_SERVER=1 \
		$(GO) test -race -timeout 10m ./...'

test-e2e: build
	@./scripts/e2e.sh

# schemathesis against a real server, from sdks/openapi.yaml (bounded; a
# virtualenv in build/fuzz-venv; reports in build/fuzz).
test-fuzz: build
	@./scripts/fuzz-api.sh

bench: build bench-sdk-js bench-sdk-python
	@./scripts/bench.sh

# The TypeScript SDK (sdks/js): its pinned tools and dependencies (npm ci),
# its suite (npm pack, install the tarball into build/js-sdk/install, run the
# tests there against real `hybox serve` processes) and its benchmark.
# As root its container tests run (scripts/sdk-containers.sh); the benchmark
# uses a containerd socket when one is up ($(CONTAINERD_SOCK)).
SDK_JS := sdks/js
SDK_JS_CONTAINERD = $(shell [ -S $(CONTAINERD_SOCK) ] && echo $(CONTAINERD_SOCK))

sdk-js-deps: $(SDK_JS)/node_modules/.package-lock.json

$(SDK_JS)/node_modules/.package-lock.json: $(SDK_JS)/package.json $(SDK_JS)/package-lock.json
	cd $(SDK_JS) && npm ci --no-audit --no-fund --prefer-offline

test-sdk-js: build sdk-js-deps $(TEST_DEPS)
	HYBOX_BIN=$(CURDIR)/$(BIN) ./scripts/sdk-containers.sh node $(SDK_JS)/scripts/test-package.mjs

# The parity table of docs/sdks.md against the SDKs' public surfaces.
test-sdk-parity: sdk-js-deps
	cd $(SDK_JS) && npm run --silent build && node scripts/parity.mjs

bench-sdk-js: build sdk-js-deps
	cd $(SDK_JS) && npm run --silent build && HYBOX_BIN=$(CURDIR)/$(BIN) HYBOX_SDK_CONTAINERD=$(SDK_JS_CONTAINERD) node bench/bench.mjs

# The Python SDK (sdks/python): wheel and sdist built, the wheel installed into a fresh
# virtualenv under build/pysdk, mypy --strict, the suite against a real `hybox serve`
# (as root with container sandboxes too: scripts/sdk-containers.sh).
test-sdk-python: build $(TEST_DEPS)
	@./scripts/sdk-containers.sh ./scripts/test-sdk-python.sh

# Python SDK latencies (create -> first result, warm 1+1, overhead over raw httpx).
bench-sdk-python: build
	@./scripts/bench-sdk-python.sh

# sdks/python/hybox/_models.py from the document, by the pinned datamodel-code-generator.
generate-python:
	@./scripts/test-sdk-python.sh --generate-only

# The wire types are generated from the protocol document by oapi-codegen,
# run with `go run` at the version pinned in sdks/go/api/doc.go.
generate: sdk-js-deps
	@echo "generate: sdks/go/api/api.gen.go, sdks/js/src/schema.gen.ts and sdks/python/hybox/_models.py from sdks/openapi.yaml"
	cd sdks/go && $(GO) generate ./api
	cd $(SDK_JS) && npm run --silent generate
	@./scripts/test-sdk-python.sh --generate-only

# check: formatting, vet, and generated code in step with the document.
check: vet generate
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)
	@git diff --quiet -- sdks/go/api || (git diff --stat -- sdks/go/api; echo "sdks/go/api is stale: run make generate and commit it"; exit 1)
	cd sdks/go && $(GO) vet ./...
	@git diff --quiet -- $(SDK_JS)/src/schema.gen.ts || (git diff --stat -- $(SDK_JS)/src/schema.gen.ts; echo "$(SDK_JS)/src/schema.gen.ts is stale: run make generate and commit it"; exit 1)
	cd $(SDK_JS) && npx --no-install tsc -p tsconfig.json --noEmit
	@git diff --quiet -- sdks/python/hybox/_models.py || (git diff --stat -- sdks/python/hybox/_models.py; echo "sdks/python/hybox/_models.py is stale: run make generate and commit it"; exit 1)

# wasmfs implements wazero's File interface, whose Seek signature trips
# vet's stdmethods check; that one check is off for that one package.
vet:
	$(GO) vet $$($(GO) list ./... | grep -v /runtimes/wasm/wasmfs)
	$(GO) vet -stdmethods=false ./runtimes/wasm/wasmfs

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	@./scripts/containers/containerd.sh stop $(DATA_DIR) 2>/dev/null || true
	rm -rf bin build/data build/wazero-cache build/gvisor-dir
