// Package jobconfig is the config pipeline a job goes through on the
// agent before its plugin sees the config: imsd adds reserved top-level
// keys (the secrets, customer inputs, values to redact and the vendor's
// policies a job needs), and the agent takes each out again, puts the
// customer's inputs and secrets in place of their {{ }} references, and
// hands the plugin what is left. The agent and sdktest both run this
// package's code, so a plugin's tests see the config its jobs will see.
//
// Because the agent takes the reserved keys out of every config, a
// plugin's own config cannot use them: [CheckSchema] refuses a schema that
// declares one, and `describe`, `byoc plugin register` and `byoc app
// validate --plugin-schema` run it.
package jobconfig

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// The reserved top-level keys of a job config.
const (
	// SecretsKey lists the customer's secrets the job receives, as
	// environment variables of its operations and in place of every
	// {{ .secrets.NAME }} in the config's strings.
	SecretsKey = "secrets"
	// CustomerInputsKey lists the customer-provided inputs (from the
	// install stack) whose {{ .inputs.NAME }} the agent fills in.
	CustomerInputsKey = "customer_inputs"
	// SensitiveKey lists values the agent redacts from everything the job
	// sends back (the values of sensitive inputs).
	SensitiveKey = "sensitive"
	// VendorPoliciesKey carries the vendor's policies for the job's type.
	VendorPoliciesKey = "vendor_policies"
	// ImportIDKey carries, in an import job, the id of the existing
	// resource the plugin adopts (sdk.ImportRequest.ID).
	ImportIDKey = "import_id"
)

// ReservedKeys are the reserved top-level keys, sorted.
var ReservedKeys = []string{CustomerInputsKey, ImportIDKey, SecretsKey, SensitiveKey, VendorPoliciesKey}

// IsReserved reports whether key is a reserved top-level config key.
func IsReserved(key string) bool { return slices.Contains(ReservedKeys, key) }

// ReservedError is a config schema declaring a reserved key.
type ReservedError struct {
	// Key is the reserved key; Where says how the schema declares it
	// ("properties", "required", ...).
	Key, Where string
}

func (e *ReservedError) Error() string {
	return fmt.Sprintf("%s: %q is a reserved config key (the agent takes %s out of every config before the plugin sees it); "+
		"rename the field (reserved: %s)", e.Where, e.Key, describeKey(e.Key), strings.Join(ReservedKeys, ", "))
}

func describeKey(k string) string {
	switch k {
	case SecretsKey:
		return "the list of secrets a job receives"
	case CustomerInputsKey:
		return "the list of customer inputs it fills in"
	case SensitiveKey:
		return "the list of values it redacts"
	case VendorPoliciesKey:
		return "the vendor's policies"
	case ImportIDKey:
		return "the id an import job adopts"
	}
	return "it"
}

// CheckSchema refuses a config schema (JSON) that declares a reserved
// key at the top level of the config: as a property, in required, or in
// dependentRequired, also inside allOf, anyOf, oneOf and $ref'd $defs of
// the top level. An empty schema passes. It does not validate the
// schema otherwise (configschema does).
func CheckSchema(schema string) error {
	if strings.TrimSpace(schema) == "" {
		return nil
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(schema), &doc); err != nil {
		return nil // not an object: configschema reports it
	}
	defs, _ := doc["$defs"].(map[string]any)
	seen := map[string]bool{}
	var walk func(s map[string]any, where string) error
	walk = func(s map[string]any, where string) error {
		if props, ok := s["properties"].(map[string]any); ok {
			for _, k := range slices.Sorted(maps.Keys(props)) {
				if IsReserved(k) {
					return &ReservedError{Key: k, Where: where + "properties"}
				}
			}
		}
		if req, ok := s["required"].([]any); ok {
			for _, v := range req {
				if k, _ := v.(string); IsReserved(k) {
					return &ReservedError{Key: k, Where: where + "required"}
				}
			}
		}
		if dr, ok := s["dependentRequired"].(map[string]any); ok {
			for _, k := range slices.Sorted(maps.Keys(dr)) {
				if IsReserved(k) {
					return &ReservedError{Key: k, Where: where + "dependentRequired"}
				}
				list, _ := dr[k].([]any)
				for _, v := range list {
					if r, _ := v.(string); IsReserved(r) {
						return &ReservedError{Key: r, Where: where + "dependentRequired." + k}
					}
				}
			}
		}
		for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
			list, _ := s[kw].([]any)
			for i, sub := range list {
				if m, ok := sub.(map[string]any); ok {
					if err := walk(m, fmt.Sprintf("%s%s[%d].", where, kw, i)); err != nil {
						return err
					}
				}
			}
		}
		if ref, ok := s["$ref"].(string); ok {
			name, ok := strings.CutPrefix(ref, "#/$defs/")
			if def, isMap := defs[name].(map[string]any); ok && isMap && !seen[name] {
				seen[name] = true
				if err := walk(def, "$defs."+name+"."); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(doc, "")
}

// Sources are what the agent fills a config in from.
type Sources struct {
	// Secrets are the customer's secrets, by name (the agent's secrets
	// file).
	Secrets map[string]string
	// Inputs are the customer-provided inputs, by name (the install
	// stack's).
	Inputs map[string]string
	// MissingInput, if set, is the error for a customer input the config
	// lists that Inputs does not have; nil says so plainly.
	MissingInput func(name string) error
	// SecretsOrigin names where Secrets come from in errors ("its
	// --secrets-file").
	SecretsOrigin string
}

// Policy is one of the vendor's policies a config carried.
type Policy struct{ Name, Rego string }

// Prepared is a config after the pipeline.
type Prepared struct {
	// Config is what the plugin sees: no reserved key, every reference
	// to a listed input or secret replaced by its value.
	Config map[string]any
	// SecretEnv are the secrets the config listed, by name: the
	// environment variables of the job's operations.
	SecretEnv map[string]string
	// Sensitive are the values to redact that the config listed.
	Sensitive []string
	// Policies are the vendor's policies the config carried.
	Policies []Policy
	// ImportID is the id of the resource an import job adopts, as the
	// config carried it; empty for every other job.
	ImportID string
}

// Prepare runs the whole pipeline, in the agent's order: TakeSensitive,
// then Resolve. The error names the config field.
func Prepare(config map[string]any, src Sources) (Prepared, error) {
	rest, sensitive, err := TakeSensitive(config)
	if err != nil {
		return Prepared{Sensitive: sensitive}, err
	}
	p, err := Resolve(rest, src)
	p.Sensitive = sensitive
	return p, err
}

// Resolve runs the pipeline after TakeSensitive: it fills in the listed
// customer inputs, takes out the vendor's policies, then resolves the
// listed secrets.
func Resolve(config map[string]any, src Sources) (Prepared, error) {
	config, err := ResolveInputs(config, src)
	if err != nil {
		return Prepared{}, err
	}
	config, policies, err := TakePolicies(config)
	if err != nil {
		return Prepared{}, err
	}
	config, importID, err := TakeImportID(config)
	if err != nil {
		return Prepared{}, err
	}
	config, env, err := ResolveSecrets(config, src)
	if err != nil {
		return Prepared{}, err
	}
	return Prepared{Config: config, SecretEnv: env, Policies: policies, ImportID: importID}, nil
}

// TakeImportID takes an import job's import id out of config.
func TakeImportID(config map[string]any) (map[string]any, string, error) {
	raw, ok := config[ImportIDKey]
	if !ok {
		return config, "", nil
	}
	rest := maps.Clone(config)
	delete(rest, ImportIDKey)
	id, ok := raw.(string)
	if !ok || strings.TrimSpace(id) == "" {
		return rest, "", fmt.Errorf("config.%s: must be a non-empty string (the id of the resource to import)", ImportIDKey)
	}
	return rest, id, nil
}

// TakeSensitive takes the "sensitive" list out of config. The values
// read before an error are returned with it, for redacting the error.
func TakeSensitive(config map[string]any) (map[string]any, []string, error) {
	raw, ok := config[SensitiveKey]
	if !ok {
		return config, nil, nil
	}
	rest := maps.Clone(config)
	delete(rest, SensitiveKey)
	list, ok := raw.([]any)
	if !ok {
		return rest, nil, fmt.Errorf("config.%s: must be a list of strings", SensitiveKey)
	}
	var out []string
	for i, v := range list {
		s, ok := v.(string)
		if !ok {
			return rest, out, fmt.Errorf("config.%s[%d]: must be a string", SensitiveKey, i)
		}
		out = append(out, s)
	}
	return rest, out, nil
}

// TakePolicies takes the vendor's policies out of config.
func TakePolicies(config map[string]any) (map[string]any, []Policy, error) {
	raw, ok := config[VendorPoliciesKey]
	if !ok {
		return config, nil, nil
	}
	rest := maps.Clone(config)
	delete(rest, VendorPoliciesKey)
	list, ok := raw.([]any)
	if !ok {
		return rest, nil, fmt.Errorf("config.%s: must be a list of policies", VendorPoliciesKey)
	}
	var out []Policy
	for i, v := range list {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		text, ok := m["rego"].(string)
		if name == "" || !ok {
			return rest, nil, fmt.Errorf("config.%s[%d]: must be an object with a name and rego text", VendorPoliciesKey, i)
		}
		out = append(out, Policy{Name: name, Rego: text})
	}
	return rest, out, nil
}

// Name is the form of a secret's or a customer input's name.
var Name = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// walkStrings applies f to every string in v, naming its path.
func walkStrings(path string, v any, f func(path, s string) (string, error)) (any, error) {
	switch v := v.(type) {
	case string:
		return f(path, v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			var err error
			if out[i], err = walkStrings(fmt.Sprintf("%s[%d]", path, i), e, f); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			var err error
			if out[k], err = walkStrings(path+"."+k, e, f); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return v, nil
}

// ResolveSecrets takes the "secrets" list out of config and returns the
// named secrets as environment variables, with every {{ .secrets.NAME }}
// in the config's strings replaced by the value.
func ResolveSecrets(config map[string]any, src Sources) (map[string]any, map[string]string, error) {
	raw, ok := config[SecretsKey]
	if !ok {
		return config, nil, nil
	}
	rest := maps.Clone(config)
	delete(rest, SecretsKey)
	list, ok := raw.([]any)
	if !ok {
		return nil, nil, fmt.Errorf("config.%s: must be a list of secret names", SecretsKey)
	}
	env := map[string]string{}
	for i, item := range list {
		name, ok := item.(string)
		if !ok || !Name.MatchString(name) {
			return nil, nil, fmt.Errorf("config.%s[%d]: must be a secret name of letters, digits and _", SecretsKey, i)
		}
		v, ok := src.Secrets[name]
		if !ok {
			origin := ""
			if src.SecretsOrigin != "" {
				origin = " (" + src.SecretsOrigin + ")"
			}
			return nil, nil, fmt.Errorf("config.%s[%d]: secret %q is not defined on this agent%s", SecretsKey, i, name, origin)
		}
		env[name] = v
	}
	out, err := walkStrings("config", rest, func(path, s string) (string, error) {
		out, err := agentproto.ReplaceSecrets(s, func(n string) (string, bool) { v, ok := env[n]; return v, ok })
		if err != nil {
			return "", fmt.Errorf("%s: %v (list it in config.%s)", path, err, SecretsKey)
		}
		return out, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out.(map[string]any), env, nil
}

// ResolveInputs takes the "customer_inputs" list out of config and puts
// each listed input's value in place of its {{ .inputs.NAME }} in the
// config's strings.
func ResolveInputs(config map[string]any, src Sources) (map[string]any, error) {
	raw, ok := config[CustomerInputsKey]
	if !ok {
		return config, nil
	}
	rest := maps.Clone(config)
	delete(rest, CustomerInputsKey)
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("config.%s: must be a list of input names", CustomerInputsKey)
	}
	ours := map[string]bool{}
	for i, item := range list {
		name, ok := item.(string)
		if !ok || !Name.MatchString(name) {
			return nil, fmt.Errorf("config.%s[%d]: must be an input name of letters, digits and _", CustomerInputsKey, i)
		}
		if _, ok := src.Inputs[name]; !ok {
			if src.MissingInput != nil {
				return nil, src.MissingInput(name)
			}
			return nil, fmt.Errorf("customer input %q is not set", name)
		}
		ours[name] = true
	}
	out, err := walkStrings("config", rest, func(path, s string) (string, error) {
		out, err := agentproto.ReplaceInputs(s, func(n string) (string, bool) { v, ok := src.Inputs[n]; return v, ok }, func(n string) bool { return ours[n] })
		if err != nil {
			return "", fmt.Errorf("%s: %v", path, err)
		}
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	return out.(map[string]any), nil
}
