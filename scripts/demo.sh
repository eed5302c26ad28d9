#!/usr/bin/env bash
# make demo / make demo-stop: start imsd (SQLite) and an enrolled agent for a
# demo install in the background, run a job and follow its logs to the end.
# With Debian's docker-registry installed it also shows artifact custody: a
# vendor registry with imsd as its token server, the build agent syncing
# the demo image (packed by scripts/demoimage) into it, and the install's
# agent deploying it into its own registry with a one-time grant.
# Works with or without a terminal.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# make passes DEMO and BIN (make demo DEMO=/tmp/d BIN=/tmp/b moves both).
demo="${BYOC_DEMO_DIR:-$root/.demo}"
bin="${BYOC_DEMO_BIN:-$root/bin}"
addr="${BYOC_DEMO_ADDR:-127.0.0.1:7070}"
url="http://$addr"
reg_addr="${BYOC_DEMO_REGISTRY_ADDR:-127.0.0.1:7071}"
export BYOC_CONFIG="$demo/byoc-config.json"

stop() {
  for name in agentd agentd-build registry imsd; do
    pidfile="$demo/$name.pid"
    if [ -f "$pidfile" ]; then
      pid="$(cat "$pidfile")"
      if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        echo "stopped $name (pid $pid)"
      fi
      rm -f "$pidfile"
    fi
  done
}

case "${1:-start}" in
stop)
  stop
  echo "demo state is kept in $demo; 'make clean' removes it"
  exit 0
  ;;
start) ;;
*) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac

stop >/dev/null 2>&1 || true
rm -rf "$demo"
mkdir -p "$demo"

custody=""
registry_flags=()
egress_flags=()
if command -v docker-registry >/dev/null 2>&1; then
  custody=1
  registry_flags=(--registry-url "http://$reg_addr")
  egress_flags=(--insecure-sandbox-egress-allow "$reg_addr")
else
  echo "(docker-registry is not installed: skipping the vendor registry and the image component; apt-get install docker-registry)"
fi

echo "==> starting imsd on $url (SQLite in $demo/imsd)"
nohup "$bin/imsd" --addr "$addr" --data-dir "$demo/imsd" --heartbeat 2s --lease 10s "${registry_flags[@]}" >"$demo/imsd.log" 2>&1 &
echo $! >"$demo/imsd.pid"
byoc() { "$bin/byoc" "$@"; }
ready=""
for _ in $(seq 100); do
  if ! kill -0 "$(cat "$demo/imsd.pid")" 2>/dev/null; then echo "imsd failed to start:" >&2; cat "$demo/imsd.log" >&2; exit 1; fi
  if [ -s "$demo/imsd/admin.token" ] && byoc --server "$url" --token "$(cat "$demo/imsd/admin.token")" whoami >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.1
done
[ -n "$ready" ] || { echo "imsd is not ready; see $demo/imsd.log" >&2; exit 1; }
byoc context add demo --server "$url" --token "$(cat "$demo/imsd/admin.token")" --use >/dev/null

if [ -n "$custody" ]; then
  echo "==> starting the vendor registry on $reg_addr (docker-registry, token auth: imsd is its token server)"
  mkdir -p "$demo/registry"
  cat >"$demo/registry/config.yml" <<YAML
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: "$demo/registry/data"
http:
  addr: "$reg_addr"
auth:
  token:
    realm: "$url/v2/token"
    service: "byoc-registry"
    issuer: "byoc-imsd"
    rootcertbundle: "$demo/imsd/registry-token.crt"
YAML
  nohup docker-registry serve "$demo/registry/config.yml" >"$demo/registry.log" 2>&1 &
  echo $! >"$demo/registry.pid"

  echo "==> starting the build agent (agentd --role build: the only writer of the vendor registry)"
  btoken="$(byoc build agent-token -o json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p' | head -n1)"
  # Its plugins run in a sandbox that shows no host path unless named
  # (the demo image's OCI layout is read from $demo/oci) and reaches no
  # loopback address unless named: the vendor registry runs on this
  # machine's loopback here, as it never would in production.
  mkdir -p "$demo/oci"
  nohup "$bin/agentd" --role build --ims "$url" --enroll-token "$btoken" --state-dir "$demo/build-agent" \
    --sandbox-read-only "$demo/oci" "${egress_flags[@]}" >"$demo/agentd-build.log" 2>&1 &
  echo $! >"$demo/agentd-build.pid"

  echo "==> packing the demo image into an OCI layout, then syncing it into the vendor registry"
  (cd "$root" && go run ./scripts/demoimage "$demo/oci/web") >/dev/null
  byoc build sync "oci:$demo/oci/web:1.0" --repo acme/web --wait
  digest="$(byoc build list --repo acme/web -o json | sed -n 's/.*"digest": *"\([^"]*\)".*/\1/p' | head -n1)"

  mkdir -p "$demo/app/components" "$demo/app/installs"
  printf 'name = "shop"\ndescription = "the demo app"\n' >"$demo/app/app.toml"
  printf 'type = "image"\ndescription = "The demo image, by digest: a build in the vendor registry."\n[config]\nsource = "acme/web@%s"\n' "$digest" >"$demo/app/components/web.toml"
  printf '# the demo install\n' >"$demo/app/installs/acme.toml"
  byoc app push "$demo/app" >/dev/null
  token="$(byoc install token acme -o json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p' | head -n1)"
else
  byoc app create shop --description "the demo app" >/dev/null
  token="$(byoc install create acme --app shop -o json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p' | head -n1)"
fi
[ -n "$token" ] || { echo "could not read the enrolment token" >&2; exit 1; }

echo "==> writing acme's local install stack to $demo/stack-acme and starting agentd from it (its install registry: an OCI layout in its state dir)"
# The customer's side, as a local stack: the permission toggles and
# customer inputs in stack.json, the enrolment token in enroll.token;
# agentd.sh runs agentd's preflight, then agentd (state in stack-acme/state).
byoc install stack acme --format local -o "$demo/stack-acme" --ims-url "$url" >/dev/null
(umask 077 && printf '%s\n' "$token" >"$demo/stack-acme/enroll.token")
# (The image type pulls from the vendor registry on this machine's loopback.)
AGENTD="$bin/agentd" nohup "$demo/stack-acme/agentd.sh" "${egress_flags[@]}" >"$demo/agentd.log" 2>&1 &
echo $! >"$demo/agentd.pid"
for _ in $(seq 100); do
  if byoc install get acme -o json 2>/dev/null | grep -q '"connected": *true'; then break; fi
  sleep 0.1
done

if [ -n "$custody" ]; then
  echo "==> deploying acme: the image goes vendor registry -> install registry, by digest, with a one-time grant"
  byoc install provision acme --wait
  echo "==> what acme runs, with its lineage"
  byoc install images acme
fi

echo "==> running an action on acme and following its logs"
byoc action run acme --follow -- 'echo "hello from $BYOC_INSTALL_ID"; for i in 1 2 3; do echo "step $i"; sleep 0.3; done; echo "greeting=hello" >> "$BYOC_OUTPUTS"'

cat <<MSG

imsd and the agent are running in the background (logs in $demo).
Try, with BYOC_CONFIG=$BYOC_CONFIG (or add the context to your own config):

  export BYOC_CONFIG=$BYOC_CONFIG
  $bin/byoc install list
  $bin/byoc job list
  $bin/byoc build list
  $bin/byoc install images acme
  $bin/byoc action run acme --follow -- 'uname -a; df -h .'
  $bin/byoc job logs <JOB> --follow
  $bin/agentd preflight --stack-config $demo/stack-acme/stack.json --state-dir $demo/stack-acme/state
  $bin/agentd support-bundle -o $demo/bundle.tar.gz --stack-config $demo/stack-acme/stack.json --state-dir $demo/stack-acme/state
  curl -s $url/metrics | grep byoc_

Stop them with: make demo-stop
MSG
