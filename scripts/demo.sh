#!/usr/bin/env bash
# make demo / make demo-stop: start imsd (SQLite) and an enrolled agent for a
# demo install in the background, run a job and follow its logs to the end.
# Works with or without a terminal.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
demo="$root/.demo"
bin="$root/bin"
addr="${BYOC_DEMO_ADDR:-127.0.0.1:7070}"
url="http://$addr"
export BYOC_CONFIG="$demo/byoc-config.json"

stop() {
  for name in agentd imsd; do
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

echo "==> starting imsd on $url (SQLite in $demo/imsd)"
nohup "$bin/imsd" --addr "$addr" --data-dir "$demo/imsd" --heartbeat 2s --lease 10s >"$demo/imsd.log" 2>&1 &
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
byoc app create shop --description "the demo app" >/dev/null
token="$(byoc install create acme --app shop --input region=eu-west-1 -o json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p' | head -n1)"
[ -n "$token" ] || { echo "could not read the enrolment token" >&2; exit 1; }

echo "==> writing acme's local install stack to $demo/stack-acme and starting agentd from it"
# The customer's side, as a local stack: the permission toggles and
# customer inputs in stack.json, the enrolment token in enroll.token;
# agentd.sh runs agentd's preflight, then agentd (state in stack-acme/state).
byoc install stack acme --format local -o "$demo/stack-acme" --ims-url "$url" >/dev/null
(umask 077 && printf '%s\n' "$token" >"$demo/stack-acme/enroll.token")
AGENTD="$bin/agentd" nohup "$demo/stack-acme/agentd.sh" >"$demo/agentd.log" 2>&1 &
echo $! >"$demo/agentd.pid"
for _ in $(seq 100); do
  if byoc install get acme -o json 2>/dev/null | grep -q '"connected": *true'; then break; fi
  sleep 0.1
done

echo "==> running an action on acme and following its logs"
byoc action run acme --follow -- 'echo "hello from $BYOC_INSTALL_ID"; for i in 1 2 3; do echo "step $i"; sleep 0.3; done; echo "greeting=hello" >> "$BYOC_OUTPUTS"'

cat <<MSG

imsd and the agent are running in the background (logs in $demo).
Try, with BYOC_CONFIG=$BYOC_CONFIG (or add the context to your own config):

  export BYOC_CONFIG=$BYOC_CONFIG
  bin/byoc install list
  bin/byoc job list
  bin/byoc action run acme --follow -- 'uname -a; df -h .'
  bin/byoc job logs <JOB> --follow
  bin/agentd preflight --stack-config $demo/stack-acme/stack.json --state-dir $demo/stack-acme/state
  bin/agentd support-bundle -o $demo/bundle.tar.gz --stack-config $demo/stack-acme/stack.json --state-dir $demo/stack-acme/state
  curl -s $url/metrics | grep byoc_

Stop them with: make demo-stop
MSG
