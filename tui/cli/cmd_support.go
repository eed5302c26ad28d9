package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/charmbracelet/x/term"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// supportCommand groups the support engineer's interactive tools.
func (a *app) supportCommand() *cobra.Command {
	return group("support", "Interactive support in an install (a shell under a break-glass grant)", a.supportShellCommand())
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
allowed (agentd breakglass approve ID --allow-sessions) is live, and ends
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
	ctx := cmd.Context()
	c, err := a.connectStreams()
	if err != nil {
		return err
	}
	in, _ := a.stdin.(*os.File)
	out, _ := a.stdout.(*os.File)
	tty := in != nil && out != nil && a.stdinTerminal() && a.terminal(a.stdout)
	rows, cols := uint32(24), uint32(80)
	if out != nil && a.terminal(a.stdout) {
		if w, h, err := term.GetSize(out.Fd()); err == nil && w > 0 && h > 0 {
			rows, cols = uint32(min(h, 1000)), uint32(min(w, 1000))
		}
	}
	termName := a.getenv("TERM")
	if termName == "" {
		termName = "xterm-256color"
	}
	st := c.SupportShell(ctx)
	if err := st.Send(&imsv1.SupportShellRequest{Install: install, Open: &imsv1.SupportShellOpen{Component: component, Command: command,
		Size: &imsv1.TerminalSize{Rows: rows, Cols: cols}, Term: termName}}); err != nil && !errors.Is(err, io.EOF) {
		return c.wrap(err)
	}
	first, err := st.Receive()
	if err != nil {
		return c.wrap(err)
	}
	if first.Started == nil {
		return fmt.Errorf("imsd answered the session's start with no start")
	}
	exp := first.Started.GetGrantExpireTime().AsTime()
	fmt.Fprintf(a.stderr, "[byoc] BREAK-GLASS support session %s on %s under grant %s (until %s, %s left); recorded by the customer's agent\r\n",
		first.SessionId, install, first.Started.GrantId, exp.Local().Format(time.DateTime), exp.Sub(a.now()).Round(time.Second))
	if tty {
		old, err := term.MakeRaw(in.Fd())
		if err == nil {
			defer term.Restore(in.Fd(), old)
		}
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				if w, h, err := term.GetSize(out.Fd()); err == nil && w > 0 && h > 0 {
					st.Send(&imsv1.SupportShellRequest{Resize: &imsv1.TerminalSize{Rows: uint32(min(h, 1000)), Cols: uint32(min(w, 1000))}})
				}
			}
		}()
	}
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := a.stdin.Read(buf)
			if n > 0 {
				if st.Send(&imsv1.SupportShellRequest{Input: append([]byte(nil), buf[:n]...)}) != nil {
					return
				}
			}
			if err != nil {
				return // the session ends when its command does
			}
		}
	}()
	for {
		m, err := st.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return &exitCodeError{code: exitError, msg: "the session ended without saying how"}
			}
			return c.wrap(err)
		}
		if len(m.Output) > 0 {
			if _, err := a.stdout.Write(m.Output); err != nil {
				st.Send(&imsv1.SupportShellRequest{Close: true})
				return err
			}
		}
		if e := m.Ended; e != nil {
			st.CloseRequest()
			fmt.Fprintf(a.stderr, "\r\n[byoc] session %s %s", first.SessionId, e.Reason)
			if e.RecordingSha256 != "" {
				fmt.Fprintf(a.stderr, " (the customer's recording: %d bytes, sha256 %s)", e.RecordingBytes, e.RecordingSha256)
			}
			fmt.Fprint(a.stderr, "\r\n")
			if e.ExitCode > 0 {
				return &exitCodeError{code: int(e.ExitCode)}
			}
			return nil
		}
	}
}
