package console

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	tea "charm.land/bubbletea/v2"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/tui/termtext"
)

// auditView is `:audit`: the latest audit events of every chain, newest
// first, polled every auditPoll for the ones after the newest it holds.
// `byoc audit verify` checks the chains; this view only shows them.
type auditView struct {
	*env
	list
	w, h   int
	events []*imsv1.AuditEvent
	seen   map[string]bool // chain/seq of the events held
	newest int64           // the newest event's at, the next poll's since
	gen    int
	loaded bool
	err    error
	ctx    context.Context
	cancel context.CancelFunc
}

// auditPoll is how often the view asks for new events; auditKeep how
// many it holds; auditWindow how far back its first listing reaches.
const (
	auditPoll   = 2 * time.Second
	auditKeep   = 1000
	auditWindow = 24 * time.Hour
)

// auditMsg answers an audit listing; auditPollMsg is the view's timer.
type auditMsg struct {
	gen    int
	events []*imsv1.AuditEvent
	err    error
}

type auditPollMsg struct{ gen int }

func newAuditView(e *env) *auditView { return &auditView{env: e, seen: map[string]bool{}} }

func (v *auditView) Init() tea.Cmd {
	v.ctx, v.cancel = context.WithCancel(v.env.ctx)
	return v.refresh()
}

func (v *auditView) Close() {
	if v.cancel != nil {
		v.cancel()
	}
}

func (v *auditView) refresh() tea.Cmd {
	v.gen = v.nextGen()
	since := v.newest
	if since == 0 {
		since = v.now.Add(-auditWindow).UnixNano()
	}
	return listAudit(v.ctx, v.conn.Client, v.gen, "", since, auditKeep)
}

func (v *auditView) Title() string    { return "audit" }
func (v *auditView) SetSize(w, h int) { v.w, v.h = w, h; v.scroll() }

func (v *auditView) rows() int {
	h := v.h - 1
	if v.err != nil {
		h--
	}
	return max(1, h)
}

func (v *auditView) scroll() {
	if v.loaded {
		v.list.scroll(len(v.events), v.rows())
	}
}

func (v *auditView) Update(msg tea.Msg) tea.Cmd {
	defer v.scroll()
	switch msg := msg.(type) {
	case auditMsg:
		if msg.gen != v.gen {
			return nil
		}
		v.loaded, v.err = true, msg.err
		v.add(msg.events)
		return tea.Tick(auditPoll, func(time.Time) tea.Msg { return auditPollMsg{gen: msg.gen} })
	case auditPollMsg:
		if msg.gen != v.gen {
			return nil
		}
		return v.refresh()
	case tea.KeyPressMsg:
		v.move(v.km, msg, len(v.events), v.h-2)
	}
	return nil
}

// add merges events into the list, newest first, keeping auditKeep.
func (v *auditView) add(evs []*imsv1.AuditEvent) {
	for _, e := range evs {
		k := fmt.Sprintf("%s/%d", e.Chain, e.Seq)
		if v.seen[k] {
			continue
		}
		v.seen[k] = true
		v.events = append(v.events, e)
		v.newest = max(v.newest, e.AtUnixNano)
	}
	slices.SortStableFunc(v.events, func(a, b *imsv1.AuditEvent) int {
		return cmp.Or(cmp.Compare(b.AtUnixNano, a.AtUnixNano), cmp.Compare(a.Chain, b.Chain), cmp.Compare(b.Seq, a.Seq))
	})
	if len(v.events) > auditKeep {
		for _, e := range v.events[auditKeep:] {
			delete(v.seen, fmt.Sprintf("%s/%d", e.Chain, e.Seq))
		}
		v.events = v.events[:auditKeep]
	}
}

var auditCols = []column{
	{"WHEN", 9, 1}, {"INSTALL", 14, 2}, {"KIND", 24, 0}, {"ACTOR", 16, 3}, {"SUBJECT", 0, 4},
}

func (v *auditView) View() string {
	st := v.st
	switch {
	case v.err != nil && !v.loaded:
		return lines([]string{"  " + st.bad.Render("cannot list audit events: "+errText(v.err))})
	case !v.loaded:
		return lines([]string{"  loading audit events…"})
	}
	cols := layout(auditCols, v.w, 12, 60)
	hdr := map[string]string{}
	for _, c := range cols {
		hdr[c.name] = c.name
	}
	out := []string{st.muted.Render(row(cols, hdr))}
	if v.err != nil {
		out = append(out, st.bad.Render("  refresh failed: "+errText(v.err)))
	}
	if len(v.events) == 0 {
		return lines(append(out, "  no audit events in the last 24 hours", "  (byoc audit list shows older ones; byoc audit verify checks them)"))
	}
	first, last, pos := v.window(len(v.events), v.rows())
	for i := first; i < last; i++ {
		e := v.events[i]
		install := "vendor"
		if e.Chain != "" {
			install = v.installName(e.Chain)
		}
		line := row(cols, map[string]string{
			"WHEN": ago(v.now, time.Unix(0, e.AtUnixNano)), "INSTALL": termtext.Clean(install, " "),
			"KIND": termtext.Clean(e.Kind, " "), "ACTOR": termtext.Clean(e.Actor, " "), "SUBJECT": termtext.Clean(e.Subject, " "),
		})
		if i == pos {
			line = v.selectedLine(line, v.w)
		}
		out = append(out, line)
	}
	return lines(out)
}
