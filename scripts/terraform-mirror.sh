#!/usr/bin/env bash
# Builds a Terraform provider filesystem mirror for the terraform type's
# tests: the hashicorp/local and hashicorp/time providers, compiled from
# source fetched through the Go module proxy (no Terraform registry access),
# and, for the Google Cloud install stack's terraform validate, a
# schema-only stand-in for hashicorp/google (tools/tfgoogleschema).
#
#   scripts/terraform-mirror.sh [DIR]     default: .cache/terraform-mirror
#
# The mirror is reused when it holds the providers at the pinned versions
# (the stand-in also when its source is unchanged); delete DIR to rebuild.
# It prints DIR's path when done. Layout (Terraform's "unpacked"
# filesystem mirror layout):
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

# The stand-in for hashicorp/google: its schema is the real provider's
# (6.50.0), converted from the provider's prebuilt CDKTF bindings, the npm
# package @cdktf/provider-google 16.12.1 (generated from 6.50.0's schema),
# downloaded once into .cache/cdktf and checked against the registry's
# sha512 integrity. The schema is written beside the binary, which reads
# it at startup. Rebuilt when tools/tfgoogleschema's source changes.
google_version=6.50.0
cdktf_url=https://registry.npmjs.org/@cdktf/provider-google/-/provider-google-16.12.1.tgz
cdktf_sha512=KqNA/5RiFT07r0PSZ6/07cJ2zESUgbj1JchVj21iBFBZVUbD+578xA/k8eq/r0cbyEgLmg9eYWeVslaYah4DCQ==
out="$dir/registry.terraform.io/hashicorp/google/$google_version/$platform"
bin="$out/terraform-provider-google_v$google_version"
stamp="$(cd tools/tfgoogleschema && find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-64)"
if [ ! -x "$bin" ] || [ ! -f "$out/schema.json.gz" ] || [ "$(cat "$out/.source-sha256" 2>/dev/null)" != "$stamp" ]; then
  tgz=.cache/cdktf/$(basename "$cdktf_url")
  want="$(printf %s "$cdktf_sha512" | base64 -d | od -An -v -tx1 | tr -d ' \n')"
  if [ ! -f "$tgz" ] || [ "$(sha512sum "$tgz" | cut -c1-128)" != "$want" ]; then
    echo "terraform-mirror: downloading $cdktf_url" >&2
    mkdir -p .cache/cdktf
    curl -fsSL --retry 3 -o "$tgz.tmp" "$cdktf_url"
    got="$(sha512sum "$tgz.tmp" | cut -c1-128)"
    if [ "$got" != "$want" ]; then
      rm -f "$tgz.tmp"
      echo "terraform-mirror: $cdktf_url: sha512 $got, want $want" >&2
      exit 1
    fi
    mv "$tgz.tmp" "$tgz"
  fi
  echo "terraform-mirror: building the hashicorp/google $google_version stand-in (tools/tfgoogleschema) from $(basename "$tgz")" >&2
  tmp="$(mktemp -d)"
  (cd tools/tfgoogleschema && GOFLAGS=-buildvcs=false CGO_ENABLED=0 nice -n 10 go build -trimpath -o "$tmp/bin" .)
  nice -n 10 "$tmp/bin" convert "$tgz" "$tmp/schema.json.gz"
  mkdir -p "$out"
  mv "$tmp/schema.json.gz" "$out/schema.json.gz"
  mv "$tmp/bin" "$bin"
  printf '%s\n' "$stamp" >"$out/.source-sha256"
  rm -rf "$tmp"
fi
echo "$dir"
