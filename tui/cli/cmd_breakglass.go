package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/reltime"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

func (a *app) breakglassCommand() *cobra.Command {
	return group("breakglass", "Request break-glass grants and see their state",
		a.breakglassRequestCommand(),
		a.breakglassListCommand(),
	)
}

func (a *app) breakglassRequestCommand() *cobra.Command {
	var (
		reason, role string
		dur          time.Duration
	)
	c := &cobra.Command{
		Use:   "request INSTALL",
		Short: "Ask an install's customer for a time-boxed break-glass grant",
		Long: `Ask the customer of INSTALL for a break-glass grant: a role from the app's
break_glass.toml (--role, default its first), a reason (required when
require_reason) and a duration (--for, at most max_duration).

The request is pending until the customer's admin approves or denies it on
their side (agentd breakglass approve|deny), or expires unanswered (30
minutes by default). While a grant is live, jobs of mode break_glass
(break-glass actions, byoc action run --mode break_glass -- SCRIPT) run on
that install only; the agent ends them when the grant expires or is
revoked. byoc breakglass list shows the state.`,
		Args: exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dur <= 0 {
				return usagef("--for must be a positive duration, such as 1h")
			}
			if dur%time.Second != 0 {
				return usagef("--for %s: use whole seconds", dur)
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.RequestBreakGlass(cmd.Context(), connect.NewRequest(&imsv1.RequestBreakGlassRequest{
				Install: args[0], Role: role, Reason: reason, DurationSeconds: int64(dur / time.Second)}))
			if err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg)
			}
			g := res.Msg.GetGrant()
			fmt.Fprintf(a.stdout, "Requested break-glass %s on %s: role %s for %s. Pending the customer's approval until %s.\n",
				g.GetId(), g.GetInstallName(), g.GetRole(), dur, g.GetRequestExpireTime().AsTime().Local().Format(time.RFC3339))
			fmt.Fprintf(a.stdout, "The customer approves it in their account with: agentd breakglass approve %s --role %s --for %s\n",
				g.GetId(), g.GetRole(), reltime.Flag(time.Duration(g.GetDurationSeconds())*time.Second))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&reason, "reason", "", "why you need it (shown to the customer)")
	f.StringVar(&role, "role", "", "a role of the app's break_glass.toml (default: its first)")
	f.DurationVar(&dur, "for", time.Hour, "how long the grant should last")
	return c
}

func (a *app) breakglassListCommand() *cobra.Command {
	var install, selector string
	var watch bool
	c := &cobra.Command{
		Use:   "list [--install INSTALL] [-l SELECTOR] [--watch]",
		Short: "List break-glass requests and grants: pending, approved (until when), denied, expired, revoked",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			return runList(cmd.Context(), a, watch, listing[*imsv1.BreakGlassGrant]{
				noun: "break-glass requests",
				fetch: func(ctx context.Context) ([]*imsv1.BreakGlassGrant, error) {
					res, err := c.ListBreakGlassGrants(ctx, connect.NewRequest(&imsv1.ListBreakGlassGrantsRequest{Install: install, Selector: selector}))
					if err != nil {
						return nil, withFlags(c.wrap(err), fieldFlag{"selector", "--selector"})
					}
					return res.Msg.GetGrants(), nil
				},
				id:     (*imsv1.BreakGlassGrant).GetId,
				header: []string{"ID", "INSTALL", "ROLE", "STATE", "UNTIL", "REQUESTED BY", "REASON", "DECIDED BY", "WHY"},
				row:    grantRow,
			})
		},
	}
	c.Flags().StringVar(&install, "install", "", "only this install's")
	selectorFlag(c, &selector, "grants of installs")
	watchFlag(c, &watch, "each request again as it changes (approved, denied, expired, revoked; new ones too)")
	return c
}

// grantRow is g's row of byoc breakglass list.
func grantRow(_ context.Context, now time.Time, g *imsv1.BreakGlassGrant) []string {
	until := ""
	switch g.GetState() {
	case "pending":
		until = "request expires " + ago(now, g.GetRequestExpireTime())
	case "approved", "expired":
		// An approved grant's end may have passed before imsd heard so.
		if until = ago(now, g.GetExpireTime()); g.GetExpireTime() != nil && !now.Before(g.GetExpireTime().AsTime()) {
			until = "ended " + until
		}
	case "revoked":
		until = strings.TrimSpace("revoked " + ago(now, g.GetRevokeTime()))
	}
	by := g.GetDecidedBy()
	if g.GetRevokedBy() != "" {
		by = strings.TrimPrefix(by+", revoked by "+g.GetRevokedBy(), ", ")
	}
	return []string{g.GetId(), g.GetInstallName(), g.GetRole(), g.GetState(), until, g.GetRequestedBy(), g.GetReason(), by, g.GetDecisionReason()}
}
