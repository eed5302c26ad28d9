package cli

import (
	"errors"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/tui/supportshell"
)

// supportCommand groups the support engineer's interactive tools.
func (a *app) supportCommand() *cobra.Command {
	return group("support", "Interactive support in an install (a shell under a break-glass grant) and its kept recordings",
		a.supportShellCommand(), a.supportRecordingsCommand(), a.supportPlayCommand())
}

func (a *app) supportShellCommand() *cobra.Command {
	var component string
	cmd := &cobra.Command{
		Use:   "shell INSTALL [-- COMMAND [ARGS...]]",
		Short: "Open a shell (a PTY) in an install, through its agent, under a live break-glass grant",
		Long: `Open an interactive shell in INSTALL's account: a PTY the install's agent
starts on the customer's side, in the sandbox vendor code runs in, with
only the break-glass role's credentials. It travels over the agent's own
outbound stream (no inbound port, no new connection). The agent refuses
it unless a break-glass grant the customer approved with sessions
allowed (agentd breakglass approve ID --role ROLE --for D --allow-sessions) is live, and ends
it when the grant expires or is revoked, or when the customer kills it.
The customer's agent records it (input, output, timing; asciicast v2)
and imsd audits its start and end with the recording's SHA-256.

With a terminal, it is put in raw mode: keys, Ctrl-C and resizes reach
the shell as with kubectl exec -it. COMMAND runs instead of /bin/sh.
Needs the break-glass permission (support, admin) on the install; imsd
serves it from the replica that holds the agent's stream.`,
		Example: `  byoc support shell acme
  byoc support shell acme --component api -- kubectl get pods`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			install, command := args[0], args[1:]
			if n := cmd.ArgsLenAtDash(); n >= 0 {
				if n != 1 {
					return usagef("byoc support shell takes one INSTALL before --")
				}
			} else if len(args) > 1 {
				return usagef("put the command after --: byoc support shell %s -- %s", install, args[1])
			}
			return a.supportShell(cmd, install, component, command)
		},
	}
	cmd.Flags().StringVar(&component, "component", "", "the install's component the shell is for (its state directory is mounted)")
	return cmd
}

func (a *app) supportShell(cmd *cobra.Command, install, component string, command []string) error {
	c, err := a.connectStreams()
	if err != nil {
		return err
	}
	res, err := supportshell.Run(cmd.Context(), c.OperatorServiceClient, supportshell.Options{
		Install: install, Component: component, Command: command, Term: a.getenv("TERM"),
		Stdin: a.stdin, Stdout: a.stdout, Banner: a.stderr,
		Terminal: a.stdinTerminal() && a.terminal(a.stdout), Now: a.now,
	})
	switch {
	case errors.Is(err, supportshell.ErrNoEnd):
		return &exitCodeError{code: exitError, msg: err.Error()}
	case errors.As(err, new(*connect.Error)):
		return c.wrap(err)
	case err != nil:
		return err // the output could not be written
	}
	if res.Ended.ExitCode > 0 {
		return &exitCodeError{code: int(res.Ended.ExitCode)}
	}
	return nil
}
