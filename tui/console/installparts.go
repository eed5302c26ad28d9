package console

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	tea "charm.land/bubbletea/v2"
	"connectrpc.com/connect"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
	"github.com/byoc-dev/byoc/tui/termtext"
)

// The install view's sections beyond its inputs: its components (state,
// last deploy, outputs, from the steps of its newest provision or
// update), its newest workflow with each step's state (as `byoc workflow
// get` shows them), and its app's actions. They are read again whenever
// the fleet says the install changed, so a running workflow's steps move
// on screen.

// workflowsMsg is an install's newest workflows, with the steps of the
// newest one and of the newest that deploys (provision or update).
type workflowsMsg struct {
	gen    int
	newest *imsv1.Workflow // with steps; nil when there is none
	deploy *imsv1.Workflow // with steps; may be newest itself
	// plans are the newest workflow's plans that are in, by plan job.
	plans map[string]stepPlan
	err   error
}

// stepPlan is a step's plan as the install view shows it: a count per
// action and one line per change, then one per policy finding, cleaned of
// control characters.
type stepPlan struct {
	counts  string
	changes []string
	// findings are the plan job's policy findings, denials first.
	findings []policyLine
}

// policyLine is one policy finding as shown: "deny [customer]
// policies/x.rego: message".
type policyLine struct {
	deny bool
	text string
}

// policyLines renders a job's policy findings, denials first.
func policyLines(fs []*imsv1.PolicyFinding) []policyLine {
	var out []policyLine
	for _, deny := range []bool{true, false} {
		for _, f := range fs {
			if (f.Level == "deny") != deny {
				continue
			}
			out = append(out, policyLine{deny: deny, text: fmt.Sprintf("%s [%s] %s: %s", termtext.Clean(f.Level, " "),
				termtext.Clean(f.Source, " "), termtext.Clean(f.Policy, " "), termtext.Clean(f.Message, " "))})
		}
	}
	return out
}

// maxPlanLines is how many changes of one plan the install view lists.
const maxPlanLines = 5

// planMarks are the marks of planned changes, as byoc job get prints them.
var planMarks = map[string]string{"create": "+", "update": "~", "delete": "-", "replace": "-/+"}

func newStepPlan(changes []*imsv1.PlannedChange, findings []*imsv1.PolicyFinding) stepPlan {
	count := map[string]int{}
	p := stepPlan{findings: policyLines(findings)}
	for _, c := range changes {
		count[c.Action]++
		if len(p.changes) < maxPlanLines {
			mark := cmp.Or(planMarks[c.Action], "?")
			line := mark + " " + termtext.Clean(c.Address, " ")
			if c.Summary != "" {
				line += ": " + termtext.Clean(c.Summary, " ")
			}
			p.changes = append(p.changes, line)
		}
	}
	if n := len(changes) - len(p.changes); n > 0 {
		p.changes = append(p.changes, fmt.Sprintf("… %d more (byoc workflow get)", n))
	}
	var parts []string
	for _, a := range []string{"create", "update", "delete", "replace"} {
		if count[a] > 0 {
			parts = append(parts, fmt.Sprintf("%d to %s", count[a], a))
		}
	}
	p.counts = cmp.Or(strings.Join(parts, ", "), "no changes")
	return p
}

func listWorkflows(ctx context.Context, c imsv1connect.OperatorServiceClient, gen int, install string) tea.Cmd {
	return func() tea.Msg {
		r, err := c.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{Install: install, PageSize: 20}))
		if err != nil {
			return workflowsMsg{gen: gen, err: err}
		}
		get := func(id string) (*imsv1.Workflow, error) {
			g, err := c.GetWorkflow(ctx, connect.NewRequest(&imsv1.GetWorkflowRequest{Id: id}))
			if err != nil {
				return nil, err
			}
			return g.Msg.Workflow, nil
		}
		msg := workflowsMsg{gen: gen}
		wfs := r.Msg.Workflows
		if len(wfs) == 0 {
			return msg
		}
		if msg.newest, err = get(wfs[0].Id); err != nil {
			return workflowsMsg{gen: gen, err: err}
		}
		for _, s := range msg.newest.Steps {
			// A failed plan's job may hold the policy findings that
			// denied it; it is read too, but not being able to is no
			// reason to show nothing (its error is on the step).
			if s.PlanJobId == "" || s.PlanState != "planned" && s.PlanState != "failed" {
				continue
			}
			j, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: s.PlanJobId}))
			if err != nil && s.PlanState == "planned" {
				return workflowsMsg{gen: gen, err: err}
			}
			if err != nil {
				continue
			}
			if msg.plans == nil {
				msg.plans = map[string]stepPlan{}
			}
			msg.plans[s.PlanJobId] = newStepPlan(j.Msg.Job.PlannedChanges, j.Msg.Job.PolicyFindings)
		}
		for _, w := range wfs {
			if w.Kind == imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION || w.Kind == imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE {
				if w.Id == msg.newest.Id {
					msg.deploy = msg.newest
				} else if msg.deploy, err = get(w.Id); err != nil {
					return workflowsMsg{gen: gen, err: err}
				}
				break
			}
		}
		return msg
	}
}

// driftMsg is the drift state of an install's components.
type driftMsg struct {
	gen   int
	drift []*imsv1.ComponentDrift
	err   error
}

func listDrift(ctx context.Context, c imsv1connect.OperatorServiceClient, gen int, install string) tea.Cmd {
	return func() tea.Msg {
		r, err := c.ListInstallDrift(ctx, connect.NewRequest(&imsv1.ListInstallDriftRequest{Install: install}))
		if err != nil {
			return driftMsg{gen: gen, err: err}
		}
		return driftMsg{gen: gen, drift: r.Msg.Components}
	}
}

// artifactsMsg answers listArtifacts.
type artifactsMsg struct {
	gen       int
	artifacts []*imsv1.InstallArtifact
	err       error
}

func listArtifacts(ctx context.Context, c imsv1connect.OperatorServiceClient, gen int, install string) tea.Cmd {
	return func() tea.Msg {
		r, err := c.ListInstallArtifacts(ctx, connect.NewRequest(&imsv1.ListInstallArtifactsRequest{Install: install}))
		if err != nil {
			return artifactsMsg{gen: gen, err: err}
		}
		return artifactsMsg{gen: gen, artifacts: r.Msg.Artifacts}
	}
}

// installParts is what the install view shows of its workflows, drift
// and actions, with the generations of their requests.
type installParts struct {
	driftGen int
	// drift is the components' drift state; the section is left out while
	// there is none (or imsd could not say).
	drift        []*imsv1.ComponentDrift
	artifactsGen int
	// artifacts are what the components deploy by digest (images,
	// charts, modules) with the agent's verdict on each (the
	// supply-chain policy); left out while there are none.
	artifacts      []*imsv1.InstallArtifact
	wfGen, actGen  int
	wfLoaded       bool
	wfErr          error
	newest, deploy *imsv1.Workflow
	plans          map[string]stepPlan
	actLoaded      bool
	actErr         error
	actions        []*imsv1.Action
}

// enumText is an enum value as people read it: WORKFLOW_STATE_AWAITING_APPROVAL
// is "awaiting approval".
func enumText(s fmt.Stringer, prefix string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.String(), prefix)), "_", " ")
}

// parts renders the sections; jobs gives each step's job (for outputs).
func (v *installView) parts(jobs []*imsv1.Job) []string {
	st, p := v.st, &v.installParts
	byID := map[string]*imsv1.Job{}
	for _, j := range jobs {
		byID[j.Id] = j
	}
	var out []string

	out = append(out, st.accent.Render("COMPONENTS"))
	switch {
	case !p.wfLoaded:
		out = append(out, st.muted.Render("  loading…"))
	case p.wfErr != nil:
		out = append(out, st.bad.Render("  not read: "+errText(p.wfErr)))
	case p.deploy == nil:
		out = append(out, st.muted.Render("  none deployed yet (byoc install provision "+v.installName(v.id)+")"))
	default:
		for _, s := range p.deploy.Steps {
			if s.Component == "" {
				continue
			}
			when := ago(v.now, p.deploy.GetEndTime().AsTime())
			if p.deploy.EndTime == nil {
				when = "deploying now"
			}
			line := fmt.Sprintf("  %-16s %-10s %s rev %d, %s", s.Component, enumText(s.State, "STEP_STATE_"), kindText(p.deploy.Kind), p.deploy.AppRevision, when)
			if j := byID[s.JobId]; j != nil && len(j.Outputs) > 0 {
				var kv []string
				for _, k := range slices.Sorted(maps.Keys(j.Outputs)) {
					kv = append(kv, k+"="+j.Outputs[k])
				}
				line += "   outputs " + strings.Join(kv, " ")
			}
			out = append(out, line)
		}
	}

	if len(p.drift) > 0 {
		out = append(out, st.accent.Render("DRIFT"))
		for _, d := range p.drift {
			line := fmt.Sprintf("  %-16s %-10s", termtext.Clean(d.Component, " "), strings.ReplaceAll(termtext.Clean(d.Status, " "), "_", " "))
			if d.CheckTime != nil {
				line += " checked " + ago(v.now, d.CheckTime.AsTime())
			}
			if n := len(d.Changes); n > 0 {
				line += fmt.Sprintf(", %d changes", n)
			}
			if d.Schedule != "" {
				line += "   schedule " + termtext.Clean(d.Schedule, " ")
			}
			switch d.Status {
			case "drifted":
				line = st.bad.Render(line)
			case "failed":
				line = st.bad.Render(line + "  " + termtext.Clean(d.Error, " "))
			}
			out = append(out, line)
		}
	}

	if len(p.artifacts) > 0 {
		out = append(out, st.accent.Render("ARTIFACTS")+"  "+st.muted.Render("STATE: what the agent verified under the customer's supply-chain policy, or of a plugin release"))
		for _, a := range p.artifacts {
			state := strings.ToUpper(termtext.Clean(a.State, " "))
			vr := a.GetVerification()
			if k := vr.GetKeyId(); k != "" {
				state += " key " + termtext.Clean(k, " ")
			}
			if n := len(vr.GetAttestations()); n > 0 {
				state += fmt.Sprintf(", %d attestations", n)
			}
			ref, comp := termtext.Clean(a.Reference, " "), a.Component
			if a.Kind == "plugin" {
				// A plugin release the agent pinned runs a type.
				comp = "type " + a.ComponentType
				if a.Version != "" {
					ref += " " + termtext.Clean(a.Version, " ")
				}
			}
			if !a.Deployed {
				ref += " (not deployed)"
			}
			line := fmt.Sprintf("  %-16s %-7s %-28s %s", termtext.Clean(comp, " "), termtext.Clean(a.Kind, " "), state, ref)
			switch a.State {
			case "refused", "warned":
				line = st.bad.Render(line)
				if f := vr.GetFailed(); len(f) > 0 {
					line += "  " + st.bad.Render(termtext.Clean(f[0], " "))
				}
			}
			out = append(out, line)
		}
	}

	out = append(out, st.accent.Render("WORKFLOW"))
	switch {
	case !p.wfLoaded || p.wfErr != nil:
	case p.newest == nil:
		out = append(out, st.muted.Render("  none yet"))
	default:
		w := p.newest
		out = append(out, fmt.Sprintf("  %s  %s  %s  rev %d  %s", w.Id, kindText(w.Kind), enumText(w.State, "WORKFLOW_STATE_"), w.AppRevision, ago(v.now, w.GetCreateTime().AsTime())))
		stepErr := false
		for _, s := range w.Steps {
			what := s.Component
			if what == "" {
				what = s.Action
			}
			line := fmt.Sprintf("    %-10s %-16s %s %s", enumText(s.State, "STEP_STATE_"), s.Name, what, s.Operation)
			if s.Error != "" {
				// Why it failed (or was skipped), under the step: the
				// line keeps the window's width for the reason.
				stepErr = true
				out = append(out, st.bad.Render(line), "      "+st.bad.Render(termtext.Clean(s.Error, " ")))
			} else {
				out = append(out, line)
			}
			out = append(out, v.planLines(s, p.plans)...)
		}
		if w.Error != "" && !stepErr {
			out = append(out, "    "+st.bad.Render(termtext.Clean(w.Error, " ")))
		}
	}

	out = append(out, st.accent.Render("ACTIONS")+"  "+st.muted.Render("a runs one"))
	switch {
	case !p.actLoaded:
		out = append(out, st.muted.Render("  loading…"))
	case p.actErr != nil:
		out = append(out, st.bad.Render("  not read: "+errText(p.actErr)))
	case len(p.actions) == 0:
		out = append(out, st.muted.Render("  the app declares none"))
	default:
		for _, a := range p.actions {
			out = append(out, fmt.Sprintf("  %-16s %-12s %s", a.Name, a.Mode, a.Description))
		}
	}
	return out
}

// planLines are a step's plan under its line: its state, digest and
// whether it is the approved one, then its changes.
func (v *installView) planLines(s *imsv1.WorkflowStep, plans map[string]stepPlan) []string {
	st := v.st
	if s.PlanJobId == "" && s.PlanState == "" {
		return nil
	}
	head := "      plan " + s.PlanState
	if d := s.PlanDigest; d != "" {
		head += " " + d[:min(len(d), len("sha256:")+12)]
	}
	pl, ok := plans[s.PlanJobId]
	if ok && s.PlanState == "planned" {
		head += "  " + pl.counts
	}
	switch {
	case s.PlanDigest != "" && s.ApprovedPlanDigest == s.PlanDigest:
		head += "  " + st.ok.Render("approved")
	case s.ApprovedPlanDigest != "":
		head += "  " + st.warn.Render("changed since approval")
	case s.PlanDigest != "" && s.State == imsv1.StepState_STEP_STATE_PENDING:
		head += "  " + st.warn.Render("awaiting approval")
	}
	out := []string{head}
	if s.PlanError != "" {
		out = append(out, "        "+st.bad.Render(termtext.Clean(s.PlanError, " ")))
	}
	for _, c := range pl.changes {
		out = append(out, "        "+c)
	}
	for _, f := range pl.findings {
		if f.deny {
			out = append(out, "        "+st.bad.Render("policy "+f.text))
		} else {
			out = append(out, "        "+st.warn.Render("policy "+f.text))
		}
	}
	return out
}

// kindText is a workflow's kind: provision, update, deprovision, action.
func kindText(k imsv1.WorkflowKind) string { return enumText(k, "WORKFLOW_KIND_") }

// loadParts asks for the workflows and actions again.
func (v *installView) loadParts() tea.Cmd {
	v.wfGen, v.actGen, v.driftGen, v.artifactsGen = v.nextGen(), v.nextGen(), v.nextGen(), v.nextGen()
	return tea.Batch(listWorkflows(v.ctx, v.conn.Client, v.wfGen, v.id), listActions(v.ctx, v.conn.Client, v.actGen, v.id),
		listDrift(v.ctx, v.conn.Client, v.driftGen, v.id), listArtifacts(v.ctx, v.conn.Client, v.artifactsGen, v.id))
}

// partsUpdate takes the answers to loadParts and reports whether msg was one.
func (v *installView) partsUpdate(msg tea.Msg) bool {
	switch msg := msg.(type) {
	case workflowsMsg:
		if msg.gen == v.wfGen {
			v.wfLoaded, v.wfErr = true, msg.err
			if msg.err == nil {
				v.newest, v.deploy, v.plans = msg.newest, msg.deploy, msg.plans
			}
		}
		return true
	case driftMsg:
		if msg.gen == v.driftGen && msg.err == nil {
			v.drift = msg.drift
		}
		return true
	case artifactsMsg:
		if msg.gen == v.artifactsGen && msg.err == nil {
			v.artifacts = msg.artifacts
		}
		return true
	case actionsMsg:
		if msg.gen == v.actGen {
			v.actLoaded, v.actErr = true, msg.err
			if msg.err == nil {
				v.actions = msg.actions
			}
		}
		return true
	}
	return false
}
