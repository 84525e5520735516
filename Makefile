.PHONY: bench test run

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
