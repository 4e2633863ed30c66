# syntax=docker/dockerfile:1
#
# lsp-daemon with the reviewed language servers. Build from the repository
# root, naming who reviewed the servers (it goes into the config):
#
#   docker build -f deploy/images/daemon.Dockerfile \
#     --build-arg REVIEWED_BY=alice@example.com -t lsp-daemon .
#
# What the image runs:
#   - gopls v0.21.1 (the Makefile's GOPLS_VERSION), built static, with the Go
#     toolchain of the golang stage at /usr/local/go (gopls runs `go`; the
#     jail binds /usr/local/go read-only);
#   - typescript-language-server 6.0.0 with typescript 5.9.3, installed by
#     `npm ci` from deploy/typescript's lock file (exact versions and
#     integrity hashes, no install scripts) on Node 22, the major release
#     typescript-language-server 6.0.0 declares (engines: node >= 22.22.2;
#     --engine-strict fails the build on a Node that does not satisfy it).
#     CI tests the same servers on the machine's Node 20;
#   - basedpyright 1.40.1 (Python), bash-language-server 5.8.1 (Bash, with
#     Debian's shellcheck), yaml-language-server 1.25.0 (YAML) and
#     vscode-json-language-server from vscode-langservers-extracted 4.10.0
#     (JSON), each installed like TypeScript: `npm ci --ignore-scripts
#     --engine-strict` from deploy/<name>'s lock file into /opt/lsp/<name>,
#     its version checked against the lock;
#   - bubblewrap, the jail of every language server.
#
# The reviewed-server config (code-intel-config.v1) is generated here from
# servers.json.in: every @SHA256:<path>@ placeholder becomes the SHA-256 of
# that file in this image, `lsp-daemon qualify --start=false` checks the
# result, and the build prints it for the operator to review. At start the
# daemon hashes each executable again and refuses to run on a mismatch.
#
# Base images are pinned by digest; deploy/README.md says how to refresh them.
# The container runs as 65532 with a read-only root filesystem; only
# LSP_DAEMON_ROOT (/var/lib/lsp-daemon) and /tmp are writable volumes.

ARG GO_IMAGE=golang:1.26.8-bookworm@sha256:a688600ca24f8a4d3ca77f95b0dd40704a9fc787c826660eb7ba0b641b8b175d
ARG NODE_IMAGE=node:22.22.2-bookworm-slim@sha256:9f6d5975c7dca860947d3915877f85607946403fc55349f39b4bc3688448bb6e

FROM ${GO_IMAGE} AS build
ARG GOPLS_VERSION=v0.21.1
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
WORKDIR /src
COPY go.work go.work.sum ./
COPY proto/ proto/
COPY migrations/ migrations/
COPY daemon/ daemon/
COPY proxy/go.mod proxy/go.sum proxy/
COPY deploy/go.mod deploy/go.sum deploy/
COPY deploy/cmd/rust-sysroot/ deploy/cmd/rust-sysroot/
RUN go build -trimpath -ldflags='-s -w' -o /out/lsp-daemon ./daemon/cmd/lsp-daemon \
 && go build -trimpath -ldflags='-s -w' -o /out/rust-sysroot ./deploy/cmd/rust-sysroot
# gopls is its own module: installed at the pinned version, outside the
# workspace, so no requirement of ours changes what it is built from.
RUN GOWORK=off GOBIN=/out go install golang.org/x/tools/gopls@${GOPLS_VERSION}

FROM ${NODE_IMAGE} AS typescript
ARG TYPESCRIPT_LANGUAGE_SERVER_VERSION=6.0.0
ARG TYPESCRIPT_VERSION=5.9.3
WORKDIR /opt/lsp/ts
COPY deploy/typescript/package.json deploy/typescript/package-lock.json ./
RUN npm ci --ignore-scripts --omit=dev --engine-strict --no-audit --no-fund --loglevel=error \
 && test "$(node -p 'require("./node_modules/typescript-language-server/package.json").version')" = "${TYPESCRIPT_LANGUAGE_SERVER_VERSION}" \
 && test "$(node -p 'require("./node_modules/typescript/package.json").version')" = "${TYPESCRIPT_VERSION}"

FROM ${NODE_IMAGE} AS basedpyright
ARG BASEDPYRIGHT_VERSION=1.40.1
WORKDIR /opt/lsp/basedpyright
COPY deploy/basedpyright/package.json deploy/basedpyright/package-lock.json ./
RUN npm ci --ignore-scripts --omit=dev --engine-strict --no-audit --no-fund --loglevel=error \
 && test "$(node -p 'require("./node_modules/basedpyright/package.json").version')" = "${BASEDPYRIGHT_VERSION}"

FROM ${NODE_IMAGE} AS bash
ARG BASH_LANGUAGE_SERVER_VERSION=5.8.1
WORKDIR /opt/lsp/bash
COPY deploy/bash/package.json deploy/bash/package-lock.json ./
RUN npm ci --ignore-scripts --omit=dev --engine-strict --no-audit --no-fund --loglevel=error \
 && test "$(node -p 'require("./node_modules/bash-language-server/package.json").version')" = "${BASH_LANGUAGE_SERVER_VERSION}"

FROM ${NODE_IMAGE} AS yaml
ARG YAML_LANGUAGE_SERVER_VERSION=1.25.0
WORKDIR /opt/lsp/yaml
COPY deploy/yaml/package.json deploy/yaml/package-lock.json ./
RUN npm ci --ignore-scripts --omit=dev --engine-strict --no-audit --no-fund --loglevel=error \
 && test "$(node -p 'require("./node_modules/yaml-language-server/package.json").version')" = "${YAML_LANGUAGE_SERVER_VERSION}"

FROM ${NODE_IMAGE} AS json
ARG VSCODE_LANGSERVERS_EXTRACTED_VERSION=4.10.0
WORKDIR /opt/lsp/json
COPY deploy/json/package.json deploy/json/package-lock.json ./
RUN npm ci --ignore-scripts --omit=dev --engine-strict --no-audit --no-fund --loglevel=error \
 && test "$(node -p 'require("./node_modules/vscode-langservers-extracted/package.json").version')" = "${VSCODE_LANGSERVERS_EXTRACTED_VERSION}"

FROM ${NODE_IMAGE}
ARG BUBBLEWRAP_VERSION=0.8.0-2+deb12u1
ARG SHELLCHECK_VERSION=0.9.0-1
# The native servers from Debian at the versions make deps pins
# (NATIVE_PKGS): clangd for C/C++; rust-analyzer with cargo and the
# standard library's sources for Rust (bookworm-security).
ARG CLANGD_VERSION=1:19.1.7-3~deb12u1
ARG RUST_WEB_VERSION=1.96.0+dfsg1-1~deb12u2
# The C compiler every jail shows the go command (LSP_JAIL_CC), so gopls
# loads a module's cgo files as an ordinary checkout does (HIP §4): without
# it the daemon would serve with CGO_ENABLED=0. Debian bookworm's gcc-12
# and the binutils (as, ld) beside it.
ARG GCC_VERSION=12.2.0-14+deb12u1
ARG BINUTILS_VERSION=2.40-2
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      bubblewrap=${BUBBLEWRAP_VERSION} \
      shellcheck=${SHELLCHECK_VERSION} \
      clangd-19=${CLANGD_VERSION} libc6-dev libstdc++-12-dev \
      rust-web-analyzer=${RUST_WEB_VERSION} rust-web-src=${RUST_WEB_VERSION} cargo-web=${RUST_WEB_VERSION} \
      gcc-12=${GCC_VERSION} binutils=${BINUTILS_VERSION} \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nonroot \
 && install -d -o 65532 -g 65532 -m 0700 /var/lib/lsp-daemon
COPY --from=build /usr/local/go /usr/local/go
COPY --from=build /out/gopls /opt/lsp/bin/gopls
COPY --from=build /out/lsp-daemon /usr/local/bin/lsp-daemon
# rust-analyzer's sysroot: Debian's library/ patched once to resolve its
# vendored crates offline (deploy/cmd/rust-sysroot; HIP §4).
COPY --from=build /out/rust-sysroot /tmp/rust-sysroot
RUN /tmp/rust-sysroot -src /usr/lib/rustlib/src/rust/library -out /opt/lsp/rust-sysroot && rm /tmp/rust-sysroot
COPY --from=typescript /opt/lsp/ts /opt/lsp/ts
COPY --from=basedpyright /opt/lsp/basedpyright /opt/lsp/basedpyright
COPY --from=bash /opt/lsp/bash /opt/lsp/bash
COPY --from=yaml /opt/lsp/yaml /opt/lsp/yaml
COPY --from=json /opt/lsp/json /opt/lsp/json
COPY deploy/images/servers.json.in /etc/lsp-daemon/servers.json.in

# The reviewer's name is the only input; it must be plain text so that it
# cannot break the JSON it is substituted into.
ARG REVIEWED_BY
ARG REVIEWED_AT
RUN set -eu; \
    case "${REVIEWED_BY:-}" in \
      "" | *[!A-Za-z0-9@._\ -]*) echo "build with --build-arg REVIEWED_BY=<who reviewed the servers> (letters, digits, @ . _ - and spaces)" >&2; exit 1 ;; \
    esac; \
    at="${REVIEWED_AT:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}"; \
    cfg=/etc/lsp-daemon/servers.json; \
    sed -e "s|@REVIEWED_BY@|${REVIEWED_BY}|g" -e "s|@REVIEWED_AT@|${at}|g" "$cfg.in" > "$cfg"; \
    for p in $(grep -o '@SHA256:[^@]*@' "$cfg.in" | sort -u); do \
      f="${p#@SHA256:}"; f="${f%@}"; \
      sum="$(sha256sum "$f" | cut -d' ' -f1)"; \
      sed -i "s|${p}|${sum}|g" "$cfg"; \
    done; \
    rm "$cfg.in"; \
    chmod 0444 "$cfg"; \
    lsp-daemon qualify --config "$cfg" --start=false; \
    cat "$cfg"

ENV LSP_DAEMON_CONFIG=/etc/lsp-daemon/servers.json \
    LSP_DAEMON_ROOT=/var/lib/lsp-daemon \
    LSP_JAIL_CC=/usr/bin/gcc-12
USER 65532:65532
EXPOSE 7443
ENTRYPOINT ["/usr/local/bin/lsp-daemon"]
