package cli

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// agentCommand groups what the vendor does to an install's agent itself.
func (a *app) agentCommand() *cobra.Command {
	return group("agent", "Act on an install's agent (revoke a compromised one) and publish agent releases", a.agentRevokeCommand(), a.agentPublishCommand())
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
