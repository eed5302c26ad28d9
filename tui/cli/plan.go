package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// planMarks are the marks of planned changes, as Terraform prints them.
var planMarks = map[string]string{"create": "+", "update": "~", "delete": "-", "replace": "-/+"}

// printPlan writes a job's planned changes: a count per action, then one
// line per change and, under an update or replace, one line per
// top-level field that changes ("rules: 1 → 2"), under a create one per
// field.
func printPlan(w io.Writer, changes []*imsv1.PlannedChange) {
	if len(changes) == 0 {
		return
	}
	count := map[string]int{}
	for _, c := range changes {
		count[c.GetAction()]++
	}
	fmt.Fprintf(w, "\nPlan: %d to create, %d to update, %d to delete, %d to replace\n",
		count["create"], count["update"], count["delete"], count["replace"])
	for _, c := range changes {
		mark, ok := planMarks[c.GetAction()]
		if !ok {
			mark = "?"
		}
		line := fmt.Sprintf("  %s %s", mark, planText(c.GetAddress()))
		if c.GetSummary() != "" {
			line += ": " + planText(c.GetSummary())
		}
		fmt.Fprintln(w, line)
		before, after := c.GetBefore().GetStructValue().GetFields(), c.GetAfter().GetStructValue().GetFields()
		switch {
		case c.GetAction() == "create" && after != nil:
			for _, k := range sortedKeys(after) {
				fmt.Fprintf(w, "      %s = %s\n", planText(k), planValue(after[k]))
			}
		case before != nil && after != nil:
			keys := sortedKeys(after)
			for k := range before {
				if _, ok := after[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				b, a := before[k], after[k]
				if proto.Equal(b, a) {
					continue
				}
				fmt.Fprintf(w, "      %s: %s → %s\n", planText(k), planValue(b), planValue(a))
			}
		}
	}
}

func sortedKeys(m map[string]*structpb.Value) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// planValue is a value as compact JSON, "(none)" if absent, cut at 200
// bytes.
func planValue(v *structpb.Value) string {
	if v == nil {
		return "(none)"
	}
	b, err := protojson.Marshal(v)
	if err != nil {
		return "?"
	}
	s := planText(strings.Join(strings.Fields(string(b)), " "))
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	return s
}

// planText makes text from a plugin safe for a terminal: control
// characters become "?".
func planText(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

// planCounts is "1 to create, 2 to update" (only the actions present), or
// "no changes".
func planCounts(changes []*imsv1.PlannedChange) string {
	count := map[string]int{}
	for _, c := range changes {
		count[c.GetAction()]++
	}
	var parts []string
	for _, a := range []string{"create", "update", "delete", "replace"} {
		if count[a] > 0 {
			parts = append(parts, fmt.Sprintf("%d to %s", count[a], a))
		}
	}
	if len(parts) == 0 {
		return "no changes"
	}
	return strings.Join(parts, ", ")
}

// planDigestText is a plan digest cut for a human: "sha256:0123456789ab".
func planDigestText(d string) string {
	return "sha256:" + shortDigest(d)
}

// stepPlan is one step's plan as the CLI shows it.
type stepPlan struct {
	step    *imsv1.WorkflowStep
	changes []*imsv1.PlannedChange
	// findings are the plan job's policy findings.
	findings []*imsv1.PolicyFinding
	// err is set when the plan job could not be read.
	err error
}

// stepPlans reads the planned changes and policy findings of every step
// that has a plan (one GetJob per plan job that is no longer planning; a
// failed plan's job may carry the policy findings that denied it), in step
// order.
func stepPlans(ctx context.Context, c *client, steps []*imsv1.WorkflowStep) []stepPlan {
	var out []stepPlan
	for _, s := range steps {
		if s.GetPlanJobId() == "" {
			continue
		}
		p := stepPlan{step: s}
		if s.GetPlanState() != "planning" {
			res, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: s.GetPlanJobId()}))
			if err != nil {
				p.err = c.wrap(err)
			} else {
				p.changes = res.Msg.GetJob().GetPlannedChanges()
				p.findings = res.Msg.GetJob().GetPolicyFindings()
			}
		}
		out = append(out, p)
	}
	return out
}

// printStepPlans writes each component's plan: a header naming the
// component, its type, the plan's state and digest (and whether it is the
// approved one), then its changes as job get prints them.
func printStepPlans(w io.Writer, plans []stepPlan) {
	for _, p := range plans {
		s := p.step
		head := fmt.Sprintf("Plan of %s (%s, step %s): %s", cmp.Or(s.GetComponent(), s.GetName()), s.GetComponentType(), s.GetName(), s.GetPlanState())
		if s.GetPlanDigest() != "" {
			head += " " + planDigestText(s.GetPlanDigest())
			switch {
			case s.GetApprovedPlanDigest() == s.GetPlanDigest():
				head += ", approved"
			case s.GetApprovedPlanDigest() != "":
				head += ", approved " + planDigestText(s.GetApprovedPlanDigest()) + " (changed)"
			}
		}
		fmt.Fprintln(w, "\n"+head)
		switch {
		case s.GetPlanState() == "planning":
			fmt.Fprintf(w, "  planning (job %s)\n", s.GetPlanJobId())
		case s.GetPlanError() != "":
			fmt.Fprintf(w, "  %s: %s (job %s)\n", s.GetPlanState(), planText(s.GetPlanError()), s.GetPlanJobId())
		case p.err != nil:
			fmt.Fprintf(w, "  cannot read the plan (job %s): %v\n", s.GetPlanJobId(), p.err)
		case len(p.changes) == 0:
			fmt.Fprintln(w, "  no changes")
		default:
			var b strings.Builder
			printPlan(&b, p.changes)
			fmt.Fprint(w, strings.TrimPrefix(b.String(), "\n"))
		}
		if len(p.findings) > 0 {
			var b strings.Builder
			printPolicy(&b, p.findings)
			for _, line := range strings.Split(strings.Trim(b.String(), "\n"), "\n") {
				fmt.Fprintln(w, "  "+line)
			}
		}
	}
}

// writeWorkflowJSON prints a workflow as writeJSON does, with three keys
// added at the end of every step's object: "plannedChanges" and
// "policyFindings" (the step's plan job's, as job get -o json has them;
// empty for a step without a finished plan) and "planReadError" (why the
// plan job could not be read, or ""). Key order stays the API's.
func writeWorkflowJSON(w io.Writer, wf *imsv1.Workflow, plans []stepPlan) error {
	setKind(w, wf.ProtoReflect().Descriptor())
	byStep := map[*imsv1.WorkflowStep]stepPlan{}
	for _, p := range plans {
		byStep[p.step] = p
	}
	steps := make([]json.RawMessage, 0, len(wf.GetSteps()))
	for _, s := range wf.GetSteps() {
		b, err := marshalCompact(s)
		if err != nil {
			return err
		}
		p := byStep[s]
		changes, err := marshalList(p.changes)
		if err != nil {
			return err
		}
		findings, err := marshalList(p.findings)
		if err != nil {
			return err
		}
		readErr := ""
		if p.err != nil {
			readErr = p.err.Error()
		}
		re, _ := json.Marshal(readErr)
		b = append(b[:len(b)-1], `,"plannedChanges":`...)
		b = append(append(b, changes...), `,"policyFindings":`...)
		b = append(append(b, findings...), `,"planReadError":`...)
		b = append(append(b, re...), '}')
		steps = append(steps, b)
	}
	noSteps := proto.Clone(wf).(*imsv1.Workflow)
	noSteps.Steps = nil
	b, err := marshalCompact(noSteps)
	if err != nil {
		return err
	}
	// Compacted, the only `"steps":[]` is the workflow's own key: a string
	// holding those bytes has its quotes escaped.
	list, err := json.Marshal(steps)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	if !bytes.Contains(b, []byte(`"steps":[]`)) {
		return fmt.Errorf("encode json: no steps key in %s", b)
	}
	return writeIndented(w, bytes.Replace(b, []byte(`"steps":[]`), append([]byte(`"steps":`), list...), 1))
}

// marshalCompact is marshalJSON without protojson's varying whitespace.
func marshalCompact(m proto.Message) ([]byte, error) {
	b, err := marshalJSON(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, fmt.Errorf("encode json: %w", err)
	}
	return out.Bytes(), nil
}

// marshalList renders messages as a JSON array ("[]" for none).
func marshalList[M proto.Message](ms []M) ([]byte, error) {
	items := make([]json.RawMessage, 0, len(ms))
	for _, m := range ms {
		b, err := marshalCompact(m)
		if err != nil {
			return nil, err
		}
		items = append(items, b)
	}
	b, err := json.Marshal(items)
	if err != nil {
		return nil, fmt.Errorf("encode json: %w", err)
	}
	return b, nil
}
