package config

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"

	"github.com/byoc-dev/byoc/schema/app/diag"
	"github.com/byoc-dev/byoc/schema/app/template"
)

// ResolveInputs returns the value of every input for an install that sets
// values (as text, the way the API and CLI carry them): the install's
// value parsed as the input's type, else install_defaults.inputs, else the
// input's default. Customer-provided inputs without a value are left out.
// Every problem is returned, each naming the input.
func (a *App) ResolveInputs(values map[string]string) (map[string]any, []error) {
	var problems []error
	byName := map[string]Input{}
	for _, in := range a.Inputs.Inputs {
		byName[in.Name] = in
	}
	names := slices.Sorted(maps.Keys(byName))
	for _, name := range slices.Sorted(maps.Keys(values)) {
		if _, ok := byName[name]; !ok {
			problems = append(problems, fmt.Errorf("inputs.%s: no input named %q%s", name, name, suffix(diag.DidYouMean(name, names))))
		}
	}
	out := map[string]any{}
	for _, in := range a.Inputs.Inputs {
		if s, ok := values[in.Name]; ok {
			v, err := ParseInputValue(in, s)
			if err == nil {
				if msg := in.CheckValue(v); msg != "" {
					err = fmt.Errorf("%s", msg)
				}
			}
			if err != nil {
				problems = append(problems, fmt.Errorf("inputs.%s: %w", in.Name, err))
				continue
			}
			out[in.Name] = v
			continue
		}
		if v, ok := a.Metadata.InstallDefaults.Inputs[in.Name]; ok {
			out[in.Name] = v
			continue
		}
		if in.Default != nil {
			out[in.Name] = in.Default
			continue
		}
		if in.Required && in.ProvidedBy != "customer" {
			problems = append(problems, fmt.Errorf("inputs.%s: required input %q is not set (byoc install update INSTALL --input %s=VALUE)", in.Name, in.Name, in.Name))
		}
	}
	return out, problems
}

func suffix(hint string) string {
	if hint == "" {
		return ""
	}
	return " (" + hint + ")"
}

// ParseInputValue reads the text form of a value of input in.
func ParseInputValue(in Input, s string) (any, error) {
	switch in.Type {
	case "number":
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("input %q is a number, not %q", in.Name, s)
		}
		return f, nil
	case "bool":
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("input %q is a boolean (true or false), not %q", in.Name, s)
		}
		return b, nil
	}
	return s, nil
}

// InputText is the text form of an input value, as installs store it: the
// text a reference to the input renders to.
func InputText(v any) string { return template.Text(v) }

// MaxInputValueBytes bounds an input's value as text wherever it is set
// (an install's inputs through the API; installs/*.toml, app.toml's
// install_defaults and a default in inputs.toml as a revision is pushed):
// values render into job configs, which every agent bounds
// (rpc/agentproto.MaxConfigBytes).
const MaxInputValueBytes = 4 << 10

// CheckValue says what is wrong with val as a value of input in, or "".
func (in Input) CheckValue(val any) string {
	switch cmp.Or(in.Type, "string") {
	case "string":
		s, ok := val.(string)
		if !ok {
			return fmt.Sprintf("input %q is a string, not %s", in.Name, goKind(val))
		}
		if in.Pattern != "" {
			if re, err := regexp.Compile("^(?:" + in.Pattern + ")$"); err == nil && !re.MatchString(s) {
				return fmt.Sprintf("%q does not match the pattern %s of input %q", s, in.Pattern, in.Name)
			}
		}
	case "number":
		var n float64
		switch x := val.(type) {
		case int64:
			n = float64(x)
		case float64:
			n = x
		default:
			return fmt.Sprintf("input %q is a number, not %s", in.Name, goKind(val))
		}
		if in.Min != nil && n < *in.Min {
			return fmt.Sprintf("%v is below the minimum %v of input %q", n, *in.Min, in.Name)
		}
		if in.Max != nil && n > *in.Max {
			return fmt.Sprintf("%v is above the maximum %v of input %q", n, *in.Max, in.Name)
		}
	case "bool":
		if _, ok := val.(bool); !ok {
			return fmt.Sprintf("input %q is a boolean, not %s", in.Name, goKind(val))
		}
	case "enum":
		s, ok := val.(string)
		if !ok {
			return fmt.Sprintf("input %q is one of %s, not %s", in.Name, diag.QuoteList(in.Values), goKind(val))
		}
		if !slices.Contains(in.Values, s) {
			return fmt.Sprintf("%q is not a value of input %q; %s", s, in.Name, cmp.Or(diag.DidYouMean(s, in.Values), "use "+diag.QuoteList(in.Values)))
		}
	}
	return ""
}

func goKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64, float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("%T", v)
}
