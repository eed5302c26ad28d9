package console

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/tui/termtext"
)

// auditView is `:audit`: the latest audit events of every chain, newest
// first, polled every auditPoll for the ones after the newest it holds.
// `/` filters them (shown), enter opens one (auditDetailView).
// `byoc audit verify` checks the chains; this view only shows them.
type auditView struct {
	*env
	list
	w, h   int
	events []*imsv1.AuditEvent
	filter string
	shown  []*imsv1.AuditEvent // events that match filter, newest first
	seen   map[string]bool     // chain/seq of the events held
	newest int64               // the newest event's at, the next poll's since
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
		v.list.scroll(len(v.shown), v.rows())
	}
}

func (v *auditView) Filter() string { return v.filter }
func (v *auditView) SetFilter(s string) {
	v.filter = s
	v.refilter()
	v.scroll()
}

// refilter keeps in shown the events every word of the filter matches: a
// word is found in the install's name, the kind, actor, subject or data;
// key=value compares install, kind, actor or subject whole.
func (v *auditView) refilter() {
	terms := strings.Fields(strings.ToLower(v.filter))
	v.shown = v.shown[:0]
	for _, e := range v.events {
		if v.auditMatches(e, terms) {
			v.shown = append(v.shown, e)
		}
	}
}

func (v *auditView) auditMatches(e *imsv1.AuditEvent, terms []string) bool {
	fields := map[string]string{"install": strings.ToLower(v.chainName(e.Chain)), "kind": strings.ToLower(e.Kind),
		"actor": strings.ToLower(e.Actor), "subject": strings.ToLower(e.Subject)}
	for _, t := range terms {
		if k, val, ok := strings.Cut(t, "="); ok {
			if f, known := fields[k]; known {
				if f != val {
					return false
				}
				continue
			}
		}
		if !strings.Contains(fields["install"], t) && !strings.Contains(fields["kind"], t) && !strings.Contains(fields["actor"], t) &&
			!strings.Contains(fields["subject"], t) && !strings.Contains(strings.ToLower(e.Data), t) {
			return false
		}
	}
	return true
}

// chainName is the install a chain is about, by name, or "vendor".
func (v *auditView) chainName(chain string) string {
	if chain == "" {
		return "vendor"
	}
	return v.installName(chain)
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
		if v.move(v.km, msg, len(v.shown), v.rows()) {
			return nil
		}
		if v.km.Is(msg, ActOpen) && v.pos < len(v.shown) {
			return v.nav.push(newAuditDetailView(v.env, v.shown[v.pos]))
		}
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
	v.refilter()
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
	need := map[string]int{}
	for _, e := range v.shown {
		widest(need, map[string]string{"INSTALL": termtext.Clean(v.chainName(e.Chain), " "), "KIND": termtext.Clean(e.Kind, " "),
			"ACTOR": termtext.Clean(e.Actor, " "), "SUBJECT": termtext.Clean(e.Subject, " ")})
	}
	cols := layoutFit(auditCols, v.w, 12, 60, need)
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
	if len(v.shown) == 0 {
		return lines(append(out, fmt.Sprintf("  none of the %d events held matches the filter %q (esc clears it)", len(v.events), v.filter)))
	}
	first, last, pos := v.window(len(v.shown), v.rows())
	for i := first; i < last; i++ {
		e := v.shown[i]
		install := v.chainName(e.Chain)
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

// auditDetailView is one audit record, every field of it and its data as
// indented JSON, scrolled with the list keys.
type auditDetailView struct {
	*env
	ev   *imsv1.AuditEvent
	text []string // the lines, made once (the record does not change)
	off  int
	w, h int
}

func newAuditDetailView(e *env, ev *imsv1.AuditEvent) *auditDetailView {
	v := &auditDetailView{env: e, ev: ev}
	chain := "vendor (the vendor-wide chain)"
	if ev.Chain != "" {
		chain = termtext.Clean(e.installName(ev.Chain), " ") + " (" + ev.Chain + ")"
	}
	at := time.Unix(0, ev.AtUnixNano)
	field := func(k, val string) string { return fmt.Sprintf("  %-9s %s", k+":", val) }
	v.text = []string{
		field("chain", chain),
		field("seq", fmt.Sprint(ev.Seq)),
		field("at", at.Local().Format(time.RFC3339Nano)+"  ("+ago(e.now, at)+")"),
		field("kind", termtext.Clean(ev.Kind, " ")),
		field("actor", termtext.Clean(orDash(ev.Actor), " ")),
		field("subject", termtext.Clean(orDash(ev.Subject), " ")),
		field("prev", orDash(ev.Prev)),
		field("hash", orDash(ev.Hash)),
		"  data:",
	}
	var buf bytes.Buffer
	switch {
	case ev.Data == "" || ev.Data == "{}":
		v.text = append(v.text, "    (none)")
	case json.Indent(&buf, []byte(ev.Data), "", "  ") == nil:
		for _, l := range strings.Split(buf.String(), "\n") {
			v.text = append(v.text, termtext.Clean("    "+l, " "))
		}
	default:
		v.text = append(v.text, termtext.Clean("    "+ev.Data, " "))
	}
	return v
}

func (v *auditDetailView) Init() tea.Cmd    { return nil }
func (v *auditDetailView) Title() string    { return fmt.Sprintf("%s #%d", v.ev.Kind, v.ev.Seq) }
func (v *auditDetailView) SetSize(w, h int) { v.w, v.h = w, h; v.clamp() }

// page is the lines of text shown under the title.
func (v *auditDetailView) page() int { return max(1, v.h-2) }

func (v *auditDetailView) clamp() { v.off = max(0, min(v.off, len(v.text)-v.page())) }

func (v *auditDetailView) Update(msg tea.Msg) tea.Cmd {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok {
		return nil
	}
	switch {
	case v.km.Is(k, ActUp):
		v.off--
	case v.km.Is(k, ActDown):
		v.off++
	case v.km.Is(k, ActPageUp):
		v.off -= max(1, v.page()-1) // a line in common, and the last
	case v.km.Is(k, ActPageDown): // is under the "more lines" mark
		v.off += max(1, v.page()-1)
	case v.km.Is(k, ActTop):
		v.off = 0
	case v.km.Is(k, ActBottom):
		v.off = len(v.text)
	}
	v.clamp()
	return nil
}

func (v *auditDetailView) View() string {
	out := []string{v.st.title.Render("Audit record " + termtext.Clean(v.ev.Kind, " ")), ""}
	end := min(len(v.text), v.off+v.page())
	out = append(out, v.text[v.off:end]...)
	if end < len(v.text) && len(out) > 2 {
		out[len(out)-1] = v.st.muted.Render(fmt.Sprintf("  … %d more lines (down/pgdown)", len(v.text)-end+1))
	}
	return lines(out)
}
