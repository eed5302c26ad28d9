package cli

import (
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/plural"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// agentRolloutCommand is byoc agent rollout: agent releases rolled out
// through the release machinery (an agent rollout is a release whose
// installs are offered an agent release), so get, approve, pause,
// resume, cancel and retry are the release commands.
func (a *app) agentRolloutCommand() *cobra.Command {
	return group("rollout", "Roll an agent release out to many installs' agents in waves, canaries first, halting on failures",
		a.agentRolloutCreateCommand(),
		a.releaseListOf("agent", "No agent rollouts; start one with: byoc agent rollout create --release oci://...@sha256:... --canary 1"),
		a.releaseGetCommand(),
		a.releaseChangeCommand("approve", "Start the wave an agent rollout awaits approval for"),
		a.releaseChangeCommand("pause", "Stop an agent rollout from offering the release to more installs"),
		a.releaseChangeCommand("resume", "Run a paused or halted agent rollout again (a halted one's failures are accepted)"),
		a.releaseChangeCommand("cancel", "Cancel an agent rollout: installs not offered the release never are; offers no agent took are withdrawn (an applied update is not undone)"),
		a.releaseChangeCommand("retry", "Offer the release again to an agent rollout's failed installs, and run it again"),
	)
}

// shortRef is an agent release's reference with its digest shortened.
func shortRef(ref string) string {
	if i := strings.Index(ref, "@sha256:"); i >= 0 && len(ref) > i+8+12 {
		return strings.TrimPrefix(ref[:i], "oci://") + "@" + ref[i+8:i+8+12]
	}
	return ref
}

func (a *app) agentRolloutCreateCommand() *cobra.Command {
	var ref, appName, selector, waves, groupBy, maxFailures, reason string
	var canary int32
	var within time.Duration
	var approval, windows, wait bool
	cmd := &cobra.Command{
		Use:   "create --release oci://HOST/REPOSITORY@sha256:... [-l SELECTOR] [--app APP] [--canary N] [--group-by LABEL | --waves SPEC] [--max-failures N|P%] [--approve-each-wave] [--confirm-within D] [--wait]",
		Short: "Offer an agent release to the selected installs' agents wave by wave, canaries first; halt on failures",
		Long: `Offer an agent release (byoc agent publish prints its reference) to the
agents of the selected installs, wave by wave. An install succeeds when its
agent reports the new version confirmed (it reconnected and passed its
self-check); it fails when the agent refuses the release (its customer's
policy, the signature), fails to apply it (download, self-check), rolls it
back, or does not confirm within --confirm-within. An agent whose
customer's update window is shut defers the release to the window's next
opening: its install waits, and the deadline counts from when it applies.

--canary N makes the first wave N installs; with more than one wave, the
first is the canary: one failure there halts the rollout, whatever
--max-failures tolerates. --group-by LABEL makes one wave per value of the
label (after the canary). More failed installs than --max-failures halt
the rollout: installs not offered yet never are. Each agent still decides
by its customer's update policy: a rollout only offers.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if ref == "" {
				return usagef("--release is required (byoc agent publish prints it)")
			}
			if within < 0 {
				return usagef("--confirm-within must not be negative")
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.CreateRelease(cmd.Context(), connect.NewRequest(&imsv1.CreateReleaseRequest{App: appName, AgentRelease: ref,
				Selector: selector, Waves: waves, Canary: canary, GroupBy: groupBy, MaxFailures: maxFailures,
				ConfirmWithinSeconds: int64(within / time.Second), RequireApproval: approval, RespectWindows: windows, Reason: reason}))
			if err != nil {
				return withFlags(c.wrap(err), fieldFlag{"agent_release", "--release"}, fieldFlag{"waves", "--waves"},
					fieldFlag{"selector", "--selector"}, fieldFlag{"max_failures", "--max-failures"}, fieldFlag{"canary", "--canary"},
					fieldFlag{"group_by", "--group-by"}, fieldFlag{"confirm_within", "--confirm-within"}, fieldFlag{"app", "--app"})
			}
			r := res.Msg.GetRelease()
			if wait {
				return a.followRelease(cmd.Context(), c, r.GetId())
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, r)
			}
			fmt.Fprintf(a.stdout, "Agent rollout %s of %s: %s of %s in %s (%s).\n", r.GetId(), shortRef(ref),
				plural.Count(int(sumCounts(r.GetCounts())), "install"), r.GetAppName(), plural.Count(len(r.GetWaves()), "wave"), waveSummary(r))
			printPlanGroupsOf(a.stdout, r)
			fmt.Fprintf(a.stdout, "Follow it with: byoc agent rollout get %s --wait\n", r.GetId())
			return nil
		},
	}
	cmd.Flags().StringVar(&ref, "release", "", "the agent release, oci://HOST/REPOSITORY@sha256:... (required)")
	selectorFlag(cmd, &selector, "installs")
	cmd.Flags().StringVar(&appName, "app", "", "the app whose installs to roll out to (default: the one app of the selected installs)")
	cmd.Flags().Int32Var(&canary, "canary", 0, "a first wave of this many installs; one failure in it halts the rollout")
	cmd.Flags().StringVar(&waves, "waves", "", `the waves instead: counts or cumulative shares, optionally named ("canary:1,10%,50%,100%")`)
	cmd.Flags().StringVar(&groupBy, "group-by", "", "one wave per value of this label (after the canary)")
	cmd.Flags().StringVar(&maxFailures, "max-failures", "0", `failed installs tolerated, a count or a share ("5%"); one more halts the rollout`)
	cmd.Flags().DurationVar(&within, "confirm-within", 0, "how long each install's agent has to confirm the new version (default 10m)")
	cmd.Flags().BoolVar(&approval, "approve-each-wave", false, "each wave waits for byoc agent rollout approve")
	cmd.Flags().BoolVar(&windows, "respect-windows", false, "offer only inside each install's maintenance windows (the agent keeps its own update window either way)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the rollout")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the rollout until it ends (exit codes as release get --wait)")
	return cmd
}
