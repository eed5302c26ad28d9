package console

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"strings"

	tea "charm.land/bubbletea/v2"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// jobList is the job table that the install view and the jobs view share:
// the jobs of one install (id) or of every install (id ""), reloaded when
// the fleet says they moved. It is a component of its own; the two views
// embed it and add what differs (the header, which fleet changes reload it).
type jobList struct {
	*env
	list
	w, h   int
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

func (v *jobList) Init() tea.Cmd {
	v.ctx, v.cancel = context.WithCancel(v.env.ctx)
	return v.refresh()
}

func (v *jobList) Close() {
	if v.cancel != nil {
		v.cancel()
	}
}

func (v *jobList) refresh() tea.Cmd {
	v.gen = v.nextGen()
	return listJobs(v.ctx, v.conn.Client, v.gen, v.id)
}

func (v *jobList) Filter() string { return v.filter }

// rows is how many job rows fit in a table of h lines: all but the header
// and the line saying a refresh failed.
func (v *jobList) rows(h int) int {
	if v.err != nil {
		h--
	}
	return max(1, h-1)
}

// scroll keeps the window of a table of h lines on the cursor.
func (v *jobList) scroll(h int) {
	if v.loaded {
		v.list.scroll(len(v.shown), v.rows(h))
	}
}

func (v *jobList) setFilter(s string) {
	v.filter = s
	v.shown = filterJobs(v.env, v.jobs, s)
}

func (v *jobList) current() *imsv1.Job {
	if v.pos >= 0 && v.pos < len(v.shown) {
		return v.shown[v.pos]
	}
	return nil
}

// update handles what both job tables do: their listing's answer and the
// keys they share. ok is false for a message it left alone.
func (v *jobList) update(msg tea.Msg) (cmd tea.Cmd, ok bool) {
	switch msg := msg.(type) {
	case jobsMsg:
		if msg.gen != v.gen {
			return nil, true // an answer to an earlier listing
		}
		v.loaded, v.err = true, msg.err
		if msg.err == nil {
			v.jobs = msg.jobs
			v.shown = filterJobs(v.env, v.jobs, v.filter)
		}
		return nil, true
	case tea.KeyPressMsg:
		switch {
		case v.move(v.km, msg, len(v.shown), v.h-3):
		case v.km.Is(msg, ActOpen):
			if j := v.current(); j != nil {
				return v.nav.push(newLogView(v.env, j)), true
			}
		case v.km.Is(msg, ActCancelJob):
			return v.nav.confirmCancel(v.current()), true
		default:
			return nil, false
		}
		return nil, true
	}
	return nil, false
}

// table renders the job rows in w×h; withInstall adds the install column.
func (v *jobList) table(withInstall bool, w, h int) []string {
	st := v.st
	switch {
	case v.err != nil && !v.loaded:
		return []string{"  " + st.bad.Render("cannot list jobs: "+errText(v.err))}
	case !v.loaded:
		return []string{"  loading jobs…"}
	}
	cols := jobCols
	if !withInstall {
		cols = append([]column{cols[0]}, cols[2:]...)
	}
	need := map[string]int{}
	for _, j := range v.shown {
		widest(need, map[string]string{"JOB": j.Id, "INSTALL": v.installName(j.InstallId), "TYPE": j.ComponentType + " " + j.Operation, "BY": j.CreatedBy})
	}
	cols = layoutFit(cols, w, 12, 34, need)
	hdr := map[string]string{}
	for _, c := range cols {
		hdr[c.name] = c.name
	}
	out := []string{st.muted.Render(row(cols, hdr))}
	if v.err != nil {
		out = append(out, st.bad.Render("  refresh failed: "+errText(v.err)))
	}
	if len(v.shown) == 0 {
		if v.filter != "" {
			return append(out, "  no job matches /"+v.filter)
		}
		return append(out, "  no jobs yet")
	}
	first, last, pos := v.window(len(v.shown), v.rows(h))
	for i := first; i < last; i++ {
		j := v.shown[i]
		exit := ""
		if terminal(j.State) && j.State != imsv1.JobState_JOB_STATE_REFUSED {
			exit = fmt.Sprint(j.ExitCode)
		}
		created := dash
		if j.CreateTime != nil {
			created = ago(v.now, j.CreateTime.AsTime())
		}
		line := row(cols, map[string]string{
			"JOB": j.Id, "INSTALL": v.installName(j.InstallId), "COMPONENT": cmp.Or(j.Component, dash), "TYPE": j.ComponentType + " " + j.Operation,
			"STATE": stateName(j.State), "TRY": tryText(j),
			"CREATED": created, "BY": j.CreatedBy, "EXIT": exit,
		})
		switch {
		case i == pos:
			line = v.selectedLine(line, w)
		case j.State == imsv1.JobState_JOB_STATE_FAILED || j.State == imsv1.JobState_JOB_STATE_TIMED_OUT ||
			j.State == imsv1.JobState_JOB_STATE_REFUSED:
			line = st.bad.Render(line)
		case j.State == imsv1.JobState_JOB_STATE_RUNNING:
			line = st.ok.Render(line)
		}
		out = append(out, line)
	}
	return out
}

var jobCols = []column{
	{"JOB", 0, 0}, {"INSTALL", 14, 2}, {"COMPONENT", 12, 4}, {"TYPE", 14, 5}, {"STATE", 10, 1}, {"TRY", 5, 6},
	{"CREATED", 9, 3}, {"BY", 10, 7}, {"EXIT", 4, 8},
}

func filterJobs(e *env, jobs []*imsv1.Job, filter string) []*imsv1.Job {
	terms := strings.Fields(strings.ToLower(filter))
	if len(terms) == 0 {
		return jobs
	}
	var out []*imsv1.Job
	if sel, ok := filterSelector(filter); ok {
		// A selector picks the jobs of the installs whose labels (or
		// fields) match, and matches the job's own fields where no
		// install attribute has the key.
		for _, j := range jobs {
			m := map[string]string{}
			s := e.fleet.byID[j.InstallId]
			if s != nil {
				m = attributes(s)
			}
			m["state"], m["type"], m["component"], m["install"] = stateName(j.State), j.ComponentType, j.Component, e.installName(j.InstallId)
			if s != nil {
				maps.Copy(m, s.Install.Labels)
			}
			if sel.Matches(m) {
				out = append(out, j)
			}
		}
		return out
	}
	for _, j := range jobs {
		hay := strings.ToLower(strings.Join([]string{j.Id, e.installName(j.InstallId), j.Component, stateName(j.State), j.ComponentType, j.Operation, j.CreatedBy}, " "))
		ok := true
		for _, t := range terms {
			if k, val, isKV := strings.Cut(t, "="); isKV {
				ok = ok && jobField(e, j, k) == val
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

func jobField(e *env, j *imsv1.Job, k string) string {
	switch k {
	case "state":
		return stateName(j.State)
	case "install":
		return strings.ToLower(e.installName(j.InstallId))
	case "type":
		return j.ComponentType
	case "component":
		return strings.ToLower(j.Component)
	case "by":
		return strings.ToLower(j.CreatedBy)
	}
	return "\x00" // matches nothing
}

func stateName(s imsv1.JobState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATE_"))
}

// tryText is a job's attempt: "1/3" while it may be tried again, only
// "1" once it has ended (a failed job is not retried).
func tryText(j *imsv1.Job) string {
	if terminal(j.State) {
		return fmt.Sprint(j.Attempt)
	}
	return fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts)
}

func terminal(s imsv1.JobState) bool {
	switch s {
	case imsv1.JobState_JOB_STATE_SUCCEEDED, imsv1.JobState_JOB_STATE_FAILED,
		imsv1.JobState_JOB_STATE_CANCELLED, imsv1.JobState_JOB_STATE_TIMED_OUT, imsv1.JobState_JOB_STATE_REFUSED:
		return true
	}
	return false
}

// jobsView is `:jobs`: every install's jobs, listed again whenever the
// fleet changes.
type jobsView struct{ jobList }

func newJobsView(e *env) *jobsView { return &jobsView{jobList{env: e}} }

func (v *jobsView) Title() string      { return "jobs" }
func (v *jobsView) Hints() []Action    { return []Action{ActCancelJob} }
func (v *jobsView) View() string       { return lines(v.table(true, v.w, v.h)) }
func (v *jobsView) SetSize(w, h int)   { v.w, v.h = w, h; v.scroll(v.h) }
func (v *jobsView) SetFilter(s string) { v.setFilter(s); v.scroll(v.h) }

func (v *jobsView) Update(msg tea.Msg) tea.Cmd {
	defer v.scroll(v.h)
	if m, ok := msg.(fleetChangedMsg); ok {
		if len(m.resps) > 0 {
			return v.refresh()
		}
		return nil
	}
	cmd, _ := v.update(msg)
	return cmd
}
