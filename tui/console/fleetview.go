package console

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// fleetView is the root view: every install, live. The rows are env.fleet's
// (sorted and filtered as they change, never in View); the view keeps the
// cursor on the same install across re-sorts.
type fleetView struct {
	*env
	list
	w, h     int
	selected string // install id under the cursor, kept across re-sorts
}

func newFleetView(e *env) *fleetView { return &fleetView{env: e} }

func (v *fleetView) Init() tea.Cmd    { return nil }
func (v *fleetView) SetSize(w, h int) { v.w, v.h = w, h; v.scroll() }
func (v *fleetView) Hints() []Action  { return []Action{ActSort, ActRunAction} }
func (v *fleetView) Filter() string   { return v.fleet.filter }
func (v *fleetView) SetFilter(s string) {
	v.fleet.filter = s
	v.fleet.refilter()
	v.follow()
	v.scroll()
}

// scroll keeps the window on the cursor; the rows are all but the header.
func (v *fleetView) scroll() {
	if v.fleet.loaded {
		v.list.scroll(len(v.fleet.visible), v.h-1)
	}
}
func (v *fleetView) Title() string {
	t := "installs"
	if f := v.fleet.filter; f != "" {
		t += fmt.Sprintf(" (/%s: %d of %d)", f, len(v.fleet.visible), len(v.fleet.byID))
	}
	return t
}

// follow moves the cursor to the selected install after the rows changed.
func (v *fleetView) follow() {
	if v.selected == "" {
		return
	}
	// The visible rows are sorted, and byID holds the very row they hold:
	// a binary search finds it, where a scan of 100,000 ids at every
	// update cost a sixth of a core (Fleet10k, sort by heartbeat).
	s := v.fleet.byID[v.selected]
	if s == nil {
		return
	}
	if i := v.fleet.search(v.fleet.visible, s); i < len(v.fleet.visible) && v.fleet.visible[i] == s {
		v.pos = i
	}
}

func (v *fleetView) current() *imsv1.InstallStatus {
	if v.pos >= 0 && v.pos < len(v.fleet.visible) {
		return v.fleet.visible[v.pos]
	}
	return nil
}

func (v *fleetView) Update(msg tea.Msg) tea.Cmd {
	defer v.scroll()
	switch msg := msg.(type) {
	case fleetChangedMsg:
		v.follow()
	case tea.KeyPressMsg:
		return v.key(msg)
	}
	return nil
}

func (v *fleetView) key(msg tea.KeyPressMsg) tea.Cmd {
	f := v.fleet
	switch {
	case v.move(v.km, msg, len(f.visible), v.h-3):
	case v.km.Is(msg, ActSort):
		f.sortBy = (f.sortBy + 1) % len(sortKeys)
		f.resort()
		v.follow()
		v.nav.setStatus(false, "sorted by %s", sortKeys[f.sortBy])
	case v.km.Is(msg, ActReverse):
		f.reverse = !f.reverse
		f.resort()
		v.follow()
	case v.km.Is(msg, ActOpen):
		if s := v.current(); s != nil {
			return v.nav.push(newInstallView(v.env, s.Install.Id))
		}
	case v.km.Is(msg, ActRunAction):
		return v.nav.startAction(v.current())
	}
	if s := v.current(); s != nil {
		v.selected = s.Install.Id
	}
	return nil
}

// fleetCols: MODES (the customer's permission state) goes before APP when
// the window is narrow: it says whether anything can run at all.
// STATE and HEALTH come right after NAME: a failed or unhealthy install is
// what an operator looks for first.
var fleetCols = []column{
	{"NAME", 0, 0}, {"STATE", 14, 1}, {"HEALTH", 9, 2}, {"APP", 12, 7}, {"REV", 4, 8}, {"AGENT", 8, 3}, {"HEARTBEAT", 10, 5},
	{"MODES", 8, 6}, {"DRIFT", 6, 9}, {"JOBS", 16, 4},
}

func (v *fleetView) View() string {
	f, w, h := v.fleet, v.w, v.h
	if !f.loaded {
		if v.offline != nil {
			return lines([]string{"", "  waiting for imsd…"})
		}
		return lines([]string{"", "  loading installs…"})
	}
	// The cells of the rows in the window, whose widest size the columns
	// (only those rows: cheap at 10,000 installs).
	first, last, pos := v.window(len(f.visible), h-1)
	cells := make([]map[string]string, 0, last-first)
	need := map[string]int{}
	for i := first; i < last; i++ {
		s := f.visible[i]
		c := map[string]string{
			"NAME": s.Install.Name, "STATE": installState(s), "HEALTH": healthState(s), "APP": s.AppName, "REV": revision(s), "AGENT": agentCell(s),
			"HEARTBEAT": heardText(v.now, s), "MODES": ModesText(s.Install.Agent.GetPermissions()), "DRIFT": dash, "JOBS": jobsCell(s),
		}
		widest(need, c)
		cells = append(cells, c)
	}
	cols := layoutFit(fleetCols, w, 12, min(64, max(40, need["NAME"])), need)
	hdr := map[string]string{}
	for _, c := range cols {
		hdr[c.name] = c.name
		if strings.EqualFold(c.name, sortKeys[f.sortBy]) {
			hdr[c.name] += map[bool]string{false: "↑", true: "↓"}[f.reverse]
		}
	}
	if sortKeys[f.sortBy] == "agent" {
		hdr["AGENT"] = "AGENT" + map[bool]string{false: "↑", true: "↓"}[f.reverse]
	}
	out := []string{v.st.muted.Render(row(cols, hdr))}
	if len(f.visible) == 0 {
		if len(f.byID) == 0 {
			return lines(append(out, "", "  no installs yet: create one with `byoc install create NAME --app APP`"))
		}
		return lines(append(out, "", fmt.Sprintf("  no install matches /%s (esc clears the filter)", f.filter)))
	}
	for i := first; i < last; i++ {
		s := f.visible[i]
		agent := cells[i-first]["AGENT"]
		line := row(cols, cells[i-first])
		switch {
		case i == pos:
			line = v.selectedLine(line, w)
		case agent == "offline" || agent == "conflict" || s.Install.State == "failed" || s.Install.GetHealth().GetState() == "unhealthy":
			line = v.st.bad.Render(line)
		case disabledByCustomer(s) || agent == "degraded":
			line = v.st.warn.Render(line)
		case agent == "none" || s.Install.State == "deprovisioned":
			line = v.st.muted.Render(line)
		}
		out = append(out, line)
	}
	return lines(out)
}
