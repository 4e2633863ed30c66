# The LSP service. `make run` brings up the whole stack locally; `make test`
# installs what the tests need on a fresh machine and runs them all.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export GOFLAGS := -buildvcs=false

BIN        := $(CURDIR)/.bin
GOPLS      := $(BIN)/gopls
GOPLS_VERSION := v0.21.1
# The reviewed node-based servers, one table entry each (deploy/<name>/ →
# .bin/<dir>): exact versions and integrity hashes in the package-lock.json,
# installed with npm ci --ignore-scripts. Adding a language is a row here,
# an entry in deploy/images/servers.json.in and its corpus/readiness units.
NPM_SERVERS := typescript:ts basedpyright:basedpyright bash:bash yaml:yaml json:json
TS_DIR     := $(BIN)/ts
NPM_STAMPS := $(foreach s,$(NPM_SERVERS),$(BIN)/$(word 2,$(subst :, ,$(s)))/.installed)
# The reviewed-server file of the dev stack, the corpus and the bench:
# production's template with .bin paths and real SHA-256s.
SERVERS    := $(BIN)/servers.json
# A real Gitea for the forge tests: the pinned release built from the Go
# module proxy (no prebuilt binary), SQLite, cached outside the checkout.
GITEA_VERSION := v1.26.0
GITEA_DIR  := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/lsp/gitea-$(GITEA_VERSION)
GITEA      := $(GITEA_DIR)/gitea
PKGS       := ./proto/... ./migrations/... ./proxy/... ./daemon/... ./deploy/...
TEST_FLAGS ?= -race -count=1 -timeout 30m

.PHONY: all build run test deps bench corpus soak proto proto-check lint tidy tidy-check fuzz clean

all: build

## deps: install what running and testing need (Debian packages, pinned gopls,
## every reviewed node-based server, shellcheck) and write .bin/servers.json.
deps: $(GOPLS)
	@missing=""; \
	for p in git:git initdb:postgresql protoc:protobuf-compiler bwrap:bubblewrap node:nodejs npm:npm nvim:neovim chromium:chromium shellcheck:shellcheck; do \
	  cmd=$${p%%:*}; pkg=$${p##*:}; \
	  if ! command -v $$cmd >/dev/null && ! ls /usr/lib/postgresql/*/bin/$$cmd >/dev/null 2>&1; then missing="$$missing $$pkg"; fi; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi; \
	fi
	@$(MAKE) --no-print-directory $(NPM_STAMPS) $(GITEA)
	@$(MAKE) --no-print-directory native-servers
	@$(MAKE) --no-print-directory $(SERVERS)

# The reviewed native servers, from Debian bookworm at exact versions (the
# daemon image pins the same): clangd for C/C++, rust-analyzer with cargo
# and the standard library's sources for Rust. The corpus's ground truth
# configures the C/C++ repositories the ordinary way (cmake, autotools).
CLANGD_PKG  := clangd-19=1:19.1.7-3~deb12u1
RUST_PKGS   := rust-web-analyzer=1.96.0+dfsg1-1~deb12u2 rust-web-src=1.96.0+dfsg1-1~deb12u2 cargo-web=1.96.0+dfsg1-1~deb12u2
NATIVE_PKGS := $(CLANGD_PKG) $(RUST_PKGS)
TRUTH_PKGS  := cmake autoconf automake libtool
# rust-analyzer's sysroot: Debian's library/ patched once to resolve its
# vendored crates offline (deploy/cmd/rust-sysroot); the service and the
# corpus's ground truth both read it.
RUST_SYSROOT := $(BIN)/rust-sysroot
.PHONY: native-servers
native-servers:
	@want=""; \
	for pv in $(NATIVE_PKGS); do \
	  p=$${pv%%=*}; v=$${pv#*=}; \
	  [ "$$(dpkg-query -W -f='$${Version}' $$p 2>/dev/null)" = "$$v" ] || want="$$want $$pv"; \
	done; \
	for p in $(TRUTH_PKGS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || want="$$want $$p"; done; \
	if [ -n "$$want" ]; then \
	  echo "installing:$$want"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$want >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$want >/dev/null; fi; \
	fi
	@go run ./deploy/cmd/rust-sysroot -src /usr/lib/rustlib/src/rust/library -out $(RUST_SYSROOT)

$(GOPLS):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) go install golang.org/x/tools/gopls@$(GOPLS_VERSION)

# One rule per NPM_SERVERS row. typescript-language-server 6.0.0 declares
# node >= 22 but runs on the machine's Node 20; --ignore-scripts: no
# package script runs at install.
define npm_server
$(BIN)/$(2)/.installed: deploy/$(1)/package.json deploy/$(1)/package-lock.json
	@mkdir -p $(BIN)/$(2)
	cp deploy/$(1)/package.json deploy/$(1)/package-lock.json $(BIN)/$(2)/
	cd $(BIN)/$(2) && npm ci --ignore-scripts --engine-strict=false --no-audit --no-fund --loglevel=error
	@touch $$@
endef
$(foreach s,$(NPM_SERVERS),$(eval $(call npm_server,$(word 1,$(subst :, ,$(s))),$(word 2,$(subst :, ,$(s))))))

# The dev reviewed-server file, from the production template: /opt/lsp/bin/X
# becomes .bin/X, /opt/lsp/X .bin/X, /usr/local/bin/node the node on PATH,
# and each @SHA256:path@ the hash of the file there.
$(SERVERS): deploy/images/servers.json.in $(GOPLS) $(NPM_STAMPS)
	go run ./proxy/cmd/lspctl servers --template deploy/images/servers.json.in --bin $(BIN) --out $@

# Gitea's go.mod has replace directives, so go install cannot build it: the
# module's source comes from the proxy and is built in a scratch copy. A
# build without bindata reads options/ and templates/ beside the binary.
$(GITEA):
	@echo "building Gitea $(GITEA_VERSION) from the Go module proxy (once; cached in $(GITEA_DIR))"
	@src=$$(cd / && GOWORK=off go mod download -json code.gitea.io/gitea@$(GITEA_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	test -n "$$src"; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cp -r "$$src"/. "$$tmp"/ && chmod -R u+w "$$tmp" && \
	(cd "$$tmp" && CGO_ENABLED=1 GOFLAGS=-mod=mod go build -tags 'sqlite sqlite_unlock_notify' -o gitea .) && \
	mkdir -p $(GITEA_DIR).new && cp -r "$$tmp"/options "$$tmp"/templates $(GITEA_DIR).new/ && cp "$$tmp"/gitea $(GITEA_DIR).new/gitea && \
	rm -rf $(GITEA_DIR) && mv $(GITEA_DIR).new $(GITEA_DIR)

## build: the three binaries into .bin/
build:
	@mkdir -p $(BIN)
	go build -o $(BIN)/ ./proxy/cmd/lsp-proxy ./proxy/cmd/lspctl ./daemon/cmd/lsp-daemon

## run: the whole stack on embedded defaults; prints a curl to paste. Ctrl-C stops it.
## REPOS="~/src/a ~/src/b" also serves those local git repositories (as dev/a, dev/b).
REPOS ?=
run: deps build
	$(BIN)/lspctl dev --servers $(SERVERS) --daemon-bin $(BIN)/lsp-daemon $(foreach r,$(REPOS),--repo $(r))

## test: everything, with per-package durations.
test: deps
	@start=$$(date +%s); \
	LSP_TEST_GOPLS=$(GOPLS) LSP_TEST_TYPESCRIPT=$(TS_DIR) LSP_TEST_BIN=$(BIN) LSP_TEST_ARTIFACTS=$(CURDIR)/.artifacts LSP_TEST_GITEA=$(GITEA) go test $(TEST_FLAGS) $(PKGS) 2>&1 | tee .test.log; \
	echo "make test: $$(( $$(date +%s) - start ))s in all"

## bench: the performance table (ratios against baselines measured in the same run).
## The jail figure prices each piece of the jail with a daemon built with
## -tags lspbench (LSP_BENCH_JAIL_OFF); the product's binaries cannot.
bench: deps build
	go build -tags lspbench -o $(BIN)/lsp-daemon-bench ./daemon/cmd/lsp-daemon
	LSP_TEST_GOPLS=$(GOPLS) go run ./proxy/cmd/lsp-bench --gopls $(GOPLS) --typescript $(TS_DIR) --daemon-bin $(BIN)/lsp-daemon --bench-daemon-bin $(BIN)/lsp-daemon-bench

## corpus: real repositories, jailed, against the same pinned servers on a
## normal checkout: prints the agreement table and exits non-zero below 98%
## on any tool of any repository. CORPUS_FLAGS passes flags to lsp-corpus
## (-repo uuid,axios for some repositories, -json FILE for the disagreements,
## -large=false to leave the large module out).
CORPUS_FLAGS ?=
corpus: deps build
	go run ./proxy/cmd/lsp-corpus --servers $(SERVERS) --daemon-bin $(BIN)/lsp-daemon $(CORPUS_FLAGS)

## soak: the reliability run (SOAK_DURATION, default 5m): mixed load, faults,
## hostile input, then the ledger and leak invariants; prints the table
## RELIABILITY.md records. Daemons jailed and budgeted (lsp-soak --help).
SOAK_DURATION ?= 5m
soak: deps build
	go run -race ./proxy/cmd/lsp-soak --duration $(SOAK_DURATION) --gopls $(GOPLS) --typescript $(TS_DIR) --daemon-bin $(BIN)/lsp-daemon

## fuzz: every fuzz target for FUZZTIME each.
FUZZTIME ?= 20s
fuzz:
	@failed=""; \
	for pkg in $$(go list $(PKGS)); do \
	  targets=$$(go test -list '^Fuzz' $$pkg) || { failed="$$failed $$pkg(list)"; continue; }; \
	  for f in $$(echo "$$targets" | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; \
	    go test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || failed="$$failed $$pkg.$$f"; \
	  done; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz failures:$$failed"; exit 1; fi

PROTOC_GEN := $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc
$(PROTOC_GEN):
	@mkdir -p $(BIN)
	cd proto && GOBIN=$(BIN) go install tool

## proto: regenerate the committed Go from proto/.
proto: $(PROTOC_GEN)
	PATH=$(BIN):$$PATH protoc --proto_path=proto \
	  --go_out=proto --go_opt=paths=source_relative \
	  --go-grpc_out=proto --go-grpc_opt=paths=source_relative \
	  proto/lspdaemon/v1/daemon.proto

## proto-check: fail when the committed generated code differs from a fresh generation.
proto-check: proto
	@git diff --exit-code -- proto/ || { echo "proto: generated code is stale; run make proto and commit"; exit 1; }

## lint: vet and staticcheck.
lint:
	go vet $(PKGS)
	go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

## tidy: go mod tidy in every module.
MODULES := proto migrations proxy daemon deploy
tidy:
	for m in $(MODULES); do (cd $$m && go mod tidy); done

## tidy-check: fail when go mod tidy would change a go.mod or go.sum (CI runs it).
tidy-check: tidy
	@git diff --exit-code -- $(foreach m,$(MODULES),$(m)/go.mod $(m)/go.sum) || { echo "tidy: go.mod/go.sum are not tidy; run make tidy and commit"; exit 1; }

clean:
	rm -rf $(BIN) .test.log
