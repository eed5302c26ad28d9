package console

import (
	"context"
	"fmt"

	tea "charm.land/bubbletea/v2"
	"connectrpc.com/connect"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// actionsView is what `a` opens: the install's app actions (name, mode,
// description, as `byoc action list` prints them), then, last, an ad-hoc
// script. Enter on an action asks, then starts an action run (a workflow,
// as `byoc action run INSTALL ACTION` does); on the last row it asks for
// the script as before. An action of mode break_glass, and the script
// while the operator holds a live grant on the install, asks for the
// install's name typed out instead of y.
type actionsView struct {
	*env
	list
	install  *imsv1.InstallStatus
	gen      int // of the listing
	startGen int // of the run being started
	actions  []*imsv1.Action
	revision int64
	err      error
	loaded   bool
	w, h     int
}

func newActionsView(e *env, install *imsv1.InstallStatus) *actionsView {
	return &actionsView{env: e, install: install}
}

// actionsMsg is the install's actions (ListActions).
type actionsMsg struct {
	gen      int
	actions  []*imsv1.Action
	revision int64
	err      error
}

// actionRunMsg is the answer to StartActionRun.
type actionRunMsg struct {
	gen int
	run *imsv1.ActionRun
	err error
}

func listActions(ctx context.Context, c imsv1connect.OperatorServiceClient, gen int, install string) tea.Cmd {
	return func() tea.Msg {
		r, err := c.ListActions(ctx, connect.NewRequest(&imsv1.ListActionsRequest{Install: install}))
		if err != nil {
			return actionsMsg{gen: gen, err: err}
		}
		return actionsMsg{gen: gen, actions: r.Msg.Actions, revision: r.Msg.AppRevision}
	}
}

func startActionRun(ctx context.Context, c imsv1connect.OperatorServiceClient, gen int, install, action string) tea.Cmd {
	return func() tea.Msg {
		r, err := c.StartActionRun(ctx, connect.NewRequest(&imsv1.StartActionRunRequest{
			Install: install, Action: action, Reason: "started from the byoc console"}))
		if err != nil {
			return actionRunMsg{gen: gen, err: err}
		}
		return actionRunMsg{gen: gen, run: r.Msg.Run}
	}
}

func (v *actionsView) Init() tea.Cmd {
	v.gen = v.nextGen()
	return listActions(v.ctx, v.conn.Client, v.gen, v.install.Install.Name)
}

func (v *actionsView) Title() string    { return "actions" }
func (v *actionsView) SetSize(w, h int) { v.w, v.h = w, h; v.scroll() }

// rows is the actions and the ad-hoc script row.
func (v *actionsView) rows() int { return len(v.actions) + 1 }

// scroll keeps the cursor in the window under the header lines.
func (v *actionsView) scroll() { v.list.scroll(v.rows(), v.h-3) }

func (v *actionsView) Update(msg tea.Msg) tea.Cmd {
	defer v.scroll()
	switch msg := msg.(type) {
	case actionsMsg:
		if msg.gen != v.gen {
			return nil
		}
		v.loaded, v.err, v.actions, v.revision = true, msg.err, msg.actions, msg.revision
	case actionRunMsg:
		if msg.gen != v.startGen {
			return nil
		}
		if msg.err != nil {
			v.nav.setStatus(true, "action not started: %s", errText(msg.err))
			return nil
		}
		v.nav.setStatus(false, "action %s started on %s (%s); its jobs appear in the install's list", msg.run.Action, v.install.Install.Name, msg.run.Id)
	case tea.KeyPressMsg:
		if v.move(v.km, msg, v.rows(), v.h-3) {
			return nil
		}
		if v.km.Is(msg, ActOpen) {
			return v.choose()
		}
	}
	return nil
}

// choose acts on the row under the cursor.
func (v *actionsView) choose() tea.Cmd {
	if v.pos >= len(v.actions) {
		return v.nav.startScript(v.install)
	}
	a := v.actions[v.pos]
	name := v.install.Install.Name
	details := []string{
		fmt.Sprintf("Starts the app's action %q (revision %d) on %s as an action run.", a.Name, v.revision, name),
		"Needs permission mode: " + a.Mode + " (refused while the customer has it off).",
	}
	if a.Description != "" {
		details = append([]string{a.Description}, details...)
	}
	g := v.nav.grant(v.InstallID())
	details = append(details, v.modeLines(name, a.Mode, g)...)
	title := fmt.Sprintf("run action %s on %s", a.Name, name)
	yes := func() tea.Cmd {
		v.startGen = v.nextGen()
		return startActionRun(v.ctx, v.conn.Client, v.startGen, name, a.Name)
	}
	if a.Mode == "break_glass" {
		if g != nil {
			details = append(details, v.st.warn.Render(fmt.Sprintf("Runs UNDER BREAK-GLASS grant %s (role %s, approved by %s).", g.Id, g.Role, g.DecidedBy)))
		}
		return v.nav.askTyped(title+" (break_glass)", details, name, yes)
	}
	return v.nav.ask(title, details, yes)
}

func (v *actionsView) View() string {
	st := v.st
	out := []string{st.title.Render("Run an action on " + v.install.Install.Name)}
	switch {
	case !v.loaded:
		out = append(out, st.muted.Render("loading the app's actions…"))
	case v.err != nil:
		out = append(out, st.bad.Render("actions not listed: "+errText(v.err)))
	case len(v.actions) == 0:
		out = append(out, st.muted.Render("the app declares no actions"))
	default:
		out = append(out, st.muted.Render(fmt.Sprintf("the app's actions at revision %d; enter asks, then runs", v.revision)))
	}
	need := map[string]int{}
	for _, a := range v.actions {
		widest(need, map[string]string{"NAME": a.Name, "MODE": a.Mode, "DESCRIPTION": a.Description})
	}
	cols := layoutFit([]column{{"NAME", 20, 0}, {"MODE", 12, 1}, {"DESCRIPTION", 0, 2}}, v.w, 12, 200, need)
	out = append(out, st.muted.Render(row(cols, map[string]string{"NAME": "NAME", "MODE": "MODE", "DESCRIPTION": "DESCRIPTION"})))
	first, last, pos := v.window(v.rows(), v.h-3)
	scriptMode := "maintenance"
	if v.nav.grant(v.InstallID()) != nil {
		scriptMode = "break_glass" // under the grant (confirmScript)
	}
	for i := first; i < last; i++ {
		cells := map[string]string{"NAME": "ad-hoc script…", "MODE": scriptMode, "DESCRIPTION": "a shell script you type, as a one-off job"}
		if i < len(v.actions) {
			a := v.actions[i]
			cells = map[string]string{"NAME": a.Name, "MODE": a.Mode, "DESCRIPTION": a.Description}
		}
		line := row(cols, cells)
		if i == pos {
			line = v.selectedLine(line, v.w)
		}
		out = append(out, line)
	}
	return lines(out)
}

// rowInstall is the install whose actions are listed.
func (v *actionsView) rowInstall() *imsv1.InstallStatus { return v.install }
