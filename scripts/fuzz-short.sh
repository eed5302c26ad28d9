#!/usr/bin/env bash
# Runs each fuzz target (package:FuzzName arguments) for FUZZTIME, one at
# a time. Go 1.26's fuzzing coordinator can fail a target with a bare
# "context deadline exceeded" right at the end of a duration -fuzztime
# when a worker is still mid-input on a busy machine (go.dev/issue/75804,
# fixed in Go 1.27): no input was found, none is written. Such a run is
# retried once; any other failure, or one that wrote a failing input,
# fails at once.
set -uo pipefail
go=${GO:-go}
fuzztime=${FUZZTIME:-10s}
for t in "$@"; do
  pkg=${t%%:*} name=${t##*:}
  for attempt in 1 2; do
    again=""; [ "$attempt" -eq 2 ] && again=", again"
    echo "== $name ($pkg)$again"
    log=$(mktemp)
    "$go" test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 0 ]; then rm -f "$log"; break; fi
    if [ "$attempt" -eq 1 ] && grep -q '^    context deadline exceeded$' "$log" &&
      ! grep -q 'Failing input written\|panic:\|_test.go:[0-9]' "$log"; then
      echo "fuzz-short: $name ended with Go's end-of-fuzztime race (go.dev/issue/75804, no input found): running it again"
      rm -f "$log"
      continue
    fi
    rm -f "$log"
    exit "$rc"
  done
done
