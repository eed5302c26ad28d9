package cli

import (
	"cmp"
	"fmt"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/labels"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// selectorFlag adds -l/--selector to a list command; imsd evaluates it.
func selectorFlag(cmd *cobra.Command, sel *string, what string) {
	cmd.Flags().StringVarP(sel, "selector", "l", "", "only "+what+" whose labels match this selector (kubectl's syntax: tier=canary, tier!=canary, 'region in (eu,us)', customer, '!legacy'; comma means and)")
}

func (a *app) installLabelCommand() *cobra.Command {
	var overwrite bool
	cmd := &cobra.Command{
		Use:   "label NAME KEY=VALUE... [KEY-...] [--overwrite]",
		Short: "Set (KEY=VALUE) and remove (KEY-) an install's labels, as kubectl label does",
		Long: "Set (KEY=VALUE) and remove (KEY-) an install's labels. Keys and values follow Kubernetes' label\n" +
			"syntax. Changing the value of a label that is set needs --overwrite. Lists select installs by\n" +
			"label with -l/--selector.",
		Example: "  byoc install label acme tier=canary region=eu\n  byoc install label acme tier=prod --overwrite\n  byoc install label acme region-",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usagef("give the install and at least one KEY=VALUE or KEY-")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			change, err := labels.ParseChange(args[1:])
			if err != nil {
				return usagef("%v", err)
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.LabelInstall(cmd.Context(), connect.NewRequest(&imsv1.LabelInstallRequest{
				Install: args[0], Set: change.Set, Remove: change.Remove, Overwrite: overwrite,
			}))
			if err != nil {
				return withFlags(c.wrap(err), fieldFlag{"overwrite", "--overwrite"})
			}
			ins := res.Msg.GetInstall()
			if a.jsonOutput() {
				return writeJSON(a.stdout, ins)
			}
			fmt.Fprintf(a.stdout, "install/%s labeled: %s\n", ins.GetName(), cmp.Or(labels.Format(ins.GetLabels()), "<none>"))
			return nil
		},
	}
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "allow changing the value of a label that is set")
	return cmd
}
