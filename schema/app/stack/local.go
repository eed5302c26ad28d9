package stack

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// The files of a local stack.
const (
	LocalConfig  = "stack.json"
	LocalScript  = "agentd.sh"
	LocalSecrets = "secrets.env"
	LocalToken   = "enroll.token"
)

// LocalFile is one file of a local stack.
type LocalFile struct {
	Name string
	Data []byte
	Mode uint32
}

// Local returns a local stack: a stack config (stack.json) with the same
// permission toggles and customer inputs as the CloudFormation template's
// parameters (Params, by the same names), a secrets file for the secrets
// and sensitive inputs (secrets.env, 0600, values from Params), and a
// script (agentd.sh) that runs agentd's preflight (which checks that
// byoc-plugins is installed beside agentd) and then agentd with them, its
// state in state/ beside them. The enrolment token goes in
// enroll.token (0600), which the script asks for until the agent has
// enrolled. Jobs of a local stack get no cloud credentials: a mode's
// "role" is only whether its parameter is true.
func Local(o Options) ([]LocalFile, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	c := stackconfig.Config{
		Version: stackconfig.Version, Format: stackconfig.FormatLocal, Stack: "stack-" + o.Install, Install: o.Install,
		IMS: o.IMS, IMSKeyID: o.IMSKeyID,
		EnrollToken: stackconfig.Source{File: LocalToken, Parameter: "enroll.token"},
		Modes:       map[string]stackconfig.Role{},
		SecretsFile: LocalSecrets,
		Registry:    o.Params["Registry"],
		Kubernetes:  usesKubernetes(o.App),
	}
	var secretLines []string
	for _, p := range Parameters(o.App) {
		v, set := o.Params[p.Name]
		if !set {
			v = p.Default
		}
		switch p.Kind {
		case "mode":
			if v != "true" && v != "false" {
				return nil, fmt.Errorf("--param %s=%s: want true or false", p.Name, v)
			}
			c.Modes[p.Key] = stackconfig.Role{Enabled: v == "true", Name: "local " + p.Key, Parameter: p.Name}
			if p.Key == "break_glass" {
				for _, r := range o.App.BreakGlass.Roles {
					if c.BreakGlassRoles == nil {
						c.BreakGlassRoles = map[string]stackconfig.Role{}
					}
					c.BreakGlassRoles[r.Name] = stackconfig.Role{Enabled: v == "true", Name: "local break-glass " + r.Name, Parameter: p.Name}
				}
			}
		case "input":
			if c.Inputs == nil {
				c.Inputs = map[string]stackconfig.Input{}
			}
			in := stackconfig.Input{Sensitive: p.Sensitive, Parameter: p.Name}
			if !p.Sensitive && (set || v != "") {
				val := v
				in.Value = &val
			}
			c.Inputs[p.Key] = in
			if p.Sensitive {
				secretLines = append(secretLines, secretLine(p, v, set))
			}
		case "secret":
			if c.Secrets == nil {
				c.Secrets = map[string]stackconfig.Source{}
			}
			c.Secrets[p.Key] = stackconfig.Source{File: LocalSecrets, Parameter: p.Name}
			secretLines = append(secretLines, secretLine(p, v, set))
		}
	}
	if err := c.Check(); err != nil {
		return nil, err
	}
	cj, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	sort.Strings(secretLines)
	secretsText := "# Secrets and sensitive inputs of install " + o.Install + ", NAME=value.\n" +
		"# Only its owner may read this file (chmod 600).\n" + strings.Join(secretLines, "")
	script := fmt.Sprintf(`#!/bin/sh
# byoc local install stack of install %[1]s (app %[2]s).
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
if [ ! -f state/identity.json ] && [ ! -s %[3]s ]; then
	echo "write install %[1]s's enrolment token (byoc install token %[1]s) to $PWD/%[3]s first" >&2
	exit 2
fi
"$AGENTD" preflight --stack-config %[4]s --state-dir state
exec "$AGENTD" --stack-config %[4]s --state-dir state "$@"
`, o.Install, o.App.Metadata.Name, LocalToken, LocalConfig)
	return []LocalFile{
		{Name: LocalConfig, Data: append(cj, '\n'), Mode: 0o600},
		{Name: LocalScript, Data: []byte(script), Mode: 0o755},
		{Name: LocalSecrets, Data: []byte(secretsText), Mode: 0o600},
	}, nil
}

// secretLine is p's line in secrets.env: its value when given, else a
// commented placeholder (an optional value may stay unset).
func secretLine(p Parameter, v string, set bool) string {
	if set || v != "" {
		return p.Key + "=" + v + "\n"
	}
	return "# " + p.Key + "=  (" + strings.ReplaceAll(p.Description, "\n", " ") + ")\n"
}
