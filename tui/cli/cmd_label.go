package cli

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/labels"
	"github.com/byoc-dev/byoc/internal/window"
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

// windowsText is what install get says of an install's maintenance
// windows: the vendor's, the customer's (as its agent reported them) and
// when both are next open, which is when a release's jobs may run.
func windowsText(now time.Time, ins *imsv1.Install) [][2]string {
	vendorTexts := ins.GetSettings().GetWindows()
	p := ins.GetAgent().GetPermissions()
	customerTexts := p.GetWindows()
	names := func(ts []string, none string) string {
		if len(ts) == 0 {
			return none
		}
		return strings.Join(ts, "; ")
	}
	out := [][2]string{{"Windows (vendor)", names(vendorTexts, "none (installs/NAME.toml window = ...)")}}
	customer := names(customerTexts, "none")
	if p == nil {
		customer = "not reported yet"
	}
	out = append(out, [2]string{"Windows (customer)", customer + " (agentd window, on the agent)"})
	vendor, err1 := window.ParseSchedule(vendorTexts)
	cust, err2 := window.ParseSchedule(customerTexts)
	var next string
	switch {
	case err1 != nil || err2 != nil:
		next = fmt.Sprintf("unknown: %v", cmp.Or(err1, err2))
	case vendor.Empty() && cust.Empty():
		return out
	default:
		at, ok := window.NextBoth(now, vendor, cust)
		switch {
		case !ok:
			next = "never: the vendor's and the customer's windows do not overlap; release jobs wait"
		case !at.After(now):
			end := vendor.CloseAfter(now)
			if e := cust.CloseAfter(now); end.IsZero() || (!e.IsZero() && e.Before(end)) {
				end = e
			}
			next = "open now, until " + when(now, timestamppb.New(end))
		default:
			next = when(now, timestamppb.New(at))
		}
	}
	return append(out, [2]string{"Next window", next})
}
