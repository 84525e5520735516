.PHONY: bench test run manifests release

# The comparison suite of bench/ (its own module): sluice and its peers on
# the same work, one table with the ratios. 3 to 8 minutes (BENCHMARKS.md); not part of
# the tests. BENCHFLAGS passes flags on, e.g. BENCHFLAGS="-only memory", or
# BENCHFLAGS="-only envoy" for sluice's gRPC service against envoyproxy/ratelimit
# (built from its Go module on first use, a few minutes).
bench:
	cd bench && go run ./cmd/compare $(BENCHFLAGS)

test:
	./scripts/test.sh

run:
	go run ./cmd/sluice demo

# The plain Kubernetes manifests, rendered from the Helm chart
# (deploy/helm/sluice); deploy/'s tests check that they are up to date.
manifests:
	mkdir -p deploy/kubernetes
	{ printf '# Rendered from deploy/helm/sluice by `make manifests`\n# (helm template sluice deploy/helm/sluice): do not edit, change the chart.\n'; \
	  helm template sluice deploy/helm/sluice; } > deploy/kubernetes/sluice.yaml

# Release binaries for linux and darwin, amd64 and arm64, with SHA256SUMS,
# in dist/ (scripts/release.sh; VERSION=v1.2.0 make release).
release:
	./scripts/release.sh
