package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/term"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
	"github.com/byoc-dev/byoc/tui/supportshell"
)

// Support shells in the console. On an install, the support-shell key
// (bound only where the caller's roles allow break-glass on the install:
// SupportShell's rule in imsd) asks for the install's name typed out,
// showing the operator's live break-glass grant there and its time left
// (the header's break-glass banner counts it down too), or that the
// console has seen none and the agent will refuse. Then the console
// hands the terminal over with tea.Exec to supportshell.Run, the session
// code `byoc support shell` runs: the break-glass banner with the grant
// and its time left, the shell in raw mode, until the session ends. The
// console redraws when it does, with the session's end (the reason, the
// customer's recording's hash) in the status line. The agent, not the
// console, decides whether the session opens.

// shellEndedMsg is a support session's end, from tea.Exec's callback.
type shellEndedMsg struct {
	gen     int
	install string
	res     *supportshell.Result
	err     error
}

// shellExec is one support session as a tea.ExecCommand: the program
// releases the terminal, hands it over with the Set methods and calls
// Run (not from Update), then takes the terminal back.
type shellExec struct {
	ctx  context.Context
	c    imsv1connect.OperatorServiceClient
	opts supportshell.Options
	res  *supportshell.Result
	err  error
}

func (s *shellExec) SetStdin(r io.Reader)  { s.opts.Stdin = r }
func (s *shellExec) SetStdout(w io.Writer) { s.opts.Stdout, s.opts.Banner = w, w }

// SetStderr is ignored: the banner goes to the terminal the session
// writes to (the program's output).
func (s *shellExec) SetStderr(io.Writer) {}

// Run runs the session. Its error is kept for the callback (a non-nil
// return would only say the same thing without the session's id).
func (s *shellExec) Run() error {
	in, ok := s.opts.Stdin.(*os.File)
	out, ok2 := s.opts.Stdout.(*os.File)
	s.opts.Terminal = ok && ok2 && term.IsTerminal(in.Fd()) && term.IsTerminal(out.Fd())
	s.opts.Term = os.Getenv("TERM")
	s.res, s.err = supportshell.Run(s.ctx, s.c, s.opts)
	return nil
}

// startShell asks before opening a support shell on install.
func (m *Model) startShell(install *imsv1.InstallStatus) tea.Cmd {
	if install == nil || m.opts.ReadOnly || slices.Contains(m.opts.Denied, ActSupportShell) || m.conn == nil ||
		(m.conn.Access != nil && !m.conn.Access.Allows(ActSupportShell, install)) {
		return nil
	}
	name := install.GetInstall().GetName()
	details := []string{
		"Opens a shell (a PTY) in " + name + "'s account through its agent, in the sandbox, with the",
		"break-glass role's credentials only. The console hands this terminal over to it until",
		"the session ends (exit, the grant's end, or the customer ending it), then comes back.",
		"The customer's agent records everything typed and shown; imsd audits its start and end.",
		"",
	}
	if g := m.liveGrant(install.GetInstall().GetId()); g != nil {
		left := g.ExpireTime.AsTime().Sub(m.now).Truncate(time.Second)
		details = append(details, m.st.warn.Render(fmt.Sprintf("UNDER BREAK-GLASS grant %s (role %s, approved by %s): %s left; the session ends with it.",
			g.Id, g.Role, g.DecidedBy, countdown(left))),
			m.st.muted.Render("The agent opens it only if the customer approved the grant with sessions allowed."))
	} else {
		details = append(details, m.st.warn.Render("The console has seen no live break-glass grant of yours on "+name+": the agent will refuse"),
			m.st.warn.Render("the session unless one approved with sessions allowed is live (b requests one)."))
	}
	return m.askTyped("open a support shell on "+name+" under break-glass", details, name, func() tea.Cmd {
		gen := m.nextGen()
		m.shellGen = gen
		c := m.conn.Streams
		if c == nil {
			c = m.conn.Client
		}
		x := &shellExec{ctx: m.ctx, c: c, opts: supportshell.Options{Install: name, Now: m.opts.Now}}
		m.setStatus(false, "support shell on %s…", name)
		return tea.Exec(x, func(err error) tea.Msg {
			if x.err != nil {
				err = x.err
			}
			return shellEndedMsg{gen: gen, install: name, res: x.res, err: err}
		})
	})
}

// shellEnded shows a session's end in the status line.
func (m *Model) shellEnded(msg shellEndedMsg) {
	if msg.gen != m.shellGen {
		return
	}
	r := msg.res
	if r == nil {
		r = &supportshell.Result{}
	}
	switch {
	case r.SessionID == "" && msg.err != nil:
		m.setStatus(true, "no support shell on %s: %s", msg.install, errText(msg.err))
	case r.Ended == nil:
		err := msg.err
		if err == nil {
			err = supportshell.ErrNoEnd
		}
		m.setStatus(true, "support session %s on %s: %s", r.SessionID, msg.install, errText(err))
	default:
		s := fmt.Sprintf("support session %s on %s %s", r.SessionID, msg.install, r.Ended.Reason)
		if r.Ended.ExitCode > 0 {
			s += fmt.Sprintf(" (exit %d)", r.Ended.ExitCode)
		}
		if sum := r.Ended.RecordingSha256; sum != "" {
			s += fmt.Sprintf("; the customer's recording: sha256 %s, %d bytes", sum, r.Ended.RecordingBytes)
		}
		if msg.err != nil && !errors.Is(msg.err, supportshell.ErrNoEnd) {
			s += "; " + errText(msg.err)
		}
		m.setStatus(r.Ended.Refused, "%s", s)
	}
}
