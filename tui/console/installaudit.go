package console

import (
	"fmt"
	"time"

	tea "charm.land/bubbletea/v2"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/tui/termtext"
)

// auditPanel is the install view's audit panel: the newest events of the
// install's own chain, newest first, read again every auditPoll on its own
// timer (as `:audit` does for every chain) and whenever the fleet says the
// install changed.
type auditPanel struct {
	auGen    int
	auEvents []*imsv1.AuditEvent
	auLoaded bool
	auErr    error
}

// auditPanelRows is how many events the panel shows.
const auditPanelRows = 5

// auditPanelPollMsg is the panel's timer.
type auditPanelPollMsg struct{ gen int }

// loadAudit asks for the install's newest events.
func (v *installView) loadAudit() tea.Cmd {
	v.auGen = v.nextGen()
	return listAudit(v.ctx, v.conn.Client, v.auGen, v.id, 0, auditPanelRows)
}

// auditUpdate takes the panel's answers and timer, and reports whether msg
// was one of them.
func (v *installView) auditUpdate(msg tea.Msg) (tea.Cmd, bool) {
	switch msg := msg.(type) {
	case auditMsg:
		if msg.gen != v.auGen {
			return nil, false // another view's
		}
		v.auLoaded, v.auErr = true, msg.err
		if msg.err == nil {
			v.auEvents = msg.events
		}
		return tea.Tick(auditPoll, func(time.Time) tea.Msg { return auditPanelPollMsg{gen: msg.gen} }), true
	case auditPanelPollMsg:
		if msg.gen != v.auGen {
			return nil, true
		}
		return v.loadAudit(), true
	}
	return nil, false
}

var auditPanelCols = []column{{"WHEN", 9, 1}, {"KIND", 24, 0}, {"ACTOR", 16, 2}, {"SUBJECT", 0, 3}}

// auditLines is the panel as lines of the install view's header.
func (v *installView) auditLines(name string) []string {
	st := v.st
	out := []string{st.accent.Render("AUDIT") + "  " + st.muted.Render(fmt.Sprintf("newest %d, live; :audit for every chain; byoc audit verify --install %s", auditPanelRows, name))}
	switch {
	case v.auErr != nil:
		out = append(out, "  "+st.bad.Render("cannot list audit events: "+errText(v.auErr)))
	case !v.auLoaded:
		out = append(out, "  loading…")
	case len(v.auEvents) == 0:
		out = append(out, "  (no events)")
	}
	if len(v.auEvents) == 0 {
		return out
	}
	cells := make([]map[string]string, len(v.auEvents))
	need := map[string]int{}
	for i, e := range v.auEvents {
		cells[i] = map[string]string{
			"WHEN": ago(v.now, time.Unix(0, e.AtUnixNano)), "KIND": termtext.Clean(e.Kind, " "),
			"ACTOR": termtext.Clean(e.Actor, " "), "SUBJECT": termtext.Clean(e.Subject, " "),
		}
		widest(need, cells[i])
	}
	cols := layoutFit(auditPanelCols, v.w-2, 12, 60, need)
	for _, c := range cells {
		out = append(out, "  "+row(cols, c))
	}
	return out
}
