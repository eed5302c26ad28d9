#!/bin/sh
# byoc local install stack of install acme (app acme-analytics).
# Runs agentd on this machine with the permission toggles and customer
# inputs of stack.json and the secrets of secrets.env; state in ./state.
# Change a toggle: edit "enabled" under "modes" in stack.json (the
# parameters EnableProvision, EnableMaintenance, EnableDeprovision,
# EnableBreakGlass), then restart this script.
# agentd runs the terraform, image and helm types through byoc-plugins,
# which must be installed beside it (same directory, same release), or
# named by BYOC_BUNDLED_PLUGINS=PATH; the preflight checks it.
set -eu
cd "$(dirname "$0")"
AGENTD="${AGENTD:-agentd}"
if [ ! -f state/identity.json ] && [ ! -s enroll.token ]; then
	echo "write install acme's enrolment token (byoc install token acme) to $PWD/enroll.token first" >&2
	exit 2
fi
"$AGENTD" preflight --stack-config stack.json --state-dir state
exec "$AGENTD" --stack-config stack.json --state-dir state "$@"
