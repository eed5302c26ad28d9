package sdk

import pluginv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/plugin/v1"

// Sources of a [PolicyModule] and a [PolicyFinding].
const (
	// PolicySourceVendor is a policy of the app config (policies.toml),
	// carried with each job.
	PolicySourceVendor = "vendor"
	// PolicySourceCustomer is a policy of the agent's own configuration
	// (agentd --policy-dir), which imsd cannot change.
	PolicySourceCustomer = "customer"
)

// Levels of a [PolicyFinding]: the rule that produced it.
const (
	// PolicyDeny blocks the apply.
	PolicyDeny = "deny"
	// PolicyWarn is shown and blocks nothing.
	PolicyWarn = "warn"
)

// PolicyModule is one rego policy a plan must pass before it is applied
// (protocol 1.3). Its rules deny and warn are sets of messages.
// plugins/policy evaluates them.
type PolicyModule struct {
	// Name is the policy's file: its path in the app config for a vendor
	// policy, its path on the agent for a customer policy. Errors in the
	// module name it.
	Name string `json:"name"`
	// Source is PolicySourceVendor or PolicySourceCustomer.
	Source string `json:"source"`
	// Rego is the module's text.
	Rego string `json:"rego"`
}

// PolicyFinding is one message of a policy's deny or warn rule (protocol
// 1.3).
type PolicyFinding struct {
	// Policy is the module's Name.
	Policy string `json:"policy"`
	// Source is PolicySourceVendor or PolicySourceCustomer.
	Source string `json:"source"`
	// Level is PolicyDeny or PolicyWarn.
	Level   string `json:"level"`
	Message string `json:"message"`
}

// String is the finding as one line: "deny [customer] no-iam.rego: no new
// IAM roles in maintenance mode".
func (f PolicyFinding) String() string {
	return f.Level + " [" + f.Source + "] " + f.Policy + ": " + f.Message
}

func policiesToProto(ms []PolicyModule) []*pluginv1.PolicyModule {
	var out []*pluginv1.PolicyModule
	for _, m := range ms {
		out = append(out, &pluginv1.PolicyModule{Name: m.Name, Source: m.Source, Rego: m.Rego})
	}
	return out
}

func policiesFromProto(ms []*pluginv1.PolicyModule) []PolicyModule {
	var out []PolicyModule
	for _, m := range ms {
		out = append(out, PolicyModule{Name: m.GetName(), Source: m.GetSource(), Rego: m.GetRego()})
	}
	return out
}

func findingsToProto(fs []PolicyFinding) []*pluginv1.PolicyFinding {
	var out []*pluginv1.PolicyFinding
	for _, f := range fs {
		out = append(out, &pluginv1.PolicyFinding{Policy: validUTF8(f.Policy), Source: f.Source, Level: f.Level,
			Message: validUTF8(f.Message)})
	}
	return out
}

func findingsFromProto(fs []*pluginv1.PolicyFinding) []PolicyFinding {
	var out []PolicyFinding
	for _, f := range fs {
		out = append(out, PolicyFinding{Policy: f.GetPolicy(), Source: f.GetSource(), Level: f.GetLevel(), Message: f.GetMessage()})
	}
	return out
}
