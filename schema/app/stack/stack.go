// Package stack generates an install's install stack from its app
// config: the template the customer runs in their own account, which
// creates the agent, a role per permission mode, the install's registry,
// and holds the customer's inputs and secrets. Its parameters are the
// customer's control panel. Four formats: CloudFormation (CloudFormation
// generates the template, cloudformation.go), Azure (an ARM template
// deployed into a resource group, azure.go), Google Cloud (a Terraform
// configuration for Infrastructure Manager, gcp.go) and local (a script
// and a stack config that run agentd on this machine, local.go).
//
// Both hand the agent an internal/stackconfig file; the generator is a
// pure function of the app config and Options.
package stack

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/byoc-dev/byoc/internal/stackconfig"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// Options is what a stack needs beside the app config.
type Options struct {
	App *config.App
	// Install is the install's name.
	Install string
	// Labels are the install's labels: every resource that takes tags is
	// tagged byoc:label:KEY=VALUE with each, besides byoc:install, so the
	// customer's bill and inventory group by them.
	Labels map[string]string
	// IMS is imsd's URL as the agent reaches it.
	IMS string
	// IMSKeyID is the fingerprint of imsd's job signing key.
	IMSKeyID string
	// AgentURL and AgentSHA256 are where a CloudFormation stack's
	// instance downloads agentd (linux/amd64) and its SHA-256.
	AgentURL, AgentSHA256 string
	// PluginsURL and PluginsSHA256 are where it downloads byoc-plugins,
	// installed beside agentd (the heavy built-in types), and its SHA-256.
	PluginsURL, PluginsSHA256 string
	// Params are parameter values by stack parameter name: defaults of a
	// CloudFormation template, values of a local stack.
	Params map[string]string
}

// Parameter is one stack parameter the customer fills.
type Parameter struct {
	Name        string
	Description string
	// Kind is mode, input, secret.
	Kind string
	// Key is the mode, input or secret name the parameter is for.
	Key       string
	Sensitive bool
	// Optional parameters may be left empty.
	Optional bool
	Default  string
	// For inputs: the input itself.
	Input *config.Input
}

// ModeParameter is stackconfig.ModeParameter.
func ModeParameter(mode string) string { return stackconfig.ModeParameter(mode) }

// InputParameter is the stack parameter of a customer-provided input.
func InputParameter(name string) string { return "Input" + stackconfig.Pascal(name) }

// SecretParameter is the stack parameter of a secret of secrets.toml.
func SecretParameter(name string) string { return "Secret" + stackconfig.Pascal(name) }

// Parameters lists the parameters the customer fills, beside the fixed
// ones of a format: one per permission mode (break_glass defaults to
// false), per customer-provided input and per secret.
func Parameters(app *config.App) []Parameter {
	var out []Parameter
	for _, m := range stackconfig.Modes {
		def := "true"
		if m == "break_glass" {
			def = "false"
		}
		out = append(out, Parameter{Name: ModeParameter(m), Kind: "mode", Key: m, Default: def,
			Description: fmt.Sprintf("Whether the %s permission mode has a role: false removes it, and the agent fails every %s job naming this parameter.", m, m)})
	}
	for i := range app.Inputs.Inputs {
		in := &app.Inputs.Inputs[i]
		if in.ProvidedBy != "customer" {
			continue
		}
		p := Parameter{Name: InputParameter(in.Name), Kind: "input", Key: in.Name, Sensitive: in.Sensitive, Input: in,
			Optional: !in.Required, Description: cmp.Or(in.Description, "Input "+in.Name+".")}
		if in.Default != nil {
			p.Default = config.InputText(in.Default)
		}
		out = append(out, p)
	}
	for _, s := range app.Secrets.Secrets {
		out = append(out, Parameter{Name: SecretParameter(s.Name), Kind: "secret", Key: s.Name, Sensitive: true,
			Optional: s.Optional, Description: cmp.Or(s.Description, "Secret "+s.Name+".")})
	}
	return out
}

// labelTagPrefix starts the tag key of an install label.
const labelTagPrefix = "byoc:label:"

// check refuses options a stack cannot be made from.
func (o Options) check() error { return o.checkWith(fixedParams) }

// checkWith is check with a format's own fixed parameters.
func (o Options) checkWith(fixed []string) error {
	if o.App == nil {
		return fmt.Errorf("no app config")
	}
	if !installRE.MatchString(o.Install) {
		return fmt.Errorf("install %q: want lowercase letters, digits and - (at most 60)", o.Install)
	}
	for k, v := range o.Labels {
		if len(labelTagPrefix)+len(k) > 128 || len(v) > 256 {
			return fmt.Errorf("label %s: too long for a cloud tag (key at most %d bytes, value 256)", k, 128-len(labelTagPrefix))
		}
	}
	if !strings.HasPrefix(o.IMS, "http://") && !strings.HasPrefix(o.IMS, "https://") {
		return fmt.Errorf("imsd URL %q: want http:// or https://", o.IMS)
	}
	known := map[string]bool{}
	for _, p := range Parameters(o.App) {
		known[p.Name] = true
	}
	for _, p := range fixed {
		known[p] = true
	}
	for k := range o.Params {
		if !known[k] {
			names := slices.Sorted(func(yield func(string) bool) {
				for n := range known {
					if !yield(n) {
						return
					}
				}
			})
			return fmt.Errorf("--param %s: no such stack parameter (known: %s)", k, strings.Join(names, ", "))
		}
	}
	return nil
}

var installRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,59}$`)

// fixedParams are the parameters of every stack beside Parameters'.
var fixedParams = []string{"EnrollmentTokenSecretArn", "AgentBinaryUrl", "AgentBinarySha256", "PluginsBinaryUrl", "PluginsBinarySha256", "InstanceType", "AmiId",
	"VpcMode", "VpcCidr", "ExistingVpcId", "ExistingSubnetId", "Registry"}

// statements reads a mode's inline policy documents (validated as JSON
// objects by the app config's validator).
func statements(file, key string, docs []string) ([]any, error) {
	var out []any
	for i, d := range docs {
		var v map[string]any
		if err := json.Unmarshal([]byte(d), &v); err != nil {
			return nil, fmt.Errorf("%s: %s.statements[%d]: not a JSON policy document: %v", file, key, i, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// modeRole returns permissions.toml's role of mode m (nil: none declared).
func modeRole(p config.Permissions, m string) *config.ModeRole {
	switch m {
	case "provision":
		return p.Provision
	case "maintenance":
		return p.Maintenance
	case "deprovision":
		return p.Deprovision
	case "break_glass":
		return p.BreakGlass
	}
	return nil
}

// usesKubernetes reports whether the app has helm components, whose agent
// needs a cluster (stackconfig.Config.Kubernetes).
func usesKubernetes(app *config.App) bool {
	for _, c := range app.Components {
		if c.Type == "helm" {
			return true
		}
	}
	return false
}
