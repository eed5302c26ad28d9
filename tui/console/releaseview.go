package console

import (
	"context"
	"fmt"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/tui/termtext"
)

// :releases lists the releases (a tableView); enter opens one as a
// releaseView: a progress bar per wave, then the installs that are not
// done (waiting for their window, with the time left; running; failed,
// with why), enter on one describing it in full. p, r and X pause,
// resume and cancel the release, each asked first.

func newReleasesView(e *env) view {
	return newTableView(e, tableSpec[*imsv1.Release]{
		title: "releases", refresh: true, empty: "no releases yet (byoc release create APP --revision N --waves canary:1,100%)",
		cols: []column{{"ID", 14, 0}, {"APP", 10, 1}, {"REVISION", 8, 3}, {"STATE", 10, 1}, {"WAVE", 12, 2}, {"PROGRESS", 24, 2},
			{"CREATED", 9, 4}, {"ERROR", 0, 5}},
		load: func(ctx context.Context, e *env) func() ([]*imsv1.Release, error) {
			return listReleases(ctx, e.conn.Client)
		},
		cells: func(e *env, r *imsv1.Release) map[string]string {
			return map[string]string{"ID": r.Id, "APP": orDash(r.AppName), "REVISION": releaseRevision(r), "STATE": enumText(r.State, "RELEASE_STATE_"),
				"WAVE": releaseWave(r), "PROGRESS": progressBar(r.Counts, 10), "CREATED": tsAgo(e, r.CreateTime, r.CreateTime != nil),
				"ERROR": orDash(r.Error)}
		},
		sel: func(e *env, r *imsv1.Release) selection { return selection{r, "release", r.Id, r.Id} },
		open: func(_ context.Context, e *env, r *imsv1.Release) tea.Cmd {
			return e.nav.push(newReleaseView(e, r.Id))
		},
	})
}

func releaseRevision(r *imsv1.Release) string {
	if r.Kind == "rollback" {
		return "undo " + r.RollbackOf
	}
	return fmt.Sprint(r.AppRevision)
}

func releaseWave(r *imsv1.Release) string {
	if len(r.Waves) == 0 {
		return dash
	}
	w := r.Waves[min(int(r.CurrentWave), len(r.Waves)-1)]
	return fmt.Sprintf("%d/%d %s", r.CurrentWave+1, len(r.Waves), w.Name)
}

// progressBar is "███▒░░░░░░ 4/10": succeeded, then failed (and
// cancelled or skipped), then the rest, in width cells.
func progressBar(counts map[string]int32, width int) string {
	total := 0
	for _, n := range counts {
		total += int(n)
	}
	if total == 0 {
		return strings.Repeat("░", width) + " 0/0"
	}
	done := int(counts["succeeded"])
	bad := int(counts["failed"] + counts["cancelled"] + counts["skipped"])
	d := done * width / total
	b := (done + bad) * width / total
	if bad > 0 && b == d {
		b = min(width, d+1) // a failure always shows
	}
	return strings.Repeat("█", d) + strings.Repeat("▒", b-d) + strings.Repeat("░", width-b) + fmt.Sprintf(" %d/%d", done, total)
}

// releaseMsg is a release read again.
type releaseMsg struct {
	gen int
	r   *imsv1.Release
	err error
}

// releaseChangedMsg is the answer to a pause, resume or cancel.
type releaseChangedMsg struct {
	gen  int
	verb string
	r    *imsv1.Release
	err  error
}

// releasePoll re-reads an open release: its installs move with workflows
// whose changes the fleet watch may not carry (a window opening).
const releasePoll = 2 * time.Second

type releasePollMsg struct{ gen int }

type releaseView struct {
	*env
	list
	id     string
	w, h   int
	gen    int
	chGen  int
	r      *imsv1.Release
	err    error
	open   []*imsv1.ReleaseInstall // the installs not done, shown
	ctx    context.Context
	cancel context.CancelFunc
}

func newReleaseView(e *env, id string) *releaseView {
	ctx, cancel := context.WithCancel(e.ctx)
	return &releaseView{env: e, id: id, ctx: ctx, cancel: cancel}
}

func (v *releaseView) Init() tea.Cmd { return v.load() }
func (v *releaseView) Close()        { v.cancel() }
func (v *releaseView) Title() string { return "release " + v.id }
func (v *releaseView) SetSize(w, h int) {
	v.w, v.h = w, h
	v.scroll(len(v.open), v.page())
}
func (v *releaseView) Hints() []Action {
	return []Action{ActPauseRelease, ActResumeRelease, ActCancelRelease}
}

func (v *releaseView) load() tea.Cmd {
	v.gen = v.nextGen()
	gen, f := v.gen, getRelease(v.ctx, v.conn.Client, v.id)
	return func() tea.Msg {
		r, err := f()
		return releaseMsg{gen: gen, r: r, err: err}
	}
}

// page is the install rows under the header: two lines of the release,
// WAVES, a line per wave, INSTALLS and the table's head.
func (v *releaseView) page() int {
	waves := 0
	if v.r != nil {
		waves = len(v.r.Waves)
	}
	return max(1, v.h-5-waves)
}

func (v *releaseView) Selected() selection {
	if v.pos >= 0 && v.pos < len(v.open) {
		in := v.open[v.pos]
		return selection{in, "release install", in.InstallName, in.InstallId}
	}
	if v.r != nil {
		return selection{v.r, "release", v.r.Id, v.r.Id}
	}
	return selection{}
}

func (v *releaseView) Update(msg tea.Msg) tea.Cmd {
	defer func() { v.scroll(len(v.open), v.page()) }()
	switch msg := msg.(type) {
	case releaseMsg:
		if msg.gen != v.gen {
			return nil
		}
		v.err = msg.err
		if msg.err == nil {
			v.r = msg.r
			v.open = v.open[:0]
			for _, in := range msg.r.Installs {
				if in.State != "succeeded" && in.State != "pending" {
					v.open = append(v.open, in)
				}
			}
		}
		gen := v.gen
		return tea.Tick(releasePoll, func(time.Time) tea.Msg { return releasePollMsg{gen: gen} })
	case releasePollMsg:
		if msg.gen != v.gen {
			return nil
		}
		return v.load()
	case releaseChangedMsg:
		if msg.gen != v.chGen {
			return nil
		}
		if msg.err != nil {
			v.nav.setStatus(true, "release %s not %s: %s", v.id, pastTense(msg.verb), errText(msg.err))
			return nil
		}
		v.nav.setStatus(false, "release %s %s: %s", v.id, pastTense(msg.verb), enumText(msg.r.State, "RELEASE_STATE_"))
		return v.load()
	case fleetChangedMsg:
		if len(msg.resps) > 0 {
			return v.load()
		}
	case tea.KeyPressMsg:
		if v.move(v.km, msg, len(v.open), v.page()) {
			return nil
		}
		switch {
		case v.km.Is(msg, ActOpen):
			if v.pos >= 0 && v.pos < len(v.open) {
				return v.nav.push(newObjectView(v.env, v.Selected(), fmtDescribe))
			}
		case v.km.Is(msg, ActPauseRelease):
			return v.askChange("pause", "Nothing more starts; what runs finishes. byoc release resume goes on.")
		case v.km.Is(msg, ActResumeRelease):
			return v.askChange("resume", "A halted release accepts its failures and goes on (byoc release retry runs them again).")
		case v.km.Is(msg, ActCancelRelease):
			return v.askChange("cancel", "Installs not started never start; running ones are cancelled.")
		}
	}
	return nil
}

func pastTense(verb string) string {
	switch verb {
	case "pause":
		return "paused"
	case "resume":
		return "resumed"
	}
	return "cancelled"
}

// askChange asks before pausing, resuming or cancelling the release.
func (v *releaseView) askChange(verb, what string) tea.Cmd {
	if v.r == nil {
		return nil
	}
	details := []string{fmt.Sprintf("Release %s of %s (%s): %s", v.id, orDash(v.r.AppName), enumText(v.r.State, "RELEASE_STATE_"),
		progressBar(v.r.Counts, 10)), what}
	return v.nav.ask(verb+" release "+v.id, details, func() tea.Cmd {
		v.chGen = v.nextGen()
		gen, f := v.chGen, changeRelease(v.ctx, v.conn.Client, verb, v.id)
		return func() tea.Msg {
			r, err := f()
			return releaseChangedMsg{gen: gen, verb: verb, r: r, err: err}
		}
	})
}

var releaseInstallCols = []column{{"INSTALL", 14, 0}, {"WAVE", 4, 2}, {"STATE", 9, 0}, {"WORKFLOW", 14, 3}, {"WHY", 0, 1}}

func (v *releaseView) View() string {
	st := v.st
	switch {
	case v.r == nil && v.err != nil:
		return st.bad.Render("release " + v.id + " not read: " + errText(v.err))
	case v.r == nil:
		return st.muted.Render("loading release " + v.id + "…")
	}
	r := v.r
	state := enumText(r.State, "RELEASE_STATE_")
	if r.CancelRequested && r.EndTime == nil {
		state += " (cancelling)"
	}
	stStyle := st.accent
	switch r.State {
	case imsv1.ReleaseState_RELEASE_STATE_HALTED, imsv1.ReleaseState_RELEASE_STATE_FAILED:
		stStyle = st.bad
	case imsv1.ReleaseState_RELEASE_STATE_PAUSED, imsv1.ReleaseState_RELEASE_STATE_AWAITING_APPROVAL:
		stStyle = st.warn
	case imsv1.ReleaseState_RELEASE_STATE_SUCCEEDED:
		stStyle = st.ok
	}
	out := []string{
		fmt.Sprintf("%s  %s revision %s  %s  %s", termtext.Clean(r.Id, " "), termtext.Clean(orDash(r.AppName), " "), releaseRevision(r),
			stStyle.Render(state), progressBar(r.Counts, 20)),
		st.muted.Render(termtext.Clean(releaseSettings(r), " ")),
	}
	if r.Error != "" {
		out[1] = st.bad.Render(termtext.Clean(r.Error, " "))
	}
	out = append(out, st.accent.Render("WAVES"))
	for i, w := range r.Waves {
		mark := "  "
		if i == int(r.CurrentWave) && r.EndTime == nil {
			mark = "> "
		}
		line := fmt.Sprintf("%s%d %-10s %s", mark, i+1, termtext.Clean(w.Name, " "), progressBar(w.Counts, 20))
		var extra []string
		for _, s := range []string{"running", "waiting", "failed", "cancelled", "skipped"} {
			if n := w.Counts[s]; n > 0 {
				extra = append(extra, fmt.Sprintf("%d %s", n, s))
			}
		}
		if len(extra) > 0 {
			line += "  " + strings.Join(extra, ", ")
		}
		out = append(out, line)
	}
	out = append(out, st.accent.Render("INSTALLS")+"  "+st.muted.Render("not done yet or not succeeded; enter describes one"))
	if len(v.open) == 0 {
		return lines(append(out, st.muted.Render("  (none)")))
	}
	cells := make([]map[string]string, len(v.open))
	need := map[string]int{}
	for i, in := range v.open {
		why := in.Error
		if in.State == "waiting" && in.WindowOpenTime != nil {
			why = "window opens " + untilText(in.WindowOpenTime.AsTime().Sub(v.now))
			if in.Error != "" {
				why += " (" + in.Error + ")"
			}
		}
		cells[i] = map[string]string{"INSTALL": termtext.Clean(in.InstallName, " "), "WAVE": fmt.Sprint(in.Wave + 1), "STATE": in.State,
			"WORKFLOW": orDash(in.WorkflowId), "WHY": termtext.Clean(orDash(why), " ")}
		widest(need, cells[i])
	}
	head := map[string]string{}
	for _, c := range releaseInstallCols {
		head[c.name] = c.name
	}
	cols := layoutFit(releaseInstallCols, v.w, 16, 200, need)
	out = append(out, st.muted.Render(row(cols, head)))
	first, last, pos := v.window(len(v.open), v.page())
	for i := first; i < last; i++ {
		line := row(cols, cells[i])
		switch {
		case i == pos:
			line = v.selectedLine(line, v.w)
		case v.open[i].State == "failed":
			line = st.bad.Render(line)
		case v.open[i].State == "waiting":
			line = st.warn.Render(line)
		}
		out = append(out, line)
	}
	return lines(out)
}

// releaseSettings is "max failures 1 (5%) · windows respected · by ops".
func releaseSettings(r *imsv1.Release) string {
	parts := []string{fmt.Sprintf("max failures %d (%s)", r.MaxFailures, orDash(r.MaxFailuresSpec))}
	if r.Selector != "" {
		parts = append(parts, "selector "+r.Selector)
	}
	if r.RespectWindows {
		parts = append(parts, "windows respected")
	}
	if r.PauseBetweenSeconds > 0 {
		parts = append(parts, "pause "+(time.Duration(r.PauseBetweenSeconds)*time.Second).String())
	}
	parts = append(parts, "by "+orDash(r.CreatedBy))
	return strings.Join(parts, " · ")
}

// untilText is "in 2h13m" (to the minute; "in 40s" under one), or "now".
func untilText(d time.Duration) string {
	switch {
	case d <= 0:
		return "now"
	case d < time.Minute:
		return "in " + d.Round(time.Second).String()
	}
	t := d.Round(time.Minute).String()
	return "in " + strings.TrimSuffix(t, "0s")
}
