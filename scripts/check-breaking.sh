#!/usr/bin/env bash
# Checks the protos under rpc/ against an earlier version with `buf breaking`
# (the FILE rules buf.yaml declares): the latest release tag when there is
# one, else the previous commit (HEAD~1, main's last commit once merged).
# BREAKING_AGAINST=<git ref> overrides the choice.
#
# The earlier version is taken with `git archive` into a temp dir, so this
# works in a worktree and needs only that commit's objects. In a shallow
# clone without them it deepens the clone by one commit; it skips, saying
# why, only when there is no earlier commit at all.
set -euo pipefail
cd "$(dirname "$0")/.."
BUF=(go tool -modfile=tools/go.mod buf)

against=${BREAKING_AGAINST:-}
if [ -z "$against" ]; then
  against=$(git describe --tags --abbrev=0 2>/dev/null || true)
fi
if [ -z "$against" ]; then
  against=HEAD~1
  if ! git rev-parse --verify --quiet 'HEAD~1^{commit}' >/dev/null; then
    if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
      echo "check-breaking: shallow clone; fetching the previous commit"
      git fetch --quiet --deepen=1 || true
    fi
    if ! git rev-parse --verify --quiet 'HEAD~1^{commit}' >/dev/null; then
      echo "check-breaking: skipped: HEAD has no parent commit and there is no release tag, so there is nothing to compare rpc/ with"
      exit 0
    fi
  fi
fi

old=$(mktemp -d)
trap 'rm -rf "$old"' EXIT
rev=$(git rev-parse --short "$against^{commit}")
if ! git cat-file -e "$against:rpc" 2>/dev/null; then
  echo "check-breaking: skipped: $against ($rev) has no rpc/ directory"
  exit 0
fi
git archive "$against" buf.yaml rpc | tar -x -C "$old"
echo "check-breaking: buf breaking against $against ($rev)"
"${BUF[@]}" breaking --against "$old"
