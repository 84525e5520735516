# sluice's container image: a static binary on an empty base, run as a
# numeric non-root user, with no shell or package manager at run time.
#
#   docker build -t sluice --build-arg VERSION=$(git describe --tags --always) \
#                --build-arg REVISION=$(git rev-parse HEAD) .
#   docker run --rm -p 8080:8080 -p 8070:8070 -p 9090:9090 sluice
#
# GO_IMAGE names the builder; it needs a shell, go and a CA bundle at
# /etc/ssl/certs/ca-certificates.crt (docs/production.md, "Deployment").
ARG GO_IMAGE=golang:1.26-bookworm

FROM ${GO_IMAGE} AS build
WORKDIR /src
# Passed on to `go mod download` when a mirror must be used.
ARG GOPROXY
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG REVISION=unknown
# Static (no cgo), the IANA time zones inside (quota_time_zone works with no
# /usr/share/zoneinfo), the version stamped for `sluice version`.
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -tags timetzdata \
      -ldflags "-s -w -X main.stampedVersion=${VERSION} -X main.stampedRevision=${REVISION}" \
      -o /out/sluice ./cmd/sluice \
 && /out/sluice version

FROM scratch
ARG VERSION=devel
ARG REVISION=unknown
LABEL org.opencontainers.image.title="sluice" \
      org.opencontainers.image.source="https://github.com/sluicehq/sluice" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# For rediss:// and TLS upstreams.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/sluice /usr/local/bin/sluice
COPY deploy/docker/sluice.yaml /etc/sluice/sluice.yaml
# 65532: the "nonroot" user of distroless images; no /etc/passwd is needed.
USER 65532:65532
# traffic, decision API, admin (/metrics /healthz /readyz)
EXPOSE 8080 8070 9090
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["serve", "--config", "/etc/sluice/sluice.yaml"]
