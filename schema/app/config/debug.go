package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DebugCommand is a read-only command an operator runs in an install
// (debug/*.toml): byoc debug INSTALL NAME [ARGS...] [--ARG VALUE]. It runs
// as a job of the action type in the maintenance mode, with its
// arguments, checked against their declared shapes, in the environment
// (never in the script's text).
type DebugCommand struct {
	Name        string     `toml:"name" doc:"The command's name (lowercase letters, digits and _); defaults to the file name without .toml."`
	Description string     `toml:"description" doc:"What the command shows."`
	Script      string     `toml:"script" required:"true" doc:"The shell script (run with sh -e). Each argument is in the environment as ARG_NAME (the argument's name in upper case), never put into the script's text: quote it (\"$ARG_SINCE\")."`
	Timeout     Duration   `toml:"timeout" default:"5m" doc:"How long one run may take."`
	Network     bool       `toml:"network" doc:"Whether the script may reach the network."`
	Args        []DebugArg `toml:"arg" doc:"The arguments, in the order positional arguments fill them."`
}

// DebugArg is one typed argument of a debug command.
type DebugArg struct {
	Name        string   `toml:"name" required:"true" doc:"The argument's name (lowercase letters, digits and _): --NAME on the command line, ARG_NAME in the script's environment."`
	Description string   `toml:"description" doc:"What the argument selects."`
	Type        string   `toml:"type" enum:"string,int,enum,duration,component" default:"string" doc:"string (optionally matching pattern), int (within min and max), enum (one of values), duration (a Go duration such as \"10m\"), or component (the name of one of the app's components)."`
	Pattern     string   `toml:"pattern" doc:"For type string: a regular expression (RE2) the value must match in full."`
	Min         *int64   `toml:"min" doc:"For type int: the smallest allowed value."`
	Max         *int64   `toml:"max" doc:"For type int: the largest allowed value."`
	Values      []string `toml:"values" doc:"For type enum: the allowed values."`
	Required    bool     `toml:"required" doc:"Every run must give it. Cannot be combined with default."`
	Default     string   `toml:"default" doc:"The value when a run gives none; must have the argument's shape."`
	Sensitive   bool     `toml:"sensitive" doc:"The value is secret (a password, a token): it is masked (***) in the audit record and the job's stored config, reaches the script only in its environment, and is redacted from its output. Cannot have a default."`
}

// Redacted is what a sensitive argument's value reads as wherever it is
// kept or shown (the audit record, the job's stored config, the answer).
const Redacted = "***"

// Masked returns values with every sensitive argument's value replaced
// by Redacted.
func (d *DebugCommand) Masked(values map[string]string) map[string]string {
	out := maps.Clone(values)
	for _, a := range d.Args {
		if _, ok := out[a.Name]; ok && a.Sensitive {
			out[a.Name] = Redacted
		}
	}
	return out
}

// DebugArgMaxLen is the longest value a debug command's argument may have.
const DebugArgMaxLen = 1024

// DebugCommand returns the debug command named name, or nil.
func (a *App) DebugCommand(name string) *DebugCommand {
	for _, d := range a.DebugCommands {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// DebugComponents are the names a component argument accepts: the
// app's components and the sandbox, if it has one.
func (a *App) DebugComponents() []string {
	var out []string
	if a.Sandbox != nil {
		out = append(out, "sandbox")
	}
	for _, c := range a.Components {
		out = append(out, c.Name)
	}
	return out
}

// ArgError is an argument a debug command refuses.
type ArgError struct {
	Arg     string // the argument's name; empty for a problem with no one argument
	Problem string
}

func (e *ArgError) Error() string {
	if e.Arg == "" {
		return e.Problem
	}
	return "argument " + e.Arg + ": " + e.Problem
}

// EnvName is the environment variable the script reads argument name from.
func EnvName(name string) string { return "ARG_" + strings.ToUpper(name) }

// Bind checks a run's arguments against the command's declared shapes and
// returns every argument's value by name (defaults filled in, arguments
// neither given nor defaulted left out). positional fill the arguments in
// their declared order; named give them by name; components are the names
// a component argument accepts. Anything undeclared, ill-typed, missing
// or given twice is an *ArgError naming the argument.
func (d *DebugCommand) Bind(positional []string, named map[string]string, components []string) (map[string]string, error) {
	if len(positional) > len(d.Args) {
		return nil, &ArgError{Problem: fmt.Sprintf("debug command %s takes at most %d positional arguments (%s), got %d", d.Name, len(d.Args), d.argNames(), len(positional))}
	}
	got := map[string]string{}
	for i, v := range positional {
		got[d.Args[i].Name] = v
	}
	for _, k := range slices.Sorted(maps.Keys(named)) {
		if d.arg(k) == nil {
			msg := fmt.Sprintf("debug command %s has no argument %q", d.Name, k)
			if len(d.Args) > 0 {
				msg += " (its arguments: " + d.argNames() + ")"
			}
			return nil, &ArgError{Arg: k, Problem: msg}
		}
		if _, ok := got[k]; ok {
			return nil, &ArgError{Arg: k, Problem: "given both as a positional argument and by name"}
		}
		got[k] = named[k]
	}
	out := map[string]string{}
	for _, a := range d.Args {
		v, ok := got[a.Name]
		if !ok {
			if a.Required {
				return nil, &ArgError{Arg: a.Name, Problem: "is required"}
			}
			if a.Default == "" {
				continue
			}
			v = a.Default
		}
		if err := a.Check(v, components); err != nil {
			return nil, &ArgError{Arg: a.Name, Problem: err.Error()}
		}
		out[a.Name] = v
	}
	return out, nil
}

// Env is the script's environment of bound arguments (Bind).
func Env(values map[string]string) map[string]string {
	env := map[string]string{}
	for k, v := range values {
		env[EnvName(k)] = v
	}
	return env
}

// Check says whether v has the argument's shape.
func (a *DebugArg) Check(v string, components []string) error {
	switch {
	case len(v) > DebugArgMaxLen:
		return fmt.Errorf("is %d bytes; at most %d are allowed", len(v), DebugArgMaxLen)
	case strings.ContainsRune(v, 0):
		return fmt.Errorf("holds a NUL byte")
	}
	switch a.Type {
	case "", "string":
		if a.Pattern == "" {
			return nil
		}
		re, err := regexp.Compile(`^(?:` + a.Pattern + `)$`)
		if err != nil {
			return fmt.Errorf("the declared pattern %q does not compile: %v", a.Pattern, err)
		}
		if !re.MatchString(v) {
			return fmt.Errorf("%q does not match the pattern %q", v, a.Pattern)
		}
	case "int":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		if a.Min != nil && n < *a.Min {
			return fmt.Errorf("%d is less than the minimum %d", n, *a.Min)
		}
		if a.Max != nil && n > *a.Max {
			return fmt.Errorf("%d is more than the maximum %d", n, *a.Max)
		}
	case "enum":
		if !slices.Contains(a.Values, v) {
			return fmt.Errorf("%q is not one of %s", v, strings.Join(a.Values, ", "))
		}
	case "duration":
		if _, err := time.ParseDuration(v); err != nil {
			return fmt.Errorf("%q is not a duration such as \"10m\" or \"1h30m\"", v)
		}
	case "component":
		if !slices.Contains(components, v) {
			return fmt.Errorf("%q is not a component of the app (its components: %s)", v, strings.Join(components, ", "))
		}
	default:
		return fmt.Errorf("unknown argument type %q", a.Type)
	}
	return nil
}

func (d *DebugCommand) arg(name string) *DebugArg {
	for i := range d.Args {
		if d.Args[i].Name == name {
			return &d.Args[i]
		}
	}
	return nil
}

func (d *DebugCommand) argNames() string {
	var n []string
	for _, a := range d.Args {
		n = append(n, a.Name)
	}
	if len(n) == 0 {
		return "none"
	}
	return strings.Join(n, ", ")
}
