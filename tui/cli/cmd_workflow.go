package cli

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/backoff"
	"github.com/byoc-dev/byoc/internal/plural"
	"github.com/byoc-dev/byoc/internal/reltime"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

func (a *app) workflowCommand() *cobra.Command {
	return group("workflow", "Follow, approve, cancel and retry install workflows",
		a.workflowListCommand(),
		a.workflowGetCommand(),
		a.workflowApproveCommand(),
		a.workflowCancelCommand(),
		a.workflowRetryCommand(),
	)
}

func kindName(k imsv1.WorkflowKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "WORKFLOW_KIND_"))
}

func workflowStateName(s imsv1.WorkflowState) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_STATE_")), "_", " ")
}

func stepStateName(s imsv1.StepState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STEP_STATE_"))
}

func workflowEnded(s imsv1.WorkflowState) bool {
	return s == imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED || s == imsv1.WorkflowState_WORKFLOW_STATE_FAILED ||
		s == imsv1.WorkflowState_WORKFLOW_STATE_CANCELLED
}

// progress is "3/7 done, 1 failed" from a workflow's step counts.
func progress(wf *imsv1.Workflow) string {
	if wf.GetStepCounts() == nil {
		return ""
	}
	total := 0
	for _, n := range wf.GetStepCounts() {
		total += int(n)
	}
	out := fmt.Sprintf("%d/%d done", wf.GetStepCounts()["succeeded"], total)
	for _, st := range []string{"running", "failed", "skipped", "cancelled"} {
		if n := wf.GetStepCounts()[st]; n > 0 {
			out += fmt.Sprintf(", %d %s", n, st)
		}
	}
	return out
}

// printQueued says what to do with a workflow just queued.
func (a *app) printQueued(wf *imsv1.Workflow) {
	fmt.Fprintf(a.stdout, "Queued %s workflow %s for install %s (app revision %d).\n", kindName(wf.GetKind()), wf.GetId(),
		cmp.Or(wf.GetInstallName(), wf.GetInstallId()), wf.GetAppRevision())
	fmt.Fprintf(a.stdout, "Follow it with: byoc workflow get %s --wait\n", wf.GetId())
}

// printPushDeploys prints what a push did to installs.
func (a *app) printPushDeploys(c *client, res *imsv1.PushAppRevisionResponse) {
	for _, ia := range res.GetInstalls() {
		switch ia.GetOp() {
		case "created":
			fmt.Fprintf(a.stdout, "+ install %s created from %s\n", ia.GetName(), ia.GetFile())
			if tok := ia.GetEnrollmentToken(); tok != nil {
				a.printEnrollment(c, ia.GetName(), tok)
				fmt.Fprintf(a.stdout, "Then provision it with: byoc install provision %s\n", ia.GetName())
			}
		case "changed":
			fmt.Fprintf(a.stdout, "~ install %s changed from %s:\n", ia.GetName(), ia.GetFile())
			for _, c := range ia.GetChanges() {
				fmt.Fprintf(a.stdout, "    %s\n", c)
			}
		}
	}
	for _, wf := range res.GetWorkflows() {
		fmt.Fprintf(a.stdout, "Queued update workflow %s for install %s.\n", wf.GetId(), cmp.Or(wf.GetInstallName(), wf.GetInstallId()))
	}
	if n := len(res.GetWorkflows()); n > 0 {
		fmt.Fprintf(a.stdout, "Follow them with: byoc workflow list --active\n")
	}
}

// startWorkflowCommand is install provision / deprovision.
func (a *app) startWorkflowCommand(kind imsv1.WorkflowKind, short, long string) *cobra.Command {
	var rev int64
	var reason string
	var wait, yes, dryRun bool
	deprovision := kind == imsv1.WorkflowKind_WORKFLOW_KIND_DEPROVISION
	use := kindName(kind) + " INSTALL [--revision N] [--wait]"
	if deprovision {
		use = kindName(kind) + " INSTALL [--yes | --dry-run] [--wait]"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rev < 0 {
				return usagef("--revision must be a revision number (0 for the latest)")
			}
			if deprovision && !yes && !dryRun && (a.stdinTerminal == nil || !a.stdinTerminal()) {
				return usagef("install deprovision destroys every component of %s and cannot be undone: pass --yes to confirm (there is no terminal to ask on), or --dry-run to see what it would destroy", args[0])
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			if deprovision && (dryRun || !yes) {
				if done, err := a.confirmDeprovision(cmd.Context(), c, args[0], dryRun); done || err != nil {
					return err
				}
			}
			res, err := c.StartWorkflow(cmd.Context(), connect.NewRequest(&imsv1.StartWorkflowRequest{
				Install: args[0], Kind: kind, AppRevision: rev, Reason: reason}))
			if err != nil {
				return c.wrap(err)
			}
			return a.afterQueue(cmd.Context(), c, res.Msg.GetWorkflow(), wait)
		},
	}
	if kind != imsv1.WorkflowKind_WORKFLOW_KIND_DEPROVISION {
		cmd.Flags().Int64Var(&rev, "revision", 0, "app revision to apply (default: the latest)")
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the workflow")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the workflow until it ends (exit 1 unless it succeeds, 3 when it awaits approval)")
	if deprovision {
		cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask: needed where there is no terminal (scripts, CI)")
		cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show what would be destroyed, and change nothing")
		cmd.MarkFlagsMutuallyExclusive("yes", "dry-run")
	}
	return cmd
}

// confirmDeprovision shows what deprovisioning install would destroy
// and, unless this is a dry run, asks for the install's name to be typed
// back, as terraform destroy asks for "yes". done is set when nothing
// more is to be done (a dry run); a refusal is an error.
func (a *app) confirmDeprovision(ctx context.Context, c *client, install string, dryRun bool) (done bool, err error) {
	res, err := c.PlanInstall(ctx, connect.NewRequest(&imsv1.PlanInstallRequest{Install: install, Kind: imsv1.WorkflowKind_WORKFLOW_KIND_DEPROVISION}))
	if err != nil {
		return false, c.wrap(err)
	}
	if dryRun && a.jsonOutput() {
		return true, writeJSON(a.stdout, res.Msg)
	}
	if err := a.printInstallPlan(ctx, c, install, res.Msg); err != nil {
		return false, err
	}
	if dryRun {
		fmt.Fprintf(a.stdout, "\nDry run: nothing was changed. Deprovision with: byoc install deprovision %s\n", install)
		return true, nil
	}
	fmt.Fprintf(a.stdout, "\nThis destroys what is listed above, in install %s, and cannot be undone.\nType the install's name (%s) to deprovision it: ", install, install)
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if got := strings.TrimSpace(line); got != install {
		if err != nil && line == "" {
			got = "nothing"
		} else {
			got = strconv.Quote(got)
		}
		return false, &exitCodeError{code: exitError, msg: fmt.Sprintf("deprovision cancelled: %s typed, not %q; nothing was changed", got, install)}
	}
	return false, nil
}

func (a *app) afterQueue(ctx context.Context, c *client, wf *imsv1.Workflow, wait bool) error {
	if a.jsonOutput() && !wait {
		return writeJSON(a.stdout, wf)
	}
	if !wait {
		a.printQueued(wf)
		return nil
	}
	if !a.jsonOutput() {
		fmt.Fprintf(a.stdout, "Queued %s workflow %s for install %s.\n", kindName(wf.GetKind()), wf.GetId(), cmp.Or(wf.GetInstallName(), wf.GetInstallId()))
	}
	return a.follow(ctx, c, wf.GetId())
}

func (a *app) installProvisionCommand() *cobra.Command {
	return a.startWorkflowCommand(imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION,
		"Deploy an install: the sandbox, then every component in dependency order",
		`Queue a provision workflow: pre_provision hooks, the sandbox, then every
component once its dependencies are deployed (independent components
together, up to the install's parallelism), then post_provision hooks.
Components already deployed with the same rendered config are left alone,
so provisioning again after a failure resumes it.`)
}

func (a *app) installDeprovisionCommand() *cobra.Command {
	return a.startWorkflowCommand(imsv1.WorkflowKind_WORKFLOW_KIND_DEPROVISION,
		"Tear an install down: every component in reverse dependency order",
		`Queue a deprovision workflow: pre_deprovision hooks, then every deployed
component destroyed after the components that need it (with teardown
hooks), the sandbox last, then post_deprovision hooks.`)
}

func (a *app) installUpdateCommand() *cobra.Command {
	var inputs, unset []string
	var parallelism int32
	var approval string
	var noDeploy, wait bool
	cmd := &cobra.Command{
		Use:   "update INSTALL [--input KEY=VALUE ...] [--unset KEY ...] [--parallelism N] [--require-approval true|false]",
		Short: "Change an install's inputs or settings and deploy what they change",
		Long: `Change an install's inputs and settings, checked against the app's latest
revision, then (unless --no-deploy) queue an update workflow: only the
components whose rendered config changes, and what is downstream of them,
are redeployed. "byoc install plan INSTALL --input KEY=VALUE" shows what
would change first.`,
		Args: exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := parseInputs(inputs)
			if err != nil {
				return err
			}
			req := &imsv1.UpdateInstallRequest{Install: args[0], SetInputs: set, UnsetInputs: unset, Deploy: !noDeploy}
			if cmd.Flags().Changed("parallelism") {
				req.Parallelism = &parallelism
			}
			if approval != "" {
				b, err := strconv.ParseBool(approval)
				if err != nil {
					return usagef("--require-approval must be true or false, not %q", approval)
				}
				req.RequireApproval = &b
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.UpdateInstall(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return withFlags(c.wrap(err), inputFlags...)
			}
			if res.Msg.GetWorkflow() == nil {
				if a.jsonOutput() {
					return writeJSON(a.stdout, res.Msg.GetInstall())
				}
				fmt.Fprintf(a.stdout, "Updated install %s.\n", res.Msg.GetInstall().GetName())
				return nil
			}
			return a.afterQueue(cmd.Context(), c, res.Msg.GetWorkflow(), wait)
		},
	}
	cmd.Flags().StringArrayVar(&inputs, "input", nil, "set an input value (repeatable)")
	cmd.Flags().StringArrayVar(&unset, "unset", nil, "remove an input value so its default applies (repeatable)")
	cmd.Flags().Int32Var(&parallelism, "parallelism", 0, "steps of one workflow that may run at once (0: the app's default)")
	cmd.Flags().StringVar(&approval, "require-approval", "", "whether plans wait for byoc workflow approve (true or false)")
	cmd.Flags().BoolVar(&noDeploy, "no-deploy", false, "save the change without deploying it")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the update until it ends (exit 1 unless it succeeds, 3 when it awaits approval)")
	return cmd
}

func (a *app) installPlanCommand() *cobra.Command {
	var inputs, unset []string
	var rev int64
	var kind, appName, selector string
	var live, detailed bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "plan INSTALL... [--live [--timeout D]] [--app APP | -l SELECTOR] [--revision N] [--input KEY=VALUE ...] [--unset KEY ...] [--kind update|provision|deprovision] [--detailed-exitcode]",
		Short: "Show what a workflow would change in installs, and why; --live asks their agents for real plans",
		Long: `Show the steps a workflow would run in an install and why, from the
component graph alone (fast, nothing runs). With --live, each install's
agent also makes a real plan of every component the workflow would apply
(a plan job, through the usual dispatch, changing nothing), waited for up
to --timeout, and the planned changes are shown per component; this needs
an admin token. Several installs (or --app APP: every install of the app;
-l SELECTOR: every install whose labels match, of --app when given) are
planned together and installs whose plans are identical are grouped:
a dry run of a rollout across the fleet.

With --detailed-exitcode the exit code says whether there is anything to
do, as terraform plan -detailed-exitcode does: 0 no install has a step to
run, 2 some install has, 1 an error (an install or a component that could
not be planned).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && appName == "" && selector == "" {
				return usagef("name at least one INSTALL, or --app APP, or -l SELECTOR")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := parseInputs(inputs)
			if err != nil {
				return err
			}
			k, ok := imsv1.WorkflowKind_value["WORKFLOW_KIND_"+strings.ToUpper(kind)]
			if !ok || kind == "action" {
				return usagef("--kind must be update, provision or deprovision, not %q", kind)
			}
			if timeout < 0 || timeout > time.Hour {
				return usagef("--timeout must be between 1s and 1h")
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			installs := args
			if appName != "" || selector != "" {
				res, err := c.ListInstalls(cmd.Context(), connect.NewRequest(&imsv1.ListInstallsRequest{App: appName, Selector: selector}))
				if err != nil {
					return withFlags(c.wrap(err), fieldFlag{"selector", "--selector"})
				}
				for _, in := range res.Msg.GetInstalls() {
					if !slices.Contains(installs, in.GetName()) {
						installs = append(installs, in.GetName())
					}
				}
				if len(installs) == 0 && selector != "" {
					return fmt.Errorf("no install matches %s", selector)
				}
				if len(installs) == 0 {
					return fmt.Errorf("app %s has no installs", appName)
				}
			}
			// Plan the installs together: a live plan waits on agents.
			plans := make([]*imsv1.PlanInstallResponse, len(installs))
			errs := make([]error, len(installs))
			var wg sync.WaitGroup
			sem := make(chan struct{}, 8)
			for i, in := range installs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					res, err := c.PlanInstall(cmd.Context(), connect.NewRequest(&imsv1.PlanInstallRequest{Install: in,
						Kind: imsv1.WorkflowKind(k), AppRevision: rev, SetInputs: set, UnsetInputs: unset,
						Live: live, TimeoutSeconds: int64(timeout / time.Second)}))
					if err != nil {
						errs[i] = withFlags(c.wrap(err), inputFlags...)
						return
					}
					plans[i] = res.Msg
				}()
			}
			wg.Wait()
			if len(installs) == 1 {
				if errs[0] != nil {
					return errs[0]
				}
				if a.jsonOutput() {
					if err := writeJSON(a.stdout, plans[0]); err != nil {
						return err
					}
				} else if err := a.printInstallPlan(cmd.Context(), c, installs[0], plans[0]); err != nil {
					return err
				}
				return planVerdict(plans, detailed)
			}
			if err := a.printPlanGroups(cmd.Context(), c, installs, plans, errs); err != nil {
				return err
			}
			return planVerdict(plans, detailed)
		},
	}
	cmd.Flags().BoolVar(&detailed, "detailed-exitcode", false, "exit 0 when no install has a step to run, 2 when some has, 1 on an error")
	cmd.Flags().StringArrayVar(&inputs, "input", nil, "plan as if this input were set (repeatable)")
	cmd.Flags().StringArrayVar(&unset, "unset", nil, "plan as if this input were removed (repeatable)")
	cmd.Flags().Int64Var(&rev, "revision", 0, "app revision to plan for (default: the latest)")
	cmd.Flags().StringVar(&kind, "kind", "update", "update, provision or deprovision")
	cmd.Flags().BoolVar(&live, "live", false, "ask the installs' agents for real plans of the components (plan jobs)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --live, how long to wait for the agents' plans (default 2m)")
	cmd.Flags().StringVar(&appName, "app", "", "plan every install of this app too")
	selectorFlag(cmd, &selector, "installs (of --app when given): plan them too")
	return cmd
}

// inputFlags name the flags of install update and plan that set the
// request's input fields.
var inputFlags = []fieldFlag{{"set_inputs", "--input"}, {"unset_inputs", "--unset"},
	{"app_revision", "--revision"}, {"parallelism", "--parallelism"}}

// planVerdict is install plan's exit: failedPlansError's, else with
// detailed (--detailed-exitcode) exitChanges when some install has a step
// to run.
func planVerdict(plans []*imsv1.PlanInstallResponse, detailed bool) error {
	if err := failedPlansError(plans); err != nil || !detailed {
		return err
	}
	for _, p := range plans {
		if len(p.GetSteps()) > 0 {
			return &exitCodeError{code: exitChanges}
		}
	}
	return nil
}

// failedPlansError is a live plan's verdict when some component's plan
// failed or timed out: exit 1, as when an install could not be planned,
// so that a script does not take a failed plan for an empty one.
func failedPlansError(plans []*imsv1.PlanInstallResponse) error {
	var failed []string
	steps, n := 0, 0
	for _, p := range plans {
		for _, s := range p.GetSteps() {
			if s.GetPlanJobId() == "" && s.GetPlanState() == "" {
				continue
			}
			steps++
			if st := s.GetPlanState(); st == "failed" || st == "timed_out" {
				n++
				failed = append(failed, s.GetName())
			}
		}
	}
	if n == 0 {
		return nil
	}
	slices.Sort(failed)
	failed = slices.Compact(failed)
	return &exitCodeError{code: exitError, msg: fmt.Sprintf("%d of %d component plans failed (%s); see each plan above", n, steps, strings.Join(failed, ", "))}
}

// printInstallPlan writes one install's plan: the steps and why, then,
// for a live plan, each component's planned changes.
func (a *app) printInstallPlan(ctx context.Context, c *client, install string, p *imsv1.PlanInstallResponse) error {
	if len(p.GetSteps()) == 0 {
		fmt.Fprintf(a.stdout, "No changes: install %s matches app revision %d (%s unchanged).\n", install, p.GetAppRevision(), plural.Count(len(p.GetUnchanged()), "component"))
		return nil
	}
	fmt.Fprintf(a.stdout, "Plan (%s) of install %s to app revision %d:\n\n", kindName(p.GetKind()), install, p.GetAppRevision())
	if err := a.printPlanSteps(p); err != nil {
		return err
	}
	printStepPlans(a.stdout, stepPlans(ctx, c, p.GetSteps()))
	for _, s := range p.GetSteps() {
		if s.GetPlanState() == "not_planned" {
			fmt.Fprintf(a.stdout, "\nNot planned: %s %s\n", s.GetName(), planText(s.GetPlanError()))
		}
	}
	return nil
}

// printPlanSteps writes a plan's step table and the count line.
func (a *app) printPlanSteps(p *imsv1.PlanInstallResponse) error {
	t := newTable(a.stdout, " ", "STEP", "TYPE", "OP", "AFTER", "WHY")
	for _, s := range p.GetSteps() {
		mark := "~"
		switch {
		case s.GetOperation() == "destroy":
			mark = "-"
		case s.GetReason() == "new":
			mark = "+"
		case s.GetAction() != "":
			mark = ">"
		}
		t.row(mark, s.GetName(), s.GetComponentType(), s.GetOperation(), strings.Join(s.GetNeeds(), ","), s.GetReason())
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "\n%s; %s unchanged", plural.Count(len(p.GetSteps()), "step"), plural.Count(len(p.GetUnchanged()), "component"))
	if len(p.GetUnchanged()) > 0 && len(p.GetUnchanged()) <= 10 {
		fmt.Fprintf(a.stdout, " (%s)", strings.Join(p.GetUnchanged(), ", "))
	}
	fmt.Fprintln(a.stdout, ".")
	return nil
}

// planKey is what makes two installs' plans the same: the same steps
// (name, operation) and, per step, the same real plan (its digest) when
// one was made, else the same reason and plan state.
func planKey(p *imsv1.PlanInstallResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%d", p.GetKind(), p.GetAppRevision())
	for _, s := range p.GetSteps() {
		fmt.Fprintf(&b, "|%s %s ", s.GetName(), s.GetOperation())
		if s.GetPlanDigest() != "" {
			b.WriteString(s.GetPlanDigest())
		} else {
			fmt.Fprintf(&b, "%s %s", s.GetReason(), s.GetPlanState())
		}
	}
	return b.String()
}

// planGroup is installs whose plans are identical.
type planGroup struct {
	Installs []string                   `json:"installs"`
	Plan     *imsv1.PlanInstallResponse `json:"-"`
	PlanJSON json.RawMessage            `json:"plan"`
}

// printPlanGroups writes the plans of several installs, grouping the
// installs whose plans are identical (planKey), largest group first; an
// install that could not be planned is listed with why.
func (a *app) printPlanGroups(ctx context.Context, c *client, installs []string, plans []*imsv1.PlanInstallResponse, errs []error) error {
	var groups []*planGroup
	byKey := map[string]*planGroup{}
	var failed []string
	for i, p := range plans {
		if errs[i] != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", installs[i], errs[i]))
			continue
		}
		k := planKey(p)
		g := byKey[k]
		if g == nil {
			g = &planGroup{Plan: p}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.Installs = append(g.Installs, installs[i])
	}
	slices.SortStableFunc(groups, func(x, y *planGroup) int { return len(y.Installs) - len(x.Installs) })
	if a.jsonOutput() {
		for _, g := range groups {
			b, err := marshalJSON(g.Plan)
			if err != nil {
				return err
			}
			g.PlanJSON = b
		}
		out := struct {
			Groups []*planGroup `json:"groups"`
			Errors []string     `json:"errors,omitempty"`
		}{groups, failed}
		if err := writeJSONValue(a.stdout, out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "%s, %s.\n", plural.Count(len(installs)-len(failed), "install"), plural.Count(len(groups), "distinct plan"))
		for i, g := range groups {
			fmt.Fprintf(a.stdout, "\n=== Plan %d of %d: %s: %s\n\n", i+1, len(groups), plural.Count(len(g.Installs), "install"), strings.Join(g.Installs, ", "))
			if err := a.printInstallPlan(ctx, c, g.Installs[0], g.Plan); err != nil {
				return err
			}
		}
		for _, f := range failed {
			fmt.Fprintf(a.stdout, "\nNot planned: %s\n", f)
		}
	}
	if len(failed) > 0 {
		return &exitCodeError{code: exitError, msg: fmt.Sprintf("%d of %d installs could not be planned", len(failed), len(installs))}
	}
	return nil
}

func (a *app) workflowListCommand() *cobra.Command {
	var install, selector string
	var active, watch bool
	var limit int32
	cmd := &cobra.Command{
		Use:     "list [--install INSTALL] [-l SELECTOR] [--active] [--watch]",
		Aliases: []string{"ls"},
		Short:   "List workflows, newest first",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			return runList(cmd.Context(), a, watch, listing[*imsv1.Workflow]{
				noun: "workflows", empty: "No workflows; start one with: byoc install provision INSTALL",
				fetch: func(ctx context.Context) ([]*imsv1.Workflow, error) {
					res, err := c.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{Install: install, Active: active, PageSize: limit, Selector: selector}))
					if err != nil {
						return nil, withFlags(c.wrap(err), fieldFlag{"selector", "--selector"})
					}
					return res.Msg.GetWorkflows(), nil
				},
				get: func(ctx context.Context, id string) (*imsv1.Workflow, error) {
					res, err := c.GetWorkflow(ctx, connect.NewRequest(&imsv1.GetWorkflowRequest{Id: id}))
					if err != nil {
						return nil, c.wrap(err)
					}
					return res.Msg.GetWorkflow(), nil
				},
				id:     (*imsv1.Workflow).GetId,
				header: []string{"ID", "INSTALL", "KIND", "STATE", "REVISION", "CREATED", "REASON"},
				row: func(_ context.Context, now time.Time, wf *imsv1.Workflow) []string {
					return []string{wf.GetId(), cmp.Or(wf.GetInstallName(), wf.GetInstallId()), kindName(wf.GetKind()), workflowStateName(wf.GetState()),
						strconv.FormatInt(wf.GetAppRevision(), 10), ago(now, wf.GetCreateTime()), wf.GetReason()}
				},
			})
		},
	}
	cmd.Flags().StringVar(&install, "install", "", "only workflows of this install")
	selectorFlag(cmd, &selector, "workflows of installs")
	cmd.Flags().BoolVar(&active, "active", false, "only workflows that have not ended")
	cmd.Flags().Int32Var(&limit, "limit", 0, "at most this many (default 100)")
	watchFlag(cmd, &watch, "each workflow again as it changes (new ones too; under --active, one that ends as it ended)")
	return cmd
}

func (a *app) printWorkflow(wf *imsv1.Workflow) error {
	now := a.now()
	f := newFields(a.stdout)
	f.add("ID", wf.GetId())
	f.add("Install", cmp.Or(wf.GetInstallName(), wf.GetInstallId()))
	f.add("Kind", kindName(wf.GetKind()))
	state := workflowStateName(wf.GetState())
	if wf.GetCancelRequested() && !workflowEnded(wf.GetState()) {
		state += " (cancelling)"
	}
	f.add("State", state)
	f.add("Progress", progress(wf))
	f.add("App revision", strconv.FormatInt(wf.GetAppRevision(), 10))
	f.add("Reason", wf.GetReason())
	f.add("Parallelism", strconv.Itoa(int(wf.GetParallelism())))
	f.add("Created", when(now, wf.GetCreateTime())+" by "+wf.GetCreatedBy())
	if wf.GetApprovedBy() != "" {
		f.add("Approved", when(now, wf.GetApproveTime())+" by "+wf.GetApprovedBy())
	}
	if wf.GetEndTime() != nil {
		f.add("Ended", when(now, wf.GetEndTime()))
	}
	if wf.GetError() != "" {
		f.add("Error", wf.GetError())
	}
	if err := f.flush(); err != nil {
		return err
	}
	if len(wf.GetSteps()) == 0 {
		return nil
	}
	fmt.Fprintln(a.stdout)
	t := newTable(a.stdout, "STEP", "TYPE", "OP", "STATE", "TOOK", "JOB", "WHY")
	for _, s := range wf.GetSteps() {
		took := ""
		if s.GetStartTime() != nil {
			end := now
			if s.GetEndTime() != nil {
				end = s.GetEndTime().AsTime()
			}
			took = reltime.Duration(end.Sub(s.GetStartTime().AsTime()))
		}
		why := s.GetReason()
		if s.GetError() != "" {
			why = s.GetError()
		}
		t.row(s.GetName(), s.GetComponentType(), s.GetOperation(), stepStateName(s.GetState()), took, s.GetJobId(), why)
	}
	return t.flush()
}

func (a *app) workflowGetCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "get WORKFLOW|INSTALL [--wait]",
		Short: "Show a workflow (or an install's newest) and its steps; --wait follows it until it ends",
		Args:  exactArgs("WORKFLOW"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			id, err := a.workflowID(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			if wait {
				return a.follow(cmd.Context(), c, id)
			}
			res, err := c.GetWorkflow(cmd.Context(), connect.NewRequest(&imsv1.GetWorkflowRequest{Id: id}))
			if err != nil {
				return c.wrap(err)
			}
			plans := stepPlans(cmd.Context(), c, res.Msg.GetWorkflow().GetSteps())
			if a.jsonOutput() {
				return writeWorkflowJSON(a.stdout, res.Msg.GetWorkflow(), plans)
			}
			if err := a.printWorkflow(res.Msg.GetWorkflow()); err != nil {
				return err
			}
			printStepPlans(a.stdout, plans)
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "print each step as it changes until the workflow ends (exit 1 unless it succeeds, 3 when it awaits approval)")
	return cmd
}

// followPoll is how often follow asks for the workflow.
var followPoll = 300 * time.Millisecond

// followPlanWait is how long follow waits for a workflow's plans once it
// awaits approval, before it shows what is in and exits.
var followPlanWait = 10 * time.Second

// follow prints every step change of a workflow until it ends, then its
// summary. It stops when the workflow awaits approval (exit
// exitAwaitingApproval, so that a script does not carry on as if it had
// finished), and at once on Ctrl-C or SIGTERM (exit 130), saying where.
func (a *app) follow(ctx context.Context, c *client, id string) error {
	seen := map[string]imsv1.StepState{}
	// waiting are steps announced as queued for an offline agent: said to
	// run once the agent is back or their job left the queue.
	waiting := map[string]bool{}
	var wf *imsv1.Workflow
	var announced time.Time
	out := newOutage(a.now)
	for {
		res, err := c.GetWorkflow(ctx, connect.NewRequest(&imsv1.GetWorkflowRequest{Id: id}))
		if ctx.Err() != nil {
			return a.stoppedFollowing(id, wf)
		}
		if err != nil {
			// A first poll that fails is a wrong server or workflow;
			// later, the replica answering may have died: carry on.
			d, retry := out.failed(ctx, err)
			if wf == nil || !retry {
				return c.wrap(err)
			}
			fmt.Fprintf(a.stderr, "==> %v; retrying in %s\n", c.wrap(err), d.Round(time.Millisecond))
			if !backoff.Wait(ctx, d) {
				return a.stoppedFollowing(id, wf)
			}
			continue
		}
		out.ok()
		wf = res.Msg.GetWorkflow()
		for _, s := range wf.GetSteps() {
			if seen[s.GetName()] == s.GetState() || a.jsonOutput() {
				continue
			}
			seen[s.GetName()] = s.GetState()
			if s.GetState() == imsv1.StepState_STEP_STATE_PENDING {
				continue
			}
			if s.GetState() == imsv1.StepState_STEP_STATE_RUNNING && s.GetJobId() != "" {
				if why, _ := a.queuedOffline(ctx, c, wf, s.GetJobId()); why != "" {
					fmt.Fprintf(a.stdout, "  %-9s %s (job %s): %s; it runs when the agent connects\n", "queued", s.GetName(), s.GetJobId(), why)
					waiting[s.GetName()] = true
					continue
				}
			}
			delete(waiting, s.GetName())
			line := fmt.Sprintf("  %-9s %s", stepStateName(s.GetState()), s.GetName())
			if s.GetJobId() != "" && s.GetState() == imsv1.StepState_STEP_STATE_RUNNING {
				line += " (job " + s.GetJobId() + ")"
			}
			if s.GetError() != "" {
				line += ": " + s.GetError()
			}
			fmt.Fprintln(a.stdout, line)
		}
		for _, s := range wf.GetSteps() {
			if !waiting[s.GetName()] || s.GetState() != imsv1.StepState_STEP_STATE_RUNNING {
				continue
			}
			// Only what imsd said moves a waiting step on: a call that
			// failed (the Ctrl-C that stops this loop cancels them) says
			// nothing.
			if why, known := a.queuedOffline(ctx, c, wf, s.GetJobId()); known && why == "" {
				delete(waiting, s.GetName())
				fmt.Fprintf(a.stdout, "  %-9s %s (job %s)\n", "running", s.GetName(), s.GetJobId())
			}
		}
		switch {
		case wf.GetState() == imsv1.WorkflowState_WORKFLOW_STATE_AWAITING_APPROVAL:
			if a.jsonOutput() {
				if err := writeJSON(a.stdout, wf); err != nil {
					return err
				}
				return &exitCodeError{code: exitAwaitingApproval}
			}
			if planning := stepsPlanning(wf); len(planning) > 0 && (announced.IsZero() || a.now().Sub(announced) < followPlanWait) {
				// Plans are being made: wait for them (a while: the
				// agent may be away) before asking.
				if announced.IsZero() {
					fmt.Fprintf(a.stdout, "Workflow %s awaits approval; planning %s on the agent first.\n", wf.GetId(), strings.Join(planning, ", "))
					announced = a.now()
				}
				break
			}
			printStepPlans(a.stdout, stepPlans(ctx, c, wf.GetSteps()))
			fmt.Fprintf(a.stdout, "\nWorkflow %s awaits approval of its plan (%s): byoc workflow get %s shows it; byoc workflow approve %s runs it.\n",
				wf.GetId(), plural.Count(len(wf.GetSteps()), "step"), wf.GetId(), wf.GetId())
			return &exitCodeError{code: exitAwaitingApproval}
		case workflowEnded(wf.GetState()):
			if a.jsonOutput() {
				if err := writeJSON(a.stdout, wf); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(a.stdout, "Workflow %s %s: %s.\n", wf.GetId(), workflowStateName(wf.GetState()), progress(wf))
			}
			if wf.GetState() != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
				msg := fmt.Sprintf("workflow %s %s", wf.GetId(), workflowStateName(wf.GetState()))
				if wf.GetError() != "" {
					msg += ": " + wf.GetError()
				}
				if failed := failedSteps(wf); len(failed) > 0 {
					msg += fmt.Sprintf(" (retry with: byoc workflow retry %s %s)", wf.GetId(), failed[0])
				}
				return &exitCodeError{code: exitError, msg: msg}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return a.stoppedFollowing(id, wf)
		case <-time.After(followPoll):
		}
	}
}

// queuedOffline says why job waits, when it is queued and the install's
// agent is offline or not enrolled: a step "running" on imsd's side is
// then only waiting. Empty when the job left the queue, the agent is
// connected, or imsd cannot say; known is false when it could not say.
func (a *app) queuedOffline(ctx context.Context, c *client, wf *imsv1.Workflow, jobID string) (why string, known bool) {
	j, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: jobID}))
	if err != nil {
		return "", false
	}
	if j.Msg.GetJob().GetState() != imsv1.JobState_JOB_STATE_QUEUED {
		return "", true
	}
	why, err = a.agentOfflineErr(ctx, c, cmp.Or(wf.GetInstallName(), wf.GetInstallId()))
	return why, err == nil
}

// agentOffline says that install's agent is offline (and since when) or
// not enrolled; empty when it is connected or imsd cannot say.
func (a *app) agentOffline(ctx context.Context, c *client, install string) string {
	why, _ := a.agentOfflineErr(ctx, c, install)
	return why
}

// agentOfflineErr is agentOffline with the error of asking imsd.
func (a *app) agentOfflineErr(ctx context.Context, c *client, install string) (string, error) {
	res, err := c.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: install}))
	if err != nil {
		return "", err
	}
	in := res.Msg.GetInstall()
	ag := in.GetAgent()
	switch {
	case ag == nil || ag.GetAgentId() == "":
		return fmt.Sprintf("install %s has no agent enrolled yet (byoc install token %s makes its enrolment token)", in.GetName(), in.GetName()), nil
	case ag.GetConnected():
		return "", nil
	case ag.GetLastSeenTime() == nil:
		return fmt.Sprintf("the agent of install %s is offline (never seen)", in.GetName()), nil
	default:
		return fmt.Sprintf("the agent of install %s is offline (last seen %s)", in.GetName(), ago(a.now(), ag.GetLastSeenTime())), nil
	}
}

// warnAgentOffline warns on stderr that a job just queued on install
// waits for its agent; the command still succeeds (the job is queued).
func (a *app) warnAgentOffline(ctx context.Context, c *client, install string) {
	if why := a.agentOffline(ctx, c, install); why != "" {
		fmt.Fprintf(a.stderr, "warning: %s: the job is queued and runs when the agent connects\n", why)
	}
}

// stoppedFollowing says where following workflow id stopped on Ctrl-C or
// SIGTERM (wf is its last state read, or nil) and exits 130: the
// workflow itself goes on.
func (a *app) stoppedFollowing(id string, wf *imsv1.Workflow) error {
	at := ""
	if wf != nil {
		at = fmt.Sprintf(" (%s: %s)", workflowStateName(wf.GetState()), progress(wf))
	}
	fmt.Fprintf(a.stderr, "Stopped following workflow %s%s; it keeps running (resume with: byoc workflow get %s --wait; stop it with: byoc workflow cancel %s).\n",
		id, at, id, id)
	return &exitCodeError{code: exitInterrupted}
}

// stepsPlanning names the steps whose plan is still being made. Right
// after a workflow that requires approval starts, its plan jobs may not
// be queued yet: until one is, every component apply counts.
func stepsPlanning(wf *imsv1.Workflow) []string {
	var out, applies []string
	started := false
	for _, s := range wf.GetSteps() {
		started = started || s.GetPlanJobId() != ""
		if s.GetPlanState() == "planning" {
			out = append(out, s.GetName())
		}
		if op := s.GetOperation(); s.GetComponent() != "" && (op == "apply" || op == "destroy") && s.GetState() == imsv1.StepState_STEP_STATE_PENDING {
			applies = append(applies, s.GetName())
		}
	}
	if !started && wf.GetRequireApproval() {
		return applies
	}
	return out
}

func failedSteps(wf *imsv1.Workflow) []string {
	var out []string
	for _, s := range wf.GetSteps() {
		if s.GetState() == imsv1.StepState_STEP_STATE_FAILED {
			out = append(out, s.GetName())
		}
	}
	return out
}

func (a *app) workflowApproveCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "approve WORKFLOW [--wait]",
		Short: "Approve a workflow's plan so it applies",
		Args:  exactArgs("WORKFLOW"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			// Approve exactly the plans shown: imsd refuses the approval
			// if any of them changed meanwhile.
			got, err := c.GetWorkflow(cmd.Context(), connect.NewRequest(&imsv1.GetWorkflowRequest{Id: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			req := &imsv1.ApproveWorkflowRequest{Id: args[0]}
			var shown []string
			for _, p := range stepPlans(cmd.Context(), c, got.Msg.GetWorkflow().GetSteps()) {
				s := p.step
				if s.GetState() != imsv1.StepState_STEP_STATE_PENDING || s.GetPlanDigest() == "" {
					continue
				}
				if req.PlanDigests == nil {
					req.PlanDigests = map[string]string{}
				}
				req.PlanDigests[s.GetName()] = s.GetPlanDigest()
				what := planCounts(p.changes)
				if p.err != nil {
					what = "?"
				}
				shown = append(shown, fmt.Sprintf("  %s: %s (%s)", s.GetName(), planDigestText(s.GetPlanDigest()), what))
			}
			res, err := c.ApproveWorkflow(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return c.wrap(err)
			}
			if !a.jsonOutput() && len(shown) > 0 {
				fmt.Fprintf(a.stdout, "Approved %s of workflow %s:\n%s\n", plural.Count(len(shown), "plan"), args[0], strings.Join(shown, "\n"))
			}
			if wait {
				return a.follow(cmd.Context(), c, args[0])
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg.GetWorkflow())
			}
			fmt.Fprintf(a.stdout, "Approved workflow %s; it is running. Each apply plans again first and stops if its plan changed.\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the workflow until it ends (exit 1 unless it succeeds, 3 when it awaits approval)")
	return cmd
}

func (a *app) workflowCancelCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel WORKFLOW [--reason TEXT]",
		Short: "Cancel a workflow: nothing more starts, and running steps are stopped",
		Args:  exactArgs("WORKFLOW"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.CancelWorkflow(cmd.Context(), connect.NewRequest(&imsv1.CancelWorkflowRequest{Id: args[0], Reason: reason}))
			if err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg.GetWorkflow())
			}
			if workflowEnded(res.Msg.GetWorkflow().GetState()) {
				fmt.Fprintf(a.stdout, "Workflow %s cancelled.\n", args[0])
			} else {
				fmt.Fprintf(a.stdout, "Cancelling workflow %s: its running steps are being stopped.\n", args[0])
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the workflow")
	return cmd
}

func (a *app) workflowRetryCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "retry WORKFLOW [STEP] [--wait]",
		Short: "Run a failed step again, and the steps that were skipped because of it",
		Long: `Run a failed step again, and the steps that were skipped because of it.
Without STEP, the workflow's failed step is retried when it has exactly
one; otherwise the failed steps are listed, to name one.`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usagef("missing WORKFLOW")
			case len(args) > 2:
				return usagef("unexpected argument %q", args[2])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				step, err := onlyFailedStep(cmd.Context(), c, args[0])
				if err != nil {
					return err
				}
				args = append(args, step)
				if !a.jsonOutput() {
					fmt.Fprintf(a.stdout, "Step %s is the workflow's only failed step.\n", step)
				}
			}
			res, err := c.RetryWorkflowStep(cmd.Context(), connect.NewRequest(&imsv1.RetryWorkflowStepRequest{Id: args[0], Step: args[1]}))
			if err != nil {
				return c.wrap(err)
			}
			if wait {
				return a.follow(cmd.Context(), c, args[0])
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg.GetWorkflow())
			}
			fmt.Fprintf(a.stdout, "Retrying step %s of workflow %s.\n", args[1], args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the workflow until it ends (exit 1 unless it succeeds, 3 when it awaits approval)")
	return cmd
}

// onlyFailedStep returns the name of workflow id's failed step when it
// has exactly one; otherwise a usage error lists the failed steps (or,
// with none, the steps that could be retried: cancelled or skipped).
func onlyFailedStep(ctx context.Context, c *client, id string) (string, error) {
	res, err := c.GetWorkflow(ctx, connect.NewRequest(&imsv1.GetWorkflowRequest{Id: id}))
	if err != nil {
		return "", c.wrap(err)
	}
	var failed, other []string
	for _, s := range res.Msg.GetWorkflow().GetSteps() {
		switch s.GetState() {
		case imsv1.StepState_STEP_STATE_FAILED:
			line := s.GetName()
			if e := s.GetError(); e != "" {
				line += " (" + firstLine(e) + ")"
			}
			failed = append(failed, line)
		case imsv1.StepState_STEP_STATE_CANCELLED, imsv1.StepState_STEP_STATE_SKIPPED:
			other = append(other, s.GetName()+" ("+stepStateName(s.GetState())+")")
		}
	}
	switch {
	case len(failed) == 1:
		name, _, _ := strings.Cut(failed[0], " (")
		return name, nil
	case len(failed) > 1:
		return "", usagef("workflow %s has %d failed steps; name the one to retry: byoc workflow retry %s STEP\n  %s",
			id, len(failed), id, strings.Join(failed, "\n  "))
	case len(other) > 0:
		return "", usagef("workflow %s has no failed step; name the one to retry: byoc workflow retry %s STEP\n  %s",
			id, id, strings.Join(other, "\n  "))
	}
	return "", usagef("workflow %s has no step to retry (none failed, was cancelled or skipped)", id)
}

// settingsText describes an install's settings for install get.
func settingsText(s *imsv1.InstallSettings) string {
	if s == nil {
		return ""
	}
	var parts []string
	if s.GetParallelism() > 0 {
		parts = append(parts, fmt.Sprintf("parallelism %d", s.GetParallelism()))
	}
	if s.RequireApproval != nil {
		parts = append(parts, fmt.Sprintf("require approval %t", s.GetRequireApproval()))
	}
	if len(s.GetOverrides()) > 0 {
		names := make([]string, 0, len(s.GetOverrides()))
		for n := range s.GetOverrides() {
			names = append(names, n)
		}
		slices.Sort(names)
		parts = append(parts, "overrides for "+strings.Join(names, ", "))
	}
	if s.GetSource() != "" {
		parts = append(parts, "managed from "+s.GetSource())
	}
	return strings.Join(parts, "; ")
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
