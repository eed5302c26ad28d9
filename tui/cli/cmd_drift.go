package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/plural"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// installDriftCommand lists the drift state of an install's components.
func (a *app) installDriftCommand() *cobra.Command {
	var run bool
	cmd := &cobra.Command{
		Use:   "drift INSTALL [COMPONENT]... [--run]",
		Short: "List the drift state of an install's components (the latest drift check of each); --run checks now",
		Long: `List the drift state of an install's components: the latest drift check of
each. Drift checks start on a component's drift_schedule (app config), or
now with --run: a check of each COMPONENT named (every deployed component
when none is), waited for, then the list. A check changes nothing; a type
that cannot check drift reports a failed check saying so.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("missing INSTALL")
			}
			if len(args) > 1 && !run {
				return usagef("unexpected argument %q (components are named only with --run)", args[1])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			if run {
				if err := a.runDriftChecks(cmd.Context(), c, args[0], args[1:]); err != nil {
					return err
				}
			}
			res, err := c.ListInstallDrift(cmd.Context(), connect.NewRequest(&imsv1.ListInstallDriftRequest{Install: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg)
			}
			comps := res.Msg.GetComponents()
			if len(comps) == 0 {
				fmt.Fprintf(a.stderr, "Nothing to show for %s: no component of the revision it runs has a drift_schedule, and no drift check has reported.\n", args[0])
				return nil
			}
			now := a.now()
			t := newTable(a.stdout, "COMPONENT", "STATUS", "CHECKED", "CHANGES", "SCHEDULE", "NEXT CHECK", "JOB")
			for _, d := range comps {
				changes := ""
				if n := len(d.GetChanges()); n > 0 {
					changes = fmt.Sprint(n)
				}
				status := d.GetStatus()
				if d.GetError() != "" {
					status += ": " + planText(d.GetError())
				}
				t.row(d.GetComponent(), status, when(now, d.GetCheckTime()), changes, d.GetSchedule(), when(now, d.GetNextCheckTime()), d.GetJobId())
			}
			if err := t.flush(); err != nil {
				return err
			}
			for _, d := range comps {
				if len(d.GetChanges()) > 0 {
					fmt.Fprintf(a.stdout, "\n%s differs from what was applied:", d.GetComponent())
					printPlan(a.stdout, d.GetChanges())
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&run, "run", false, "check now (the named components, or every deployed one) and wait for the checks")
	return cmd
}

// runDriftChecks queues drift checks of install's components (all when
// none is named) and waits for them to end, saying so on stderr.
func (a *app) runDriftChecks(ctx context.Context, c *client, install string, components []string) error {
	res, err := c.CheckInstallDrift(ctx, connect.NewRequest(&imsv1.CheckInstallDriftRequest{Install: install, Components: components}))
	if err != nil {
		return c.wrap(err)
	}
	for _, j := range res.Msg.GetJobs() {
		fmt.Fprintf(a.stderr, "Checking %s for drift (job %s)...\n", j.GetComponent(), j.GetId())
	}
	for _, j := range res.Msg.GetJobs() {
		for {
			got, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: j.GetId()}))
			if err != nil {
				return c.wrap(err)
			}
			if got.Msg.GetJob().GetEndTime() != nil {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// driftSummary is an install's drift in one line for `install get`:
// "db drifted, web in sync"; "" when no component has a drift state.
func driftSummary(comps []*imsv1.ComponentDrift) string {
	s := ""
	for i, d := range comps {
		if i > 0 {
			s += ", "
		}
		st := d.GetStatus()
		if st == "in_sync" {
			st = "in sync"
		}
		s += d.GetComponent() + " " + st
	}
	return s
}

// printPolicy writes a job's policy findings under its fields.
func printPolicy(w io.Writer, fs []*imsv1.PolicyFinding) {
	if len(fs) == 0 {
		return
	}
	deny := 0
	for _, f := range fs {
		if f.GetLevel() == "deny" {
			deny++
		}
	}
	fmt.Fprintf(w, "\nPolicy: %d denied, %s\n", deny, plural.Count(len(fs)-deny, "warning"))
	for _, f := range fs {
		fmt.Fprintf(w, "  %-4s [%s] %s: %s\n", f.GetLevel(), f.GetSource(), planText(f.GetPolicy()), planText(f.GetMessage()))
	}
}
