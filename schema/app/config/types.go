package config

import (
	"fmt"
	"time"
)

// The Go types below are the app config format. Struct tags drive both the
// decoder and the generated JSON Schema (`make generate`):
//
//	toml:"key"       the TOML key
//	doc:"..."        what the key means (also the schema's description)
//	required:"true"  the key must be set
//	enum:"a,b"       the only values allowed
//	default:"x"      what an unset key means (documentation only)

// Metadata is app.toml: who the app is and what installs get by default.
type Metadata struct {
	Name            string          `toml:"name" required:"true" doc:"The app's name: lowercase letters, digits and - (for example \"acme-analytics\")."`
	DisplayName     string          `toml:"display_name" doc:"A human-readable name for consoles."`
	Description     string          `toml:"description" doc:"What the app is, in a sentence."`
	Version         string          `toml:"version" doc:"The vendor's version of this config, shown beside revisions (for example \"2.3.0\")."`
	InstallDefaults InstallDefaults `toml:"install_defaults" doc:"Settings every install starts with; installs/*.toml may override them."`
	Clouds          []string        `toml:"clouds" doc:"The clouds the app installs on, each with its install stack: aws (CloudFormation), azure (an ARM template), gcp (a Terraform configuration for Infrastructure Manager). Empty means aws. permissions.toml's AWS keys need aws, its azure_roles azure, its gcp_roles gcp."`
}

// InstallDefaults are the settings an install gets unless it says otherwise.
type InstallDefaults struct {
	Parallelism     int            `toml:"parallelism" default:"4" doc:"How many components of one install may deploy at once (1 to 64)."`
	RequireApproval bool           `toml:"require_approval" default:"false" doc:"Whether plans wait for an operator's approval (byoc workflow approve) before they apply."`
	Inputs          map[string]any `toml:"inputs" doc:"Default input values, by input name."`
}

// InputsFile is inputs.toml.
type InputsFile struct {
	Groups []InputGroup `toml:"group" doc:"Groups that organise inputs in forms and consoles."`
	Inputs []Input      `toml:"input" doc:"The values each install provides."`
}

// InputGroup groups inputs for display.
type InputGroup struct {
	Name        string `toml:"name" required:"true" doc:"The group's name, referred to by input.group."`
	DisplayName string `toml:"display_name" doc:"A human-readable title."`
	Description string `toml:"description" doc:"What the inputs in the group are for."`
}

// Input is one value an install provides, referenced as {{ .inputs.NAME }}.
type Input struct {
	Name        string   `toml:"name" required:"true" doc:"The input's name: lowercase letters, digits and _."`
	DisplayName string   `toml:"display_name" doc:"A human-readable label."`
	Description string   `toml:"description" doc:"What the input controls."`
	Type        string   `toml:"type" enum:"string,number,bool,enum" default:"string" doc:"The input's type."`
	Default     any      `toml:"default" doc:"The value used when an install gives none. Must match type."`
	Required    bool     `toml:"required" doc:"Every install must set it. Cannot be combined with default."`
	Sensitive   bool     `toml:"sensitive" doc:"The value is masked in consoles and redacted from job logs."`
	Group       string   `toml:"group" doc:"The name of the group the input belongs to."`
	ProvidedBy  string   `toml:"provided_by" enum:"vendor,customer" default:"vendor" doc:"Who sets the value: the vendor (installs/*.toml, byoc) or the customer (the install stack)."`
	Values      []string `toml:"values" doc:"For type enum: the allowed values."`
	Pattern     string   `toml:"pattern" doc:"For type string: a regular expression (RE2) the value must match in full."`
	Min         *float64 `toml:"min" doc:"For type number: the smallest allowed value."`
	Max         *float64 `toml:"max" doc:"For type number: the largest allowed value."`
}

// SecretsFile is secrets.toml.
type SecretsFile struct {
	Secrets []Secret `toml:"secret" doc:"Secrets the customer provides in their own account; referenced as {{ .secrets.NAME }} and resolved only by the agent."`
}

// Secret is a value that never leaves the customer's account.
type Secret struct {
	Name        string `toml:"name" required:"true" doc:"The secret's name: lowercase letters, digits and _."`
	Description string `toml:"description" doc:"What the secret is and where the customer gets it."`
	Optional    bool   `toml:"optional" doc:"An install may come up without it."`
}

// Component is one deployable part (components/*.toml), and also the
// sandbox (sandbox.toml), which is provisioned before all components.
type Component struct {
	Name          string         `toml:"name" doc:"The component's name (lowercase letters, digits and _); defaults to the file name without .toml. Referenced as {{ .components.NAME.outputs.KEY }}."`
	Type          string         `toml:"type" required:"true" doc:"The component type: image, helm, terraform, action, or the type of an installed plugin."`
	Description   string         `toml:"description" doc:"What the component is."`
	Dependencies  []string       `toml:"dependencies" doc:"Components that must be deployed first. A reference to another component's outputs adds it implicitly."`
	Timeout       Duration       `toml:"timeout" default:"30m" doc:"How long one deploy of the component may take, as a Go duration (\"45m\")."`
	DriftSchedule string         `toml:"drift_schedule" doc:"When the agent checks the component for drift (changes made outside byoc), in UTC: five cron fields, or @hourly, @daily, @weekly, @monthly. Unset: never. Needs a component type that can check drift."`
	Config        map[string]any `toml:"config" doc:"The type's own settings, checked against the type's schema. Strings may hold {{ }} references."`
}

// Action is a script that runs in an install (actions/*.toml).
type Action struct {
	Name        string            `toml:"name" doc:"The action's name (lowercase letters, digits and _); defaults to the file name without .toml."`
	Description string            `toml:"description" doc:"What the action does, shown before an operator runs it."`
	Mode        string            `toml:"mode" enum:"provision,maintenance,deprovision,break_glass" default:"maintenance" doc:"The permission mode the action needs."`
	Timeout     Duration          `toml:"timeout" default:"10m" doc:"How long the whole action may run."`
	Network     bool              `toml:"network" doc:"Whether steps may reach the network."`
	HealthCheck bool              `toml:"health_check" doc:"The action's result becomes the install's health. Needs a cron trigger."`
	Env         map[string]string `toml:"env" doc:"Environment of every step; values may hold {{ }} references."`
	Triggers    []Trigger         `toml:"trigger" doc:"When the action runs besides by hand."`
	Steps       []Step            `toml:"step" required:"true" doc:"The steps, run in order; the action stops at the first that fails."`
}

// Trigger says when an action runs.
type Trigger struct {
	Type      string `toml:"type" required:"true" enum:"manual,cron,pre_provision,post_provision,pre_deploy,post_deploy,pre_teardown,post_teardown,pre_deprovision,post_deprovision" doc:"What starts the action."`
	Schedule  string `toml:"schedule" doc:"For type cron: five fields (minute hour day-of-month month day-of-week), or @hourly, @daily, @weekly, @monthly."`
	Component string `toml:"component" doc:"For deploy and teardown hooks: only around this component (default: any)."`
}

// Step is one script of an action.
type Step struct {
	Name   string            `toml:"name" required:"true" doc:"The step's name, shown in job logs."`
	Script string            `toml:"script" doc:"An inline shell script (run with sh -e). Set script or file."`
	File   string            `toml:"file" doc:"A script file, relative to the app directory. Set script or file."`
	Env    map[string]string `toml:"env" doc:"Environment of this step, added to the action's."`
}

// Permissions is permissions.toml: the cloud role of each permission mode.
type Permissions struct {
	Provision   *ModeRole `toml:"provision" doc:"The role used to create the install's infrastructure."`
	Maintenance *ModeRole `toml:"maintenance" doc:"The role used for day-2 deploys and actions."`
	Deprovision *ModeRole `toml:"deprovision" doc:"The role used to tear the install down."`
	BreakGlass  *ModeRole `toml:"break_glass" doc:"The role a break-glass grant elevates to."`
}

// ModeRole is the role one permission mode runs with.
type ModeRole struct {
	Description         string   `toml:"description" doc:"What the role may do, shown to the customer."`
	Policies            []string `toml:"policies" doc:"Managed policies attached to the role (ARNs or names)."`
	PermissionsBoundary string   `toml:"permissions_boundary" doc:"A permissions boundary the role cannot exceed."`
	Statements          []string `toml:"statements" doc:"Inline policy documents (JSON), each a complete policy."`
	AzureRoles          []string `toml:"azure_roles" doc:"Azure: the roles the mode's managed identity gets on the install's resource group, as built-in role names (\"Contributor\", \"Network Contributor\", ...) or role definition GUIDs; empty: Contributor."`
	GCPRoles            []string `toml:"gcp_roles" doc:"Google Cloud: the IAM roles the mode's service account gets on the install's project, as predefined roles (\"roles/compute.admin\", ...) or custom ones (\"projects/P/roles/NAME\"); empty: roles/editor."`
}

// PoliciesFile is policies.toml: rules every plan must pass before it is applied.
type PoliciesFile struct {
	Policies        []Policy        `toml:"policy" doc:"The policies."`
	ClusterPolicies []ClusterPolicy `toml:"cluster_policy" doc:"Kubernetes admission policies installed into the install's cluster with the sandbox, before any component (as the helm release byoc-cluster-policies)."`
}

// ClusterPolicy is a set of Kubernetes admission policies, as YAML
// manifests, that the cluster itself enforces on every change.
type ClusterPolicy struct {
	Name        string `toml:"name" required:"true" doc:"The policy's name."`
	Description string `toml:"description" doc:"What the policy enforces."`
	Kind        string `toml:"kind" required:"true" enum:"validating_admission_policy,kyverno" doc:"validating_admission_policy: ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding objects (admissionregistration.k8s.io/v1), enforced by the API server itself; kyverno: Kyverno policies (kyverno.io), passed through as manifests (the cluster needs Kyverno)."`
	File        string `toml:"file" doc:"The manifests (YAML documents), relative to the app directory. Set file or contents."`
	Contents    string `toml:"contents" doc:"The manifests inline. Set file or contents."`
}

// Policy is one rule set checked against plans.
type Policy struct {
	Name        string   `toml:"name" required:"true" doc:"The policy's name."`
	Description string   `toml:"description" doc:"What the policy enforces."`
	Engine      string   `toml:"engine" required:"true" enum:"rego,cel" doc:"The policy language."`
	AppliesTo   []string `toml:"applies_to" doc:"Component types the policy checks (default: all)."`
	File        string   `toml:"file" doc:"The policy source, relative to the app directory. Set file or contents."`
	Contents    string   `toml:"contents" doc:"The policy source inline. Set file or contents."`
}

// BreakGlass is break_glass.toml: how customers grant temporary elevation.
type BreakGlass struct {
	MaxDuration   Duration         `toml:"max_duration" default:"1h" doc:"The longest grant a customer can approve (at most 24h)."`
	RequireReason bool             `toml:"require_reason" default:"true" doc:"Whether a request must give a reason."`
	Roles         []BreakGlassRole `toml:"role" doc:"Roles a grant can elevate to."`
}

// BreakGlassRole is one elevation a grant can give.
type BreakGlassRole struct {
	Name        string   `toml:"name" required:"true" doc:"The role's name."`
	Description string   `toml:"description" doc:"What the role is for, shown to the customer."`
	Policies    []string `toml:"policies" doc:"Managed policies attached to the role."`
}

// InstallFile is installs/*.toml: an install managed from files.
type InstallFile struct {
	Name            string                       `toml:"name" doc:"The install's name; defaults to the file name without .toml."`
	Inputs          map[string]any               `toml:"inputs" doc:"Input values, by input name."`
	Labels          map[string]string            `toml:"labels" doc:"Labels (key = \"value\", as Kubernetes writes label keys and values) that selectors pick the install by: byoc install list -l tier=canary."`
	RequireApproval *bool                        `toml:"require_approval" doc:"Overrides install_defaults.require_approval."`
	Parallelism     int                          `toml:"parallelism" doc:"Overrides install_defaults.parallelism."`
	Components      map[string]ComponentOverride `toml:"components" doc:"Per-component overrides, by component name."`
	Window          StringList                   `toml:"window" doc:"The vendor's maintenance windows of the install: a string or an array of strings, each DAYS HH:MM-HH:MM ZONE (\"Sat 02:00-06:00 Europe/Berlin\", \"Mon-Fri 22:00-02:00 UTC\"). imsd holds a release's jobs until one is open (and the customer's, set on the agent, too). Unset: no restriction."`
}

// StringList is a list of strings that may be written as one string.
type StringList []string

// ComponentOverride changes one component for one install.
type ComponentOverride struct {
	Config map[string]any `toml:"config" doc:"Merged over the component's config: tables merge key by key, other values replace."`
}

// Duration is a time.Duration written as a Go duration string ("90s").
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"90s\" or \"1h30m\"", b)
	}
	*d = Duration(v)
	return nil
}
