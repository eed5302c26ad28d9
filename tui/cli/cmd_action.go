package cli

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/reltime"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// runNamedAction queues a run of the named action and, with wait, follows
// it to its end and prints its outputs.
func (a *app) runNamedAction(ctx context.Context, install, action, reason string, wait bool) error {
	c, err := a.connect()
	if err != nil {
		return err
	}
	res, err := c.StartActionRun(ctx, connect.NewRequest(&imsv1.StartActionRunRequest{Install: install, Action: action, Reason: reason}))
	if err != nil {
		return c.wrap(err)
	}
	run := res.Msg.GetRun()
	a.warnAgentOffline(ctx, c, install)
	if !wait {
		if a.jsonOutput() {
			return writeJSON(a.stdout, run)
		}
		fmt.Fprintf(a.stdout, "Queued run %s of action %s on %s.\n", run.GetId(), action, cmp.Or(run.GetInstallName(), install))
		fmt.Fprintf(a.stderr, "Follow it with: byoc workflow get %s --wait; its outputs: byoc action runs %s --action %s\n", run.GetId(), install, action)
		return nil
	}
	if a.jsonOutput() {
		out := newOutage(a.now)
		for wait := followPoll; !workflowEnded(run.GetState()); {
			select {
			case <-ctx.Done():
				return a.stoppedFollowing(run.GetId(), nil)
			case <-time.After(wait):
			}
			got, err := c.GetActionRun(ctx, connect.NewRequest(&imsv1.GetActionRunRequest{Id: run.GetId()}))
			if ctx.Err() != nil {
				return a.stoppedFollowing(run.GetId(), nil)
			}
			if err != nil {
				// The replica answering may have died: carry on (outage.go).
				d, retry := out.failed(ctx, err)
				if !retry {
					return c.wrap(err)
				}
				fmt.Fprintf(a.stderr, "==> %v; retrying in %s\n", c.wrap(err), d.Round(time.Millisecond))
				wait = d
				continue
			}
			out.ok()
			wait = followPoll
			run = got.Msg.GetRun()
		}
		if err := writeJSON(a.stdout, run); err != nil {
			return err
		}
		return runFailed(run)
	}
	fmt.Fprintf(a.stdout, "Queued run %s of action %s on %s.\n", run.GetId(), action, cmp.Or(run.GetInstallName(), install))
	ferr := a.follow(ctx, c, run.GetId())
	if ctx.Err() != nil {
		return ferr
	}
	got, err := c.GetActionRun(ctx, connect.NewRequest(&imsv1.GetActionRunRequest{Id: run.GetId()}))
	if err != nil {
		return c.wrap(err)
	}
	if outs := got.Msg.GetRun().GetOutputs(); len(outs) > 0 {
		fmt.Fprintln(a.stdout, "Outputs:")
		for _, kv := range strings.Split(keyValues(outs), ", ") {
			fmt.Fprintln(a.stdout, "  "+kv)
		}
	}
	return ferr
}

func runFailed(run *imsv1.ActionRun) error {
	if run.GetState() == imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
		return nil
	}
	msg := fmt.Sprintf("action run %s %s", run.GetId(), workflowStateName(run.GetState()))
	if run.GetError() != "" {
		msg += ": " + run.GetError()
	}
	return &exitCodeError{code: exitError, msg: msg}
}

func triggersText(ts []*imsv1.ActionTrigger) string {
	var parts []string
	for _, t := range ts {
		s := t.GetType()
		switch {
		case t.GetSchedule() != "":
			s += " " + t.GetSchedule()
		case t.GetComponent() != "":
			s += " of " + t.GetComponent()
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "manual"
	}
	return strings.Join(parts, ", ")
}

func (a *app) actionListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "list INSTALL",
		Aliases: []string{"ls"},
		Short:   "List the actions of an install's app revision",
		Long: `List the actions an install can run: those of the app revision it last
applied (the app's latest when it has applied none), with the permission
mode each needs, its triggers and its description.`,
		Args: exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.ListActions(cmd.Context(), connect.NewRequest(&imsv1.ListActionsRequest{Install: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg)
			}
			if len(res.Msg.GetActions()) == 0 {
				fmt.Fprintf(a.stderr, "App revision %d of %s has no actions (actions/*.toml).\n", res.Msg.GetAppRevision(), args[0])
				return nil
			}
			t := newTable(a.stdout, "NAME", "MODE", "TRIGGERS", "DESCRIPTION")
			for _, ac := range res.Msg.GetActions() {
				desc := ac.GetDescription()
				if ac.GetHealthCheck() {
					desc = strings.TrimSpace("(health check) " + desc)
				}
				t.row(ac.GetName(), ac.GetMode(), triggersText(ac.GetTriggers()), desc)
			}
			if err := t.flush(); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "From app revision %d. Run one with: byoc action run %s ACTION\n", res.Msg.GetAppRevision(), args[0])
			return nil
		},
	}
}

// outputsSummary is a run's outputs on one line, cut to width.
func outputsSummary(m map[string]string, width int) string { return cut(keyValues(m), width) }

// cut cuts s to width runes on one line.
func cut(s string, width int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > width {
		s = string(r[:width-1]) + "…"
	}
	return s
}

func (a *app) actionRunsCommand() *cobra.Command {
	var action string
	var watch bool
	var limit int32
	cmd := &cobra.Command{
		Use:   "runs INSTALL [--action NAME] [--limit N] [--watch]",
		Short: "List an install's action runs, newest first, with their outputs",
		Args:  exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 || limit > 1000 {
				return usagef("--limit must be between 1 and 1000")
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			return runList(cmd.Context(), a, watch, listing[*imsv1.ActionRun]{
				noun: "action runs", empty: fmt.Sprintf("No action runs; start one with: byoc action run %s ACTION", args[0]),
				fetch: func(ctx context.Context) ([]*imsv1.ActionRun, error) {
					res, err := c.ListActionRuns(ctx, connect.NewRequest(&imsv1.ListActionRunsRequest{Install: args[0], Action: action, PageSize: limit}))
					if err != nil {
						return nil, c.wrap(err)
					}
					return res.Msg.GetRuns(), nil
				},
				id:     (*imsv1.ActionRun).GetId,
				header: []string{"ID", "ACTION", "TRIGGER", "STATE", "STARTED", "TOOK", "OUTPUTS"},
				row: func(_ context.Context, now time.Time, r *imsv1.ActionRun) []string {
					took := ""
					if r.GetStartTime() != nil && r.GetEndTime() != nil {
						took = reltime.Duration(r.GetEndTime().AsTime().Sub(r.GetStartTime().AsTime()))
					}
					outs := outputsSummary(r.GetOutputs(), 60)
					if r.GetError() != "" && outs == "" {
						outs = cut("error: "+r.GetError(), 60)
					}
					return []string{r.GetId(), r.GetAction(), r.GetTrigger(), workflowStateName(r.GetState()), ago(now, r.GetStartTime()), took, outs}
				},
			})
		},
	}
	cmd.Flags().StringVar(&action, "action", "", "only the runs of this action")
	watchFlag(cmd, &watch, "each run again as it changes (new runs too)")
	cmd.Flags().Int32Var(&limit, "limit", 0, "at most this many (default 100)")
	return cmd
}
