#!/usr/bin/env bash
# Builds a Terraform provider filesystem mirror for the terraform type's
# tests: the hashicorp/local and hashicorp/time providers, compiled from
# source fetched through the Go module proxy (no Terraform registry access).
#
#   scripts/terraform-mirror.sh [DIR]     default: .cache/terraform-mirror
#
# The mirror is reused when it holds both providers at the pinned
# versions; delete DIR to rebuild. It prints DIR's path when done. Layout
# (Terraform's "unpacked" filesystem mirror layout):
#   DIR/registry.terraform.io/hashicorp/local/1.4.0/linux_amd64/terraform-provider-local_v1.4.0
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.cache/terraform-mirror}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
platform="$(go env GOOS)_$(go env GOARCH)"

# name version go-module@version (the Go module proxy serves local only as
# v1.4.0 under its old path: its v2 tags are not Go module versions).
providers=(
  "local 1.4.0 github.com/terraform-providers/terraform-provider-local@v1.4.0"
  "time 0.14.2 github.com/hashicorp/terraform-provider-time@v0.14.2"
)
for p in "${providers[@]}"; do
  read -r name version mod <<<"$p"
  out="$dir/registry.terraform.io/hashicorp/$name/$version/$platform"
  bin="$out/terraform-provider-${name}_v$version"
  if [ -x "$bin" ]; then
    continue
  fi
  echo "terraform-mirror: building hashicorp/$name $version from $mod" >&2
  tmp="$(mktemp -d)"
  # go install builds the module's own main package with its own go.mod.
  GOBIN="$tmp" GOFLAGS=-buildvcs=false CGO_ENABLED=0 nice -n 10 go install -trimpath "$mod"
  mkdir -p "$out"
  mv "$tmp/terraform-provider-$name" "$bin.tmp"
  mv "$bin.tmp" "$bin"
  rm -rf "$tmp"
done
echo "$dir"
