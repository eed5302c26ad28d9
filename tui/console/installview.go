package console

import (
	"fmt"
	"sort"
	"strings"

	tea "charm.land/bubbletea/v2"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// installView is one install: its agent, inputs (secrets masked), the
// sections later issues fill, and its jobs (a jobList, listed again when
// the fleet says this install changed).
type installView struct {
	jobList
	installParts
	auditPanel
}

func newInstallView(e *env, id string) *installView {
	return &installView{jobList: jobList{env: e, id: id}}
}

// Init lists the install's jobs, workflows, actions and audit events.
func (v *installView) Init() tea.Cmd {
	return tea.Batch(v.jobList.Init(), v.loadParts(), v.loadAudit())
}

func (v *installView) Title() string      { return v.installName(v.id) }
func (v *installView) Hints() []Action    { return []Action{ActRunAction, ActBreakGlass, ActCancelJob} }
func (v *installView) SetSize(w, h int)   { v.w, v.h = w, h; v.scroll() }
func (v *installView) SetFilter(s string) { v.setFilter(s); v.scroll() }

// scroll keeps the job table's window on its cursor; the table has the
// lines the install's header leaves.
func (v *installView) scroll() {
	if s := v.fleet.byID[v.id]; s != nil {
		v.jobList.scroll(v.h - len(v.header(s)) - 1)
	}
}

func (v *installView) Update(msg tea.Msg) tea.Cmd {
	defer v.scroll()
	switch msg := msg.(type) {
	case fleetChangedMsg:
		for _, r := range msg.resps {
			for _, s := range r.Installs {
				if s.Install.Id == v.id {
					// Its jobs moved: list them, its workflows and its
					// audit events again.
					return tea.Batch(v.refresh(), v.loadParts(), v.loadAudit())
				}
			}
		}
		return nil
	case tea.KeyPressMsg:
		if cmd, ok := v.update(msg); ok {
			return cmd
		}
		if v.km.Is(msg, ActRunAction) {
			return v.nav.startAction(v.fleet.byID[v.id])
		}
		if v.km.Is(msg, ActBreakGlass) {
			return v.nav.startBreakGlass(v.fleet.byID[v.id])
		}
		return nil
	}
	if v.partsUpdate(msg) {
		return nil
	}
	if cmd, ok := v.auditUpdate(msg); ok {
		return cmd
	}
	cmd, _ := v.update(msg)
	return cmd
}

func (v *installView) View() string {
	s := v.fleet.byID[v.id]
	if s == nil {
		return lines([]string{"", "  this install is not in the fleet (any more); esc goes back"})
	}
	out := v.header(s)
	rest := v.h - len(out)
	out = append(out, v.st.accent.Render(fmt.Sprintf("JOBS (%d)", len(v.jobs))))
	return lines(append(out, v.table(false, v.w, rest-1)...))
}

// header is what the view shows above the job table.
func (v *installView) header(s *imsv1.InstallStatus) []string {
	st := v.st
	in := s.Install
	agent := "no agent enrolled yet (byoc install token " + in.Name + ")"
	if a := in.Agent; a != nil {
		state := agentState(s)
		if disabledByCustomer(s) {
			state += ", disabled by customer"
		}
		agent = fmt.Sprintf("%s  %s  %s  last heard %s", state, a.AgentId, a.Hostname, heardText(v.now, s))
		if a.Version != "" {
			agent += "  v" + strings.TrimPrefix(a.Version, "v")
		}
	}
	out := []string{
		st.title.Render(in.Name) + "  " + st.muted.Render(in.Id),
		fmt.Sprintf("app %s   revision %s   state %s   health %s   modes %s   drift %s", s.AppName, revision(s), installState(s), healthState(s), ModesText(in.Agent.GetPermissions()), dash),
		"agent " + agent,
		"",
		st.accent.Render("INPUTS"),
	}
	if len(in.Inputs) == 0 {
		out = append(out, "  (none)")
	}
	keys := make([]string, 0, len(in.Inputs))
	for k := range in.Inputs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val := in.Inputs[k]
		if sensitive(k) {
			val = "•••••• (sensitive)"
		}
		out = append(out, "  "+k+" = "+val)
	}
	// The job table keeps at least minJobRows rows: the sections give way
	// (their end cut, saying so) in a short window, and the audit panel's
	// events before them (its heading stays).
	const minJobRows = 5
	parts := v.parts(v.jobs)
	audit := v.auditLines(in.Name)
	events := audit[1:]
	room := v.h - len(out) - 2 - minJobRows - 2
	if len(parts) > room {
		cut := len(parts) - max(0, room-1)
		parts = append(parts[:max(0, room-1)], st.muted.Render(fmt.Sprintf("  … %d more lines in a taller window", cut)))
		events = nil
	} else if len(events) > room-len(parts) {
		events = events[:room-len(parts)]
	}
	out = append(out, parts...)
	out = append(out, audit[0])
	out = append(out, events...)
	return append(out, "")
}
