package cli

import (
	"fmt"
	"io"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// installDriftCommand lists the drift state of an install's components.
func (a *app) installDriftCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "drift INSTALL",
		Short: "List the drift state of an install's components (the latest drift check of each)",
		Args:  exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
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
	fmt.Fprintf(w, "\nPolicy: %d denied, %d warnings\n", deny, len(fs)-deny)
	for _, f := range fs {
		fmt.Fprintf(w, "  %-4s [%s] %s: %s\n", f.GetLevel(), f.GetSource(), planText(f.GetPolicy()), planText(f.GetMessage()))
	}
}
