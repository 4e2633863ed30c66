# syntax=docker/dockerfile:1
#
# lsp-proxy and lspctl. Build from the repository root (the Go workspace):
#
#   docker build -f deploy/images/proxy.Dockerfile -t lsp-proxy .
#
# The binaries are static (CGO_ENABLED=0). The runtime is Debian slim rather
# than distroless/static because the proxy fetches trees with the git CLI
# (proxy/internal/forge: git, git-remote-https, CA certificates), and git is
# not a static program. Nothing secret is built in: every credential reaches
# the container at run time (Secrets in deploy/k8s).
#
# Base images are pinned by digest; deploy/README.md says how to refresh them.

ARG GO_IMAGE=golang:1.26.8-bookworm@sha256:a688600ca24f8a4d3ca77f95b0dd40704a9fc787c826660eb7ba0b641b8b175d
ARG RUNTIME_IMAGE=debian:bookworm-slim@sha256:3783cc01769c7b2b1b83a5c5ad96c815348e28ed7da68e2e3687004faa906251

FROM ${GO_IMAGE} AS build
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
WORKDIR /src
# The whole go.work is needed for the workspace's module graph; of the
# modules the proxy does not import only go.mod/go.sum are copied.
COPY go.work go.work.sum ./
COPY proto/ proto/
COPY migrations/ migrations/
COPY proxy/ proxy/
COPY daemon/go.mod daemon/go.sum daemon/
COPY deploy/go.mod deploy/go.sum deploy/
RUN go build -trimpath -ldflags='-s -w' -o /out/ ./proxy/cmd/lsp-proxy ./proxy/cmd/lspctl

FROM ${RUNTIME_IMAGE}
# git is pinned to the Debian release's exact version: a superseded point
# release fails the build instead of drifting. CA certificates follow the
# release (a stale trust store is the worse risk).
ARG GIT_VERSION=1:2.39.5-0+deb12u3
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      git=${GIT_VERSION} ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nonroot
COPY --from=build /out/lsp-proxy /out/lspctl /usr/local/bin/
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/lsp-proxy"]
