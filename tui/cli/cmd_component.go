package cli

import (
	"fmt"
	"maps"
	"slices"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

func (a *app) componentCommand() *cobra.Command {
	return group("component", "Act on one component of an install", a.componentImportCommand())
}

// componentImportCommand queues an import job and follows it.
func (a *app) componentImportCommand() *cobra.Command {
	var lf logFormat
	cmd := &cobra.Command{
		Use:   "import INSTALL COMPONENT ID",
		Short: "Adopt an existing resource as a component the install does not run yet (like terraform import)",
		Long: `Adopt an existing resource as COMPONENT of INSTALL, without changing it:
the install's agent runs an import job, in which the component's type
reads the resource named by ID (in a form the type defines: kvfile, the
file's path) and keeps it as the component's state. The component must be
in the app revision the install runs and not be deployed; its type must
support import (the job fails naming the type otherwise). The command
follows the job's log; when it succeeds imsd records the component as
deployed with its config and the job's outputs, as an apply would, and
audits it (component.imported). The next plan shows no change when the
resource matches the config, else what differs.`,
		Args: exactArgs("INSTALL", "COMPONENT", "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.ImportComponent(ctx, connect.NewRequest(&imsv1.ImportComponentRequest{Install: args[0], Component: args[1], ImportId: args[2]}))
			if err != nil {
				return c.wrap(err)
			}
			job := res.Msg.GetJob()
			a.warnAgentOffline(ctx, c, args[0])
			fmt.Fprintf(a.stderr, "==> importing %q as %s of %s (job %s)\n", args[2], args[1], args[0], job.GetId())
			p := &logPrinter{w: a.stdout, format: lf, clean: a.terminal(a.stdout), json: a.jsonOutput()}
			if err := a.followJobWith(ctx, c, job.GetId(), p); err != nil {
				return err
			}
			got, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: job.GetId()}))
			if err != nil {
				return c.wrap(err)
			}
			outputs := got.Msg.GetJob().GetOutputs()
			for _, k := range slices.Sorted(maps.Keys(outputs)) {
				fmt.Fprintf(a.stderr, "    %s = %s\n", k, outputs[k])
			}
			fmt.Fprintf(a.stderr, "Imported: %s now counts as deployed on %s; see what a plan would change with: byoc install plan %s --live\n", args[1], args[0], args[0])
			return nil
		},
	}
	lf.flags(cmd)
	return cmd
}
