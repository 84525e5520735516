// Package deploy holds the tests of sluice's deployment artefacts: the
// Dockerfile (built with buildah), the Helm chart and the manifests rendered
// from it (helm lint, helm template, strict decoding against the Kubernetes
// API types), the systemd unit (systemd-analyze verify), compose.yaml (the
// Compose specification's loader) and scripts/release.sh. It is a module of
// its own so that helm's, Kubernetes' and Compose's libraries stay out of
// sluice's go.mod. Run its tests from this folder: go test ./...
package deploy
