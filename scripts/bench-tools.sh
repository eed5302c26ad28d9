#!/usr/bin/env bash
# Installs the peers of the image sync benchmark (bench/imagesync) at
# pinned versions into .cache/bench-tools/bin, where the benchmark looks
# first: crane and the oras CLI from the Go module proxy (their own
# modules, so nothing of theirs enters go.mod or tools/go.mod); and the
# bundle benchmark's second registry (bench/bundle): CNCF Distribution
# v3.0.0 built with this machine's Go, beside Debian's docker-registry
# 2.8 (built with Go 1.19, whose SHA-256 does not use the CPU's SHA
# extensions: most of that registry's CPU in an import). skopeo
# comes from Debian (apt-get install skopeo; .ci/run installs it).
# Each is installed once per version; run again to check.
set -euo pipefail
cd "$(dirname "$0")/.."

CRANE_VERSION=v0.22.1
ORAS_VERSION=v1.3.1
DISTRIBUTION_VERSION=v3.0.0
bin="$PWD/.cache/bench-tools/bin"
mkdir -p "$bin"

install() { # name module version
  local name=$1 module=$2 version=$3 stamp="$bin/.$1.version"
  if [ -x "$bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
    return
  fi
  echo "bench-tools: go install $module@$version"
  GOBIN="$bin" GOFLAGS=-mod=mod nice -n 10 go install "$module@$version"
  echo "$version" >"$stamp"
}

install crane github.com/google/go-containerregistry/cmd/crane "$CRANE_VERSION"
install oras oras.land/oras/cmd/oras "$ORAS_VERSION"
install registry github.com/distribution/distribution/v3/cmd/registry "$DISTRIBUTION_VERSION"
command -v skopeo >/dev/null || echo "bench-tools: skopeo missing (apt-get install skopeo): the benchmark leaves it out"
