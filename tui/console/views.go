package console

import (
	"context"
	"fmt"
	"sort"
	"strings"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// view is one level of the drill-down. The model routes key presses to the
// top view and async results to every view on the stack; each view keeps
// the generations of its own requests and drops stale results.
type view interface {
	title(m *Model) string
	open(m *Model) tea.Cmd
	close(m *Model)
	key(m *Model, msg tea.KeyPressMsg) tea.Cmd
	result(m *Model, msg tea.Msg) tea.Cmd
	fleetChanged(m *Model, resps []*imsv1.WatchInstallsResponse) tea.Cmd
	render(m *Model, w, h int) []string
	filterText() string
	setFilter(m *Model, s string)
	hints() []Action
}

// list is a cursor over n rows shown h at a time.
type list struct{ pos, off int }

// move handles the list keys and reports whether msg was one.
func (l *list) move(m *Model, msg tea.KeyPressMsg, n int) bool {
	page := max(1, m.bodyHeight()-3)
	switch {
	case m.km.Is(msg, ActUp):
		l.pos--
	case m.km.Is(msg, ActDown):
		l.pos++
	case m.km.Is(msg, ActPageUp):
		l.pos -= page
	case m.km.Is(msg, ActPageDown):
		l.pos += page
	case m.km.Is(msg, ActTop):
		l.pos = 0
	case m.km.Is(msg, ActBottom):
		l.pos = n - 1
	default:
		return false
	}
	l.pos = max(0, min(l.pos, n-1))
	return true
}

// window returns the first and last+1 row to show in h rows.
func (l *list) window(n, h int) (int, int) {
	l.pos = max(0, min(l.pos, n-1))
	if l.pos < l.off {
		l.off = l.pos
	}
	if l.pos >= l.off+h {
		l.off = l.pos - h + 1
	}
	l.off = max(0, min(l.off, n-h))
	return l.off, min(n, l.off+h)
}

// column is one table column.
type column struct {
	name  string
	width int // 0: takes the room that is left
	prio  int // lower stays longer when the window narrows
}

// layout picks the columns that fit in w and their widths; the flexible
// column gets what is left (at least its minimum, at most max).
func layout(cols []column, w, flexMin, flexMax int) []column {
	keep := map[int]bool{}
	order := make([]int, len(cols))
	for i := range cols {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return cols[order[a]].prio < cols[order[b]].prio })
	used := 0
	for _, i := range order {
		cw := cols[i].width
		if cw == 0 {
			cw = flexMin
		}
		if used+cw+1 > w && len(keep) > 0 {
			continue
		}
		keep[i] = true
		used += cw + 1
	}
	var out []column
	for i, c := range cols {
		if !keep[i] {
			continue
		}
		if c.width == 0 {
			c.width = max(1, min(flexMax, flexMin+w-used))
		}
		out = append(out, c)
	}
	return out
}

func row(cols []column, cells map[string]string) string {
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(pad(cells[c.name], c.width))
	}
	return b.String()
}

// pad cuts or pads plain text s to exactly w columns.
func pad(s string, w int) string {
	sw := ansi.StringWidth(s)
	if sw > w {
		return ansi.Truncate(s, w, "…")
	}
	return s + strings.Repeat(" ", w-sw)
}

func (m *Model) selectedLine(s string, w int) string {
	return m.st.selected.Render(pad(s, w))
}

// ---- fleet ----

type fleetView struct {
	list
	selected string // install id under the cursor, kept across re-sorts
}

func (v *fleetView) title(m *Model) string {
	t := "installs"
	if f := m.fleet.filter; f != "" {
		t += fmt.Sprintf(" (/%s: %d of %d)", f, len(m.fleet.visible), len(m.fleet.byID))
	}
	return t
}
func (v *fleetView) open(m *Model) tea.Cmd { return nil }
func (v *fleetView) close(m *Model)        {}
func (v *fleetView) filterText() string    { return "" }
func (v *fleetView) hints() []Action       { return []Action{ActSort, ActRunAction} }
func (v *fleetView) setFilter(m *Model, s string) {
	m.fleet.filter = s
	m.fleet.refilter()
	v.follow(m)
}

// follow moves the cursor to the selected install after the rows changed.
func (v *fleetView) follow(m *Model) {
	if v.selected == "" {
		return
	}
	for i, s := range m.fleet.visible {
		if s.Install.Id == v.selected {
			v.pos = i
			return
		}
	}
}

func (v *fleetView) current(m *Model) *imsv1.InstallStatus {
	if v.pos >= 0 && v.pos < len(m.fleet.visible) {
		return m.fleet.visible[v.pos]
	}
	return nil
}

func (v *fleetView) key(m *Model, msg tea.KeyPressMsg) tea.Cmd {
	f := m.fleet
	switch {
	case v.move(m, msg, len(f.visible)):
	case m.km.Is(msg, ActSort):
		f.sortBy = (f.sortBy + 1) % len(sortKeys)
		f.resort()
		v.follow(m)
		m.setStatus(false, "sorted by %s", sortKeys[f.sortBy])
	case m.km.Is(msg, ActReverse):
		f.reverse = !f.reverse
		f.resort()
		v.follow(m)
	case m.km.Is(msg, ActOpen):
		if s := v.current(m); s != nil {
			return m.push(newInstallView(s.Install.Id))
		}
	case m.km.Is(msg, ActRunAction):
		return m.startAction(v.current(m))
	}
	if s := v.current(m); s != nil {
		v.selected = s.Install.Id
	}
	return nil
}

func (v *fleetView) result(m *Model, msg tea.Msg) tea.Cmd { return nil }

func (v *fleetView) fleetChanged(m *Model, _ []*imsv1.WatchInstallsResponse) tea.Cmd {
	v.follow(m)
	return nil
}

var fleetCols = []column{
	{"NAME", 0, 0}, {"APP", 12, 4}, {"REV", 8, 5}, {"AGENT", 8, 1}, {"HEARTBEAT", 10, 3},
	{"MODES", 8, 6}, {"DRIFT", 6, 7}, {"JOBS", 16, 2},
}

func (v *fleetView) render(m *Model, w, h int) []string {
	f := m.fleet
	if !f.loaded {
		if m.offline != nil {
			return []string{"", "  waiting for imsd…"}
		}
		return []string{"", "  loading installs…"}
	}
	cols := layout(fleetCols, w, 12, 40)
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
	out := []string{m.st.muted.Render(row(cols, hdr))}
	if len(f.visible) == 0 {
		if len(f.byID) == 0 {
			return append(out, "", "  no installs yet: create one with `byoc install create NAME --app APP`")
		}
		return append(out, "", fmt.Sprintf("  no install matches /%s (esc clears the filter)", f.filter))
	}
	first, last := v.window(len(f.visible), h-1)
	for i := first; i < last; i++ {
		s := f.visible[i]
		agent := agentState(s)
		cells := map[string]string{
			"NAME": s.Install.Name, "APP": s.AppName, "REV": dash, "AGENT": agent,
			"HEARTBEAT": ago(m.now, lastSeen(s)), "MODES": dash, "DRIFT": dash, "JOBS": jobsCell(s),
		}
		line := row(cols, cells)
		switch {
		case i == v.pos:
			line = m.selectedLine(line, w)
		case agent == "offline" || agent == "conflict":
			line = m.st.bad.Render(line)
		case agent == "none":
			line = m.st.muted.Render(line)
		}
		out = append(out, line)
	}
	return out
}

// ---- install ----

// jobList is the job table that the install view and the jobs view share:
// the jobs of one install (id) or of every install (id ""), reloaded when
// the fleet says they moved.
type jobList struct {
	list
	id     string
	jobs   []*imsv1.Job
	shown  []*imsv1.Job
	filter string
	gen    int
	loaded bool
	err    error
	ctx    context.Context
	cancel context.CancelFunc
}

func (v *jobList) open(m *Model) tea.Cmd {
	v.ctx, v.cancel = context.WithCancel(m.ctx)
	return v.refresh(m)
}
func (v *jobList) close(m *Model) {
	if v.cancel != nil {
		v.cancel()
	}
}
func (v *jobList) refresh(m *Model) tea.Cmd {
	v.gen = m.nextGen()
	return listJobs(v.ctx, m.conn.Client, v.gen, v.id)
}
func (v *jobList) filterText() string { return v.filter }
func (v *jobList) setFilter(m *Model, s string) {
	v.filter = s
	v.shown = filterJobs(v.jobs, s, m)
}

func (v *jobList) current() *imsv1.Job {
	if v.pos >= 0 && v.pos < len(v.shown) {
		return v.shown[v.pos]
	}
	return nil
}

// jobKey handles the keys both job tables have; ok is false for others.
func (v *jobList) jobKey(m *Model, msg tea.KeyPressMsg) (cmd tea.Cmd, ok bool) {
	switch {
	case v.move(m, msg, len(v.shown)):
	case m.km.Is(msg, ActOpen):
		if j := v.current(); j != nil {
			return m.push(newLogView(m, j)), true
		}
	case m.km.Is(msg, ActCancelJob):
		return m.confirmCancel(v.current()), true
	default:
		return nil, false
	}
	return nil, true
}

func (v *jobList) result(m *Model, msg tea.Msg) tea.Cmd {
	r, ok := msg.(jobsMsg)
	if !ok || r.gen != v.gen {
		return nil
	}
	v.loaded, v.err = true, r.err
	if r.err == nil {
		v.jobs = r.jobs
		v.shown = filterJobs(v.jobs, v.filter, m)
	}
	return nil
}

type installView struct {
	jobList
}

func newInstallView(id string) *installView { return &installView{jobList{id: id}} }

func (v *installView) title(m *Model) string { return m.installName(v.id) }
func (v *installView) hints() []Action       { return []Action{ActRunAction, ActCancelJob} }

func (v *installView) key(m *Model, msg tea.KeyPressMsg) tea.Cmd {
	if cmd, ok := v.jobKey(m, msg); ok {
		return cmd
	}
	if m.km.Is(msg, ActRunAction) {
		return m.startAction(m.fleet.byID[v.id])
	}
	return nil
}

func (v *installView) fleetChanged(m *Model, resps []*imsv1.WatchInstallsResponse) tea.Cmd {
	for _, r := range resps {
		for _, s := range r.Installs {
			if s.Install.Id == v.id {
				return v.refresh(m) // its jobs moved: list them again
			}
		}
	}
	return nil
}

func (v *installView) render(m *Model, w, h int) []string {
	s := m.fleet.byID[v.id]
	if s == nil {
		return []string{"", "  this install is not in the fleet (any more); esc goes back"}
	}
	in := s.Install
	agent := "no agent enrolled yet (byoc install token " + in.Name + ")"
	if a := in.Agent; a != nil {
		agent = fmt.Sprintf("%s  %s  %s  last heartbeat %s", agentState(s), a.AgentId, a.Hostname, ago(m.now, lastSeen(s)))
		if a.Version != "" {
			agent += "  v" + a.Version
		}
	}
	out := []string{
		m.st.title.Render(in.Name) + "  " + m.st.muted.Render(in.Id),
		fmt.Sprintf("app %s   revision %s   modes %s   drift %s", s.AppName, dash, dash, dash),
		"agent " + agent,
		"",
		m.st.accent.Render("INPUTS"),
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
	out = append(out,
		m.st.accent.Render("OUTPUTS")+"  "+m.st.muted.Render("none yet: install outputs arrive with components"),
		m.st.accent.Render("COMPONENTS AND WORKFLOWS")+"  "+m.st.muted.Render("none yet: they arrive with app configs"),
		m.st.accent.Render("AUDIT")+"  "+m.st.muted.Render("no audit events yet: the audit log arrives with the trust-contract issue"),
		"",
	)
	rest := h - len(out)
	out = append(out, m.st.accent.Render(fmt.Sprintf("JOBS (%d)", len(v.jobs))))
	return append(out, jobTable(m, &v.list, v.shown, v.loaded, v.err, v.filter, false, w, rest-1)...)
}

// ---- jobs (all installs) ----

type jobsView struct {
	jobList
}

func (v *jobsView) title(m *Model) string { return "jobs" }
func (v *jobsView) hints() []Action       { return []Action{ActCancelJob} }
func (v *jobsView) key(m *Model, msg tea.KeyPressMsg) tea.Cmd {
	cmd, _ := v.jobKey(m, msg)
	return cmd
}
func (v *jobsView) fleetChanged(m *Model, resps []*imsv1.WatchInstallsResponse) tea.Cmd {
	if len(resps) > 0 {
		return v.refresh(m)
	}
	return nil
}
func (v *jobsView) render(m *Model, w, h int) []string {
	return jobTable(m, &v.list, v.shown, v.loaded, v.err, v.filter, true, w, h)
}

func filterJobs(jobs []*imsv1.Job, filter string, m *Model) []*imsv1.Job {
	terms := strings.Fields(strings.ToLower(filter))
	if len(terms) == 0 {
		return jobs
	}
	var out []*imsv1.Job
	for _, j := range jobs {
		hay := strings.ToLower(strings.Join([]string{j.Id, m.installName(j.InstallId), stateName(j.State), j.ComponentType, j.Operation, j.CreatedBy}, " "))
		ok := true
		for _, t := range terms {
			if k, val, isKV := strings.Cut(t, "="); isKV {
				ok = ok && jobField(j, k, m) == val
			} else {
				ok = ok && strings.Contains(hay, t)
			}
		}
		if ok {
			out = append(out, j)
		}
	}
	return out
}

func jobField(j *imsv1.Job, k string, m *Model) string {
	switch k {
	case "state":
		return stateName(j.State)
	case "install":
		return strings.ToLower(m.installName(j.InstallId))
	case "type":
		return j.ComponentType
	case "by":
		return strings.ToLower(j.CreatedBy)
	}
	return "\x00" // matches nothing
}

var jobCols = []column{
	{"JOB", 0, 0}, {"INSTALL", 14, 2}, {"TYPE", 14, 4}, {"STATE", 10, 1}, {"TRY", 5, 5},
	{"CREATED", 9, 3}, {"BY", 10, 6}, {"EXIT", 4, 7},
}

func jobTable(m *Model, l *list, jobs []*imsv1.Job, loaded bool, err error, filter string, withInstall bool, w, h int) []string {
	switch {
	case err != nil && !loaded:
		return []string{"  " + m.st.bad.Render("cannot list jobs: "+errText(err))}
	case !loaded:
		return []string{"  loading jobs…"}
	}
	cols := jobCols
	if !withInstall {
		cols = append([]column{cols[0]}, cols[2:]...)
	}
	cols = layout(cols, w, 12, 34)
	hdr := map[string]string{}
	for _, c := range cols {
		hdr[c.name] = c.name
	}
	out := []string{m.st.muted.Render(row(cols, hdr))}
	if err != nil {
		out = append(out, m.st.bad.Render("  refresh failed: "+errText(err)))
	}
	if len(jobs) == 0 {
		if filter != "" {
			return append(out, "  no job matches /"+filter)
		}
		return append(out, "  no jobs yet")
	}
	first, last := l.window(len(jobs), max(1, h-len(out)))
	for i := first; i < last; i++ {
		j := jobs[i]
		exit := ""
		if terminal(j.State) {
			exit = fmt.Sprint(j.ExitCode)
		}
		created := dash
		if j.CreateTime != nil {
			created = ago(m.now, j.CreateTime.AsTime())
		}
		line := row(cols, map[string]string{
			"JOB": j.Id, "INSTALL": m.installName(j.InstallId), "TYPE": j.ComponentType + " " + j.Operation,
			"STATE": stateName(j.State), "TRY": fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts),
			"CREATED": created, "BY": j.CreatedBy, "EXIT": exit,
		})
		switch {
		case i == l.pos:
			line = m.selectedLine(line, w)
		case j.State == imsv1.JobState_JOB_STATE_FAILED || j.State == imsv1.JobState_JOB_STATE_TIMED_OUT:
			line = m.st.bad.Render(line)
		case j.State == imsv1.JobState_JOB_STATE_RUNNING:
			line = m.st.ok.Render(line)
		}
		out = append(out, line)
	}
	return out
}

func stateName(s imsv1.JobState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATE_"))
}

func terminal(s imsv1.JobState) bool {
	switch s {
	case imsv1.JobState_JOB_STATE_SUCCEEDED, imsv1.JobState_JOB_STATE_FAILED,
		imsv1.JobState_JOB_STATE_CANCELLED, imsv1.JobState_JOB_STATE_TIMED_OUT:
		return true
	}
	return false
}

// ---- audit ----

// auditView is the audit log's place in the console. imsd has no audit
// events yet (they arrive with the trust-contract issue), so it says so.
type auditView struct{}

func (v *auditView) title(m *Model) string                                       { return "audit" }
func (v *auditView) open(m *Model) tea.Cmd                                       { return nil }
func (v *auditView) close(m *Model)                                              {}
func (v *auditView) key(m *Model, msg tea.KeyPressMsg) tea.Cmd                   { return nil }
func (v *auditView) result(m *Model, msg tea.Msg) tea.Cmd                        { return nil }
func (v *auditView) filterText() string                                          { return "" }
func (v *auditView) setFilter(m *Model, s string)                                {}
func (v *auditView) hints() []Action                                             { return nil }
func (v *auditView) fleetChanged(*Model, []*imsv1.WatchInstallsResponse) tea.Cmd { return nil }
func (v *auditView) render(m *Model, w, h int) []string {
	return []string{"", "  No audit events yet.", "",
		"  imsd does not record audit events yet: the hash-chained audit log",
		"  arrives with the trust-contract issue, and will be shown here.",
		"", "  :installs goes back to the fleet."}
}
