package cli

import (
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/window"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// agentCommand groups what the vendor does to an install's agent itself.
func (a *app) agentCommand() *cobra.Command {
	return group("agent", "Act on an install's agent (revoke a compromised one), publish agent releases, offer them and roll them out", a.agentRevokeCommand(), a.agentPublishCommand(), a.agentUpdateCommand(), a.agentRolloutCommand())
}

func (a *app) agentRevokeCommand() *cobra.Command {
	var agentID, reason string
	cmd := &cobra.Command{
		Use:   "revoke INSTALL [--agent AGENT_ID] --reason TEXT",
		Short: "Refuse an install's agent from now on (a compromised agent); enrol a new one with byoc install token",
		Args:  exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.RevokeAgent(cmd.Context(), connect.NewRequest(&imsv1.RevokeAgentRequest{Install: args[0], AgentId: agentID, Reason: reason}))
			if err != nil {
				return withFlags(c.wrap(err), fieldFlag{"agent_id", "--agent"}, fieldFlag{"reason", "--reason"})
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg)
			}
			fmt.Fprintf(a.stdout, "Revoked agent %s of install %s: imsd refuses it from now on, and it stops at its next connection.\n",
				strings.Join(res.Msg.GetAgentIds(), ", "), args[0])
			fmt.Fprintf(a.stdout, "To run the install again, enrol a new agent: byoc install token %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&agentID, "agent", "", "revoke only this agent of the install (default: every agent of it not revoked yet)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit trail")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

func (a *app) agentUpdateCommand() *cobra.Command {
	var release, selector, offerID, reason string
	var withdraw bool
	cmd := &cobra.Command{
		Use:   "update (INSTALL | -l SELECTOR) (--release oci://HOST/REPOSITORY@sha256:... | --withdraw [--offer ID] [--reason TEXT])",
		Short: "Offer an agent release to an install's agent (it applies it only as its customer's update policy allows), or withdraw the offer",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 1) == (selector != "") {
				return &usageError{"byoc agent update: give an INSTALL or -l SELECTOR (not both)"}
			}
			if withdraw == (release != "") {
				return &usageError{"byoc agent update: give --release or --withdraw (one of them)"}
			}
			if !withdraw && (offerID != "" || reason != "") {
				return &usageError{"byoc agent update: --offer and --reason go with --withdraw"}
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			installs := args
			if selector != "" {
				res, err := c.ListInstalls(cmd.Context(), connect.NewRequest(&imsv1.ListInstallsRequest{Selector: selector}))
				if err != nil {
					return withFlags(c.wrap(err), fieldFlag{"selector", "--selector"})
				}
				installs = nil
				for _, in := range res.Msg.GetInstalls() {
					if in.GetAgent() != nil {
						installs = append(installs, in.GetName())
					}
				}
				if len(installs) == 0 {
					return fmt.Errorf("no install with an agent matches %s", selector)
				}
			}
			var out []*imsv1.OfferAgentUpdateResponse
			for _, in := range installs {
				res, err := c.OfferAgentUpdate(cmd.Context(), connect.NewRequest(&imsv1.OfferAgentUpdateRequest{Install: in, Release: release,
					Withdraw: withdraw, OfferId: offerID, Reason: reason}))
				if err != nil {
					return fmt.Errorf("install %s: %w", in, withFlags(c.wrap(err), fieldFlag{"release", "--release"}, fieldFlag{"offer_id", "--offer"}, fieldFlag{"reason", "--reason"}))
				}
				out = append(out, res.Msg)
				if withdraw && !a.jsonOutput() {
					fmt.Fprintf(a.stdout, "Withdrew offer %s from agent %s of install %s.\n", res.Msg.GetOfferId(), strings.Join(res.Msg.GetAgentIds(), ", "), in)
				} else if !a.jsonOutput() {
					fmt.Fprintf(a.stdout, "Offered %s to agent %s of install %s (offer %s).\n", release, strings.Join(res.Msg.GetAgentIds(), ", "), in, res.Msg.GetOfferId())
				}
			}
			if a.jsonOutput() {
				return writeJSONList(a.stdout, out)
			}
			if withdraw {
				fmt.Fprintln(a.stdout, "An agent that has not applied it drops it when it hears of the withdrawal (a deferred one is never applied); one that applied it already keeps the new version: offer the previous release to go back. See byoc install get INSTALL")
				return nil
			}
			fmt.Fprintln(a.stdout, "Each agent applies it only if its customer's update policy allows (agentd update policy --allow, in its window), and reports what it did: byoc install get INSTALL")
			return nil
		},
	}
	cmd.Flags().StringVar(&release, "release", "", "the agent release, oci://HOST/REPOSITORY@sha256:... (byoc agent publish prints it)")
	cmd.Flags().BoolVar(&withdraw, "withdraw", false, "take back the offer standing for the install's agents (not an agent rollout's: cancel the rollout); an applied update is not undone")
	cmd.Flags().StringVar(&offerID, "offer", "", "with --withdraw: only this offer (uo_...)")
	cmd.Flags().StringVar(&reason, "reason", "", "with --withdraw: why, for the audit trail")
	selectorFlag(cmd, &selector, "installs")
	return cmd
}

// updatePolicyShort is an agent's update policy in a table cell: manual,
// "pin 1.4.2", ">=1.4 <2 Sun 03:00-05:00 UTC"; "-" for never reported.
func updatePolicyShort(u *imsv1.AgentUpdate) string {
	if u == nil {
		return "-"
	}
	s := "manual"
	switch u.GetMode() {
	case "pin":
		s = "pin " + u.GetPin()
	case "allow":
		s = u.GetAllow()
	}
	if u.GetWindow() != "" {
		s += " " + u.GetWindow()
	}
	return s
}

// updatePolicyText is an agent's update policy for install get.
func updatePolicyText(u *imsv1.AgentUpdate) string {
	if u == nil {
		return "not reported (an agentd before update reports)"
	}
	var s string
	switch u.GetMode() {
	case "pin":
		s = "pinned to " + u.GetPin() + " (offers of other versions are refused)"
	case "allow":
		s = "automatic, versions " + u.GetAllow()
	default:
		s = "manual (offers are refused; the customer applies updates by hand)"
	}
	if u.GetWindow() != "" {
		s += ", in the window " + u.GetWindow()
	}
	return s + " (set by the customer: agentd update policy)"
}

// updateDecisionText is the agent's latest update decision, "" for none.
func updateDecisionText(now time.Time, u *imsv1.AgentUpdate) string {
	if u.GetLastKind() == "" {
		return ""
	}
	s := strings.ReplaceAll(u.GetLastKind(), "_", " ")
	if v := u.GetLastVersion(); v != "" {
		s += " " + v
	}
	if c := u.GetLastCause(); c != "" {
		s += " [" + c + "]"
	}
	s += " (" + u.GetLastRelease() + ")"
	if u.GetLastTime() != nil {
		s += " " + ago(now, u.GetLastTime())
	}
	if r := u.GetLastReason(); r != "" {
		s += ": " + r
	}
	return s
}

// updateOfferText is the release last offered to the agent and whether
// it answered, "" for none.
func updateOfferText(now time.Time, ag *imsv1.AgentStatus) string {
	o := ag.GetUpdateOffer()
	if o == nil {
		return ""
	}
	s := fmt.Sprintf("%s (offer %s) by %s %s", o.GetRelease(), o.GetId(), o.GetOfferedBy(), ago(now, o.GetOfferTime()))
	if o.GetWithdrawTime() != nil {
		s += fmt.Sprintf(", withdrawn by %s %s", o.GetWithdrawnBy(), ago(now, o.GetWithdrawTime()))
		if r := o.GetWithdrawReason(); r != "" {
			s += " (" + r + ")"
		}
		switch u := ag.GetUpdate(); {
		case u.GetLastOfferId() != o.GetId() || u.GetLastKind() == "deferred":
			return s + ": the agent has not heard of the withdrawal yet"
		case u.GetLastKind() == "withdrawn":
			return s + ": withdrawn (the agent dropped it)"
		default:
			return s + ": " + strings.ReplaceAll(u.GetLastKind(), "_", " ") + " before the withdrawal reached the agent (an applied update is not undone)"
		}
	}
	if u := ag.GetUpdate(); u.GetLastOfferId() == o.GetId() {
		s += ": " + strings.ReplaceAll(u.GetLastKind(), "_", " ")
		if u.GetLastKind() == "deferred" {
			s += deferredWait(now, ag)
		}
		return s
	}
	return s + ": not answered yet"
}

// deferredWait says what a deferred offer waits for: the customer's
// window to open, or, the window open, the agent to ask imsd whether the
// offer still stands (at once when connected; once it reconnects).
func deferredWait(now time.Time, ag *imsv1.AgentStatus) string {
	w := ag.GetUpdate().GetWindow()
	if w == "" {
		return ""
	}
	sch, err := window.ParseSchedule([]string{w})
	if err != nil {
		return ""
	}
	switch {
	case !sch.Contains(now):
		if next := sch.NextOpening(now); !next.IsZero() {
			return fmt.Sprintf(" until the customer's window opens, %s (in %s)", next.UTC().Format(time.RFC3339), next.Sub(now).Round(time.Minute))
		}
		return ""
	case ag.GetConnected():
		return "; the customer's window is open: the agent applies it once imsd confirms it still stands (at its next heartbeat)"
	default:
		return "; the customer's window is open but the agent is disconnected: it asks imsd to confirm the offer when it reconnects"
	}
}
