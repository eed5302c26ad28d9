// Package policy is the policy gate of component plugins: it evaluates a
// job's rego policies (OPA, github.com/open-policy-agent/opa) against what
// a plan would change, before anything is applied.
//
// A policy is a rego module (rego v1 syntax) whose rules deny and warn
// are sets of messages: a deny blocks the apply with its message, a warn
// is shown. The vendor's policies come from the app config, the
// customer's from the agent's own configuration; the agent hands both to
// the plugin with each job (sdk.JobContext.Policies).
//
// The two sources are compiled and evaluated apart: a vendor module never
// sees, redefines or extends a customer module, even one of the same
// package, so nothing in the app config can weaken a customer policy.
//
// Policies run on the customer's machine with what the plan carries, so
// they get no network and no view of the process: http.send,
// net.lookup_ip_addr and opa.runtime are not available to them.
//
// Only plugins link this package (OPA is large): agentd reads policy files
// as text and imsd carries the vendor's as text, neither evaluates.
package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

// EvalTimeout bounds one evaluation when the caller's context has no
// deadline of its own.
const EvalTimeout = time.Minute

// Input is what a policy sees as `input`.
type Input struct {
	// Operation is sdk.OpPlan, OpApply or OpDestroy.
	Operation string `json:"operation"`
	// Mode is the job's permission mode: "provision", "maintenance",
	// "deprovision" or "break_glass".
	Mode      string `json:"mode"`
	InstallID string `json:"install_id"`
	Component string `json:"component"`
	// Type is the component type ("terraform", "helm").
	Type string `json:"type"`
	// Changes are what the plan would do, one per object.
	Changes []Change `json:"changes"`
	// Plan is the type's own plan, JSON-like: Terraform's `show -json`
	// of the saved plan, Helm's rendered manifests ({"manifests": [...]}).
	Plan any `json:"plan"`
}

// Change is one planned change as a policy sees it:
// input.changes[_].address, .action ("create", "update", "delete",
// "replace"), .before, .after, .summary.
type Change struct {
	Address string `json:"address"`
	Action  string `json:"action"`
	Before  any    `json:"before"`
	After   any    `json:"after"`
	Summary string `json:"summary"`
}

// NewInput builds the input of a job's policies: the job's install,
// component and mode, the operation, the plan's changes and the type's
// own plan.
func NewInput(job sdk.JobContext, typ, op string, changes []sdk.PlannedChange, plan any) Input {
	in := Input{Operation: op, Mode: job.Mode, InstallID: job.InstallID, Component: job.Component, Type: typ,
		Changes: []Change{}, Plan: plan}
	for _, c := range changes {
		in.Changes = append(in.Changes, Change{Address: c.Address, Action: c.Action, Before: c.Before, After: c.After, Summary: c.Summary})
	}
	return in
}

// CompileError is a policy that does not parse or compile. Its message
// names the policy's file and line: "policy policies/iam.rego:3:
// rego_parse_error: unexpected ...".
type CompileError struct {
	// Policy is the module's name (its file), Source its source.
	Policy, Source string
	// Line is the line of the first problem in the file; 0 if unknown.
	Line int
	// Problems are every problem found, each "FILE:LINE: code: message".
	Problems []string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("%s policy %s", e.Source, strings.Join(e.Problems, "; "))
}

// DeniedError is an apply that a policy denies.
type DeniedError struct {
	// Denials are the deny findings, in order.
	Denials []sdk.PolicyFinding
}

func (e *DeniedError) Error() string {
	msgs := make([]string, len(e.Denials))
	for i, f := range e.Denials {
		msgs[i] = fmt.Sprintf("%s (%s policy %s)", f.Message, f.Source, f.Policy)
	}
	return "denied by policy: " + strings.Join(msgs, "; ")
}

// Denied returns a *DeniedError for the deny findings among fs, or nil
// when there are none.
func Denied(fs []sdk.PolicyFinding) error {
	var d []sdk.PolicyFinding
	for _, f := range fs {
		if f.Level == sdk.PolicyDeny {
			d = append(d, f)
		}
	}
	if len(d) == 0 {
		return nil
	}
	return &DeniedError{Denials: d}
}

// Gate evaluates the job's policies against in, writes one system log
// line per finding ("policy deny [customer] FILE: message") and returns
// the findings, with a *DeniedError when one denies. A plugin calls it
// after planning and before applying; on an error it applies nothing and
// returns the findings with the error.
func Gate(ctx context.Context, job sdk.JobContext, log sdk.Logger, in Input) ([]sdk.PolicyFinding, error) {
	if len(job.Policies) == 0 {
		return nil, nil
	}
	fs, err := Evaluate(ctx, job.Policies, in)
	if err != nil {
		return nil, err
	}
	if log != nil {
		log.System(fmt.Sprintf("policy: %d policies evaluated, %d findings", len(job.Policies), len(fs)))
		for _, f := range fs {
			log.System("policy " + f.String())
		}
	}
	return fs, Denied(fs)
}

// Evaluate evaluates modules against in and returns every message of
// their deny and warn rules: customer findings first, then vendor ones,
// each by policy, level (deny first) and message. A module that does not
// parse or compile is a *CompileError naming its file and line; nothing
// is then evaluated, since a broken policy must not let a plan through.
func Evaluate(ctx context.Context, modules []sdk.PolicyModule, in Input) ([]sdk.PolicyFinding, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, EvalTimeout)
		defer cancel()
	}
	input, err := toJSONValue(in)
	if err != nil {
		return nil, fmt.Errorf("policy input: %w", err)
	}
	for i, m := range modules {
		switch m.Source {
		case sdk.PolicySourceVendor, sdk.PolicySourceCustomer:
		default:
			return nil, fmt.Errorf("policies[%d] (%s): source %q: want %q or %q", i, m.Name, m.Source, sdk.PolicySourceVendor, sdk.PolicySourceCustomer)
		}
	}
	// Compile every group before evaluating any, so a broken policy of
	// either source is reported whatever the other says.
	var groups []*group
	for _, src := range []string{sdk.PolicySourceCustomer, sdk.PolicySourceVendor} {
		var ms []sdk.PolicyModule
		for _, m := range modules {
			if m.Source == src {
				ms = append(ms, m)
			}
		}
		if len(ms) == 0 {
			continue
		}
		g, err := compile(src, ms)
		if err != nil {
			return nil, err
		}
		groups = append(groups, g)
	}
	var out []sdk.PolicyFinding
	for _, g := range groups {
		fs, err := g.eval(ctx, input)
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
	}
	return out, nil
}

// group is the modules of one source, compiled together.
type group struct {
	source   string
	compiler *ast.Compiler
	// packages are the modules' packages in order of first appearance,
	// with the files that make each up.
	packages []pkg
}

type pkg struct {
	path  ast.Ref
	files []string
}

// capabilities are OPA's built-ins less those that reach out of the
// evaluation: the network and the process.
func capabilities() *ast.Capabilities {
	caps := ast.CapabilitiesForThisVersion()
	denied := map[string]bool{"http.send": true, "net.lookup_ip_addr": true, "opa.runtime": true}
	caps.Builtins = slices.DeleteFunc(slices.Clone(caps.Builtins), func(b *ast.Builtin) bool { return denied[b.Name] })
	caps.AllowNet = []string{}
	return caps
}

func compile(source string, ms []sdk.PolicyModule) (*group, error) {
	g := &group{source: source}
	parsed := map[string]*ast.Module{}
	for i, m := range ms {
		name := m.Name
		if name == "" {
			name = fmt.Sprintf("%s-policy-%d.rego", source, i)
		}
		if _, dup := parsed[name]; dup {
			return nil, &CompileError{Policy: name, Source: source, Problems: []string{name + ": defined twice"}}
		}
		mod, err := ast.ParseModuleWithOpts(name, m.Rego, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			ce := compileError(name, source, err)
			if _, v0err := ast.ParseModuleWithOpts(name, m.Rego, ast.ParserOptions{RegoVersion: ast.RegoV0}); v0err == nil {
				ce.Problems = append(ce.Problems, name+" is rego v0; write rules as `deny contains msg if { ... }` (rego v1)")
			}
			return nil, ce
		}
		if mod == nil {
			return nil, &CompileError{Policy: name, Source: source, Problems: []string{name + ": empty module (want a package with deny or warn rules)"}}
		}
		parsed[name] = mod
		i := slices.IndexFunc(g.packages, func(p pkg) bool { return p.path.Equal(mod.Package.Path) })
		if i < 0 {
			g.packages = append(g.packages, pkg{path: mod.Package.Path})
			i = len(g.packages) - 1
		}
		g.packages[i].files = append(g.packages[i].files, name)
	}
	c := ast.NewCompiler().WithCapabilities(capabilities())
	c.Compile(parsed)
	if c.Failed() {
		name := ms[0].Name
		if len(c.Errors) > 0 && c.Errors[0].Location != nil && c.Errors[0].Location.File != "" {
			name = c.Errors[0].Location.File
		}
		return nil, compileError(name, source, c.Errors)
	}
	g.compiler = c
	return g, nil
}

// compileError names the file and line of each problem in err.
func compileError(name, source string, err error) *CompileError {
	ce := &CompileError{Policy: name, Source: source}
	var errs ast.Errors
	var one *ast.Error
	if errors.As(err, &one) {
		errs = ast.Errors{one}
	} else if !errors.As(err, &errs) {
		ce.Problems = []string{name + ": " + err.Error()}
		return ce
	}
	for _, e := range errs {
		file, line := name, 0
		if e.Location != nil {
			if e.Location.File != "" {
				file = e.Location.File
			}
			line = e.Location.Row
		}
		if ce.Line == 0 && file == name {
			ce.Line = line
		}
		at := file
		if line > 0 {
			at = fmt.Sprintf("%s:%d", file, line)
		}
		ce.Problems = append(ce.Problems, fmt.Sprintf("%s: %s: %s", at, e.Code, e.Message))
	}
	if len(ce.Problems) == 0 {
		ce.Problems = []string{name + ": " + err.Error()}
	}
	return ce
}

// eval evaluates each package's deny and warn rules.
func (g *group) eval(ctx context.Context, input any) ([]sdk.PolicyFinding, error) {
	var out []sdk.PolicyFinding
	for _, p := range g.packages {
		name := strings.Join(p.files, ", ")
		rs, err := rego.New(
			rego.Compiler(g.compiler),
			rego.Query(p.path.String()),
			rego.Input(input),
			rego.StrictBuiltinErrors(true),
		).Eval(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s policy %s: evaluate: %w", g.source, name, err)
		}
		if len(rs) == 0 || len(rs[0].Expressions) == 0 {
			continue
		}
		doc, _ := rs[0].Expressions[0].Value.(map[string]any)
		var fs []sdk.PolicyFinding
		for _, level := range []string{sdk.PolicyDeny, sdk.PolicyWarn} {
			msgs, err := messages(doc[level])
			if err != nil {
				return nil, fmt.Errorf("%s policy %s: rule %s: %w", g.source, name, level, err)
			}
			for _, m := range msgs {
				fs = append(fs, sdk.PolicyFinding{Policy: name, Source: g.source, Level: level, Message: m})
			}
		}
		out = append(out, fs...)
	}
	return out, nil
}

// messages reads a deny or warn rule's value: a set (or array) of
// strings; an object with a "msg" string (conftest's style) counts as
// that message, anything else as its JSON. Undefined is no message.
func messages(v any) ([]string, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("must be a set of messages, got %T", v)
	}
	var out []string
	for _, e := range list {
		switch e := e.(type) {
		case string:
			out = append(out, e)
		case map[string]any:
			if m, ok := e["msg"].(string); ok {
				out = append(out, m)
				continue
			}
			b, _ := json.Marshal(e)
			out = append(out, string(b))
		default:
			b, _ := json.Marshal(e)
			out = append(out, string(b))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// toJSONValue turns v into the maps, slices and scalars rego expects.
func toJSONValue(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	if err := d.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}
