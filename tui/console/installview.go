package console

import (
	"fmt"
	"sort"
	"strings"

	tea "charm.land/bubbletea/v2"

	"github.com/byoc-dev/byoc/internal/labels"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// installView is one install: its agent, inputs (secrets masked), its
// components, workflow, actions and audit panel, and its jobs (a jobList,
// listed again when the fleet says this install changed). It is one page:
// when the page is taller than the window, the keys that move the job
// cursor scroll it too (see moveKey), and its last line says where it is.
type installView struct {
	jobList
	installParts
	auditPanel
	pageOff int // the first line of the page shown, while it is scrolled
}

func newInstallView(e *env, id string) *installView {
	return &installView{jobList: jobList{env: e, id: id}}
}

// Init lists the install's jobs, workflows, actions and audit events.
func (v *installView) Init() tea.Cmd {
	return tea.Batch(v.jobList.Init(), v.loadParts(), v.loadAudit())
}

func (v *installView) Title() string { return v.installName(v.id) }
func (v *installView) Hints() []Action {
	return []Action{ActRunAction, ActBreakGlass, ActSupportShell, ActCancelJob}
}
func (v *installView) SetSize(w, h int)   { v.w, v.h = w, h }
func (v *installView) SetFilter(s string) { v.setFilter(s); v.pos, v.pageOff = 0, 0 }

// page is the whole view, line by line, and the line of the first job row
// (-1 without one).
func (v *installView) page(s *imsv1.InstallStatus) (out []string, firstJob int) {
	out = v.header(s)
	out = append(out, v.st.accent.Render(fmt.Sprintf("JOBS (%d)", len(v.jobs))))
	t := v.table(false, v.w, len(v.shown)+3) // every row
	firstJob = -1
	if v.loaded && len(v.shown) > 0 {
		firstJob = len(out) + len(t) - len(v.shown)
	}
	return append(out, t...), firstJob
}

// scrolled reports whether a page of n lines needs scrolling, and how many
// of its lines then show (the last line of the window says where it is).
func (v *installView) scrolled(n int) (bool, int) {
	if n <= v.h {
		return false, n
	}
	return true, max(1, v.h-1)
}

// moveKey handles the keys that move: while the page fits the window they
// move the job cursor, as in every list; while it does not, up and down
// move the cursor when its row is on screen and scroll the page when it
// is not (so the sections above the jobs read line by line), the page
// keys scroll a window at a time and bring the cursor into view, and
// home/end go to the page's start/end.
func (v *installView) moveKey(msg tea.KeyPressMsg) bool {
	s := v.fleet.byID[v.id]
	if s == nil {
		return false
	}
	doc, firstJob := v.page(s)
	scroll, shown := v.scrolled(len(doc))
	if !scroll {
		v.pageOff = 0
		return v.move(v.km, msg, len(v.shown), len(v.shown))
	}
	n := len(v.shown)
	maxOff := len(doc) - shown
	v.pageOff = max(0, min(v.pageOff, maxOff))
	v.pos = max(0, min(v.pos, n-1))
	row := func(i int) int { return firstJob + i }
	visible := func(i int) bool { return firstJob >= 0 && row(i) >= v.pageOff && row(i) < v.pageOff+shown }
	// follow puts the cursor on a job row in view, if any is.
	follow := func() {
		if firstJob < 0 {
			return
		}
		lo, hi := v.pageOff-firstJob, v.pageOff+shown-1-firstJob
		if lo > n-1 || hi < 0 {
			return
		}
		v.pos = max(max(lo, 0), min(v.pos, min(hi, n-1)))
	}
	// show scrolls so that the cursor's row is in view.
	show := func() {
		if r := row(v.pos); r < v.pageOff {
			v.pageOff = r
		} else if r >= v.pageOff+shown {
			v.pageOff = r - shown + 1
		}
	}
	step := max(1, shown-1)
	switch {
	case v.km.Is(msg, ActDown):
		if visible(v.pos) && v.pos < n-1 {
			v.pos++
			show()
		} else if v.pageOff < maxOff {
			v.pageOff++
		}
	case v.km.Is(msg, ActUp):
		if visible(v.pos) && v.pos > 0 {
			v.pos--
			show()
		} else if v.pageOff > 0 {
			v.pageOff--
		}
	case v.km.Is(msg, ActPageDown):
		if v.pageOff == maxOff && n > 0 {
			v.pos = n - 1
		}
		v.pageOff = min(maxOff, v.pageOff+step)
		follow()
	case v.km.Is(msg, ActPageUp):
		v.pageOff = max(0, v.pageOff-step)
		follow()
	case v.km.Is(msg, ActTop):
		v.pageOff, v.pos = 0, 0
	case v.km.Is(msg, ActBottom):
		v.pageOff, v.pos = maxOff, max(0, n-1)
	default:
		return false
	}
	return true
}

func (v *installView) Update(msg tea.Msg) tea.Cmd {
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
		if v.moveKey(msg) {
			return nil
		}
		if cmd, ok := v.update(msg); ok {
			return cmd
		}
		if v.km.Is(msg, ActRunAction) {
			return v.nav.startAction(v.fleet.byID[v.id])
		}
		if v.km.Is(msg, ActBreakGlass) {
			return v.nav.startBreakGlass(v.fleet.byID[v.id])
		}
		if v.km.Is(msg, ActSupportShell) {
			return v.nav.startShell(v.fleet.byID[v.id])
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
	if _, ok := msg.(jobsMsg); ok && v.loaded {
		v.pos = max(0, min(v.pos, len(v.shown)-1))
	}
	return cmd
}

func (v *installView) View() string {
	s := v.fleet.byID[v.id]
	if s == nil {
		return lines([]string{"", "  this install is not in the fleet (any more); esc goes back"})
	}
	doc, firstJob := v.page(s)
	scroll, shown := v.scrolled(len(doc))
	if !scroll {
		return lines(doc)
	}
	off := max(0, min(v.pageOff, len(doc)-shown)) // the page may have shrunk since
	out := append([]string(nil), doc[off:off+shown]...)
	where := fmt.Sprintf("  lines %d-%d of %d", off+1, off+shown, len(doc))
	if firstJob >= off+shown {
		where += fmt.Sprintf(", the jobs from line %d", firstJob+1)
	}
	return lines(append(out, v.st.muted.Render(where+"; j/k, pgup/pgdown scroll, home/end")))
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
		if h := agentHealthText(v.now, s); h != "" {
			if a.Health == state {
				state = h // "offline since 3m ago", not "offline, offline since"
			} else {
				state += ", " + h
			}
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
	}
	if r := in.Agent.GetHealthReason(); r != "" {
		out = append(out, "agent "+in.Agent.GetHealth()+" because "+r)
	}
	if u := in.Agent.GetUpdate(); u != nil {
		line := "updates " + UpdatePolicyText(u)
		if k := u.GetLastKind(); k != "" {
			line += "   last " + strings.ReplaceAll(k, "_", " ") + " " + u.GetLastVersion()
			if r := u.GetLastReason(); r != "" && k != "applied" && k != "confirmed" {
				line += ": " + r
			}
		}
		out = append(out, line)
	}
	// Labels and maintenance windows follow the name, when set.
	if len(in.Labels) > 0 {
		out[0] += "  labels " + labels.Format(in.Labels)
	}
	if w, c := in.Settings.GetWindows(), in.Agent.GetPermissions().GetWindows(); len(w) > 0 || len(c) > 0 {
		out[0] += fmt.Sprintf("  windows vendor %s, customer %s", windowList(w), windowList(c))
	}
	out = append(out, "", st.accent.Render("INPUTS"))
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
	out = append(out, v.parts(v.jobs)...)
	out = append(out, v.auditLines(in.Name)...)
	return append(out, "")
}

// windowList is maintenance windows for a line: "none" for none.
func windowList(ws []string) string {
	if len(ws) == 0 {
		return "none"
	}
	return strings.Join(ws, "; ")
}

// UpdatePolicyText is an agent's update policy in a few words: manual,
// "pin 1.4.2", ">=1.4 <2 Sun 03:00-05:00 UTC".
func UpdatePolicyText(u *imsv1.AgentUpdate) string {
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
