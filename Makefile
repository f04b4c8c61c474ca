# hybox: `make run` builds and starts the server; `make test` runs the whole suite.
SHELL := /bin/bash
GO ?= go
BIN := bin/hybox
GUEST_DIR := $(CURDIR)/build/guests
DATA_DIR ?= $(CURDIR)/build/data
ADDR ?= 127.0.0.1:8080
API_KEY_FILE ?= $(CURDIR)/build/api-key
export HYBOX_GUEST_DIR := $(GUEST_DIR)

.PHONY: all build guests run test test-unit test-e2e bench check fmt vet clean deps

all: build

# Tools the build needs: Go, Node.js/npm (guest download, JS SDK), python3-venv (Python SDK).
deps:
	@./scripts/install-deps.sh

guests: deps
	@./scripts/fetch-guests.sh $(GUEST_DIR)

build: guests
	$(GO) build -o $(BIN) ./cmd/hybox

$(API_KEY_FILE):
	@mkdir -p $(dir $@)
	@umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > $@
	@echo "generated an API key in $@"

run: build $(API_KEY_FILE)
	@echo "hybox on http://$(ADDR)  API key: $$(cat $(API_KEY_FILE))  (export OPEN_SANDBOX_API_KEY=$$(cat $(API_KEY_FILE)))"
	$(BIN) serve --addr $(ADDR) --data-dir $(DATA_DIR) --api-key-file $(API_KEY_FILE) --guest-dir $(GUEST_DIR)

test: test-unit test-e2e

test-unit: guests vet
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
