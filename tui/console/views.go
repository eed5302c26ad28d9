package console

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// view is one level of the drill-down: a Bubble Tea component with its own
// model, as soft-serve's are (its common.Component). The console keeps the views on a
// stack; key presses go to the top view's Update, everything else (async
// results, fleetChangedMsg) to every view's, and each view keeps the
// generations of its own requests and drops stale results. A view may also
// implement the small interfaces below; the console asks for them where it
// needs them, so a view implements only what it does.
//
// Adding a view: one file with its type (and, for new keys, their lines in
// keys.go's key map), and one line in rootViews if a `:` command opens it.
type view interface {
	// Init starts what the view needs when it is opened (its requests).
	Init() tea.Cmd
	// Update handles a message. It never waits on I/O.
	Update(msg tea.Msg) tea.Cmd
	// View returns the view's body for the size it was given, one screen
	// line per text line; the console cuts what is wider or taller. It
	// only slices and formats what Update prepared, and changes nothing.
	View() string
	// SetSize gives the view the body's width and height.
	SetSize(width, height int)
	// Title is the view's part of the breadcrumb.
	Title() string
}

// closer is a view that started requests or streams: Close cancels them
// when the view leaves the stack.
type closer interface{ Close() }

// filterable is a view whose rows `/` filters.
type filterable interface {
	// Filter is the filter the input starts from and esc clears.
	Filter() string
	SetFilter(s string)
}

// searchable is a view where `/` searches instead of filtering.
type searchable interface{ Search(q string) }

// hinted is a view whose own keys the footer lists after the global ones.
type hinted interface{ Hints() []Action }

// fleetChangedMsg tells every view that the fleet watch delivered
// responses (none when only the watch's state changed, such as a failure).
// The console sends it right after merging them into env.fleet.
type fleetChangedMsg struct {
	resps []*imsv1.WatchInstallsResponse
}

// rootView is a view a `:` command opens as the new root of the stack.
type rootView struct {
	names []string // the command and its aliases; names[0] is the one shown
	open  func(e *env) view
}

// rootViews are the views the command line opens, in the order its help lists them.
var rootViews = []rootView{
	{[]string{"installs", "install", "fleet"}, func(e *env) view { return newFleetView(e) }},
	{[]string{"jobs", "job"}, func(e *env) view { return newJobsView(e) }},
	{[]string{"audit"}, func(e *env) view { return newAuditView(e) }},
	{[]string{"workflows", "workflow", "wf"}, newWorkflowsView},
	{[]string{"releases", "release", "rel"}, newReleasesView},
	{[]string{"apps", "app"}, newAppsView},
	{[]string{"breakglass", "grants", "bg"}, newGrantsView},
}

// rootViewNames is the `:` commands of rootViews, as ":installs :jobs :audit".
func rootViewNames(sep string) string {
	var out []string
	for _, s := range rootViews {
		out = append(out, ":"+s.names[0])
	}
	return strings.Join(out, sep)
}

// nav is what a view may ask of the console around it.
type nav interface {
	// push opens v on top of the stack.
	push(v view) tea.Cmd
	// setStatus shows a message in the footer.
	setStatus(isErr bool, format string, args ...any)
	// startAction opens the install's actions (actionsView) to pick one.
	startAction(install *imsv1.InstallStatus) tea.Cmd
	// startBreakGlass asks for a break-glass request on install.
	startBreakGlass(install *imsv1.InstallStatus) tea.Cmd
	// startShell asks, then hands the terminal over to a support shell
	// on install (supportshell.go).
	startShell(install *imsv1.InstallStatus) tea.Cmd
	// startScript asks for an ad-hoc script, then for confirmation.
	startScript(install *imsv1.InstallStatus) tea.Cmd
	// confirmCancel asks before cancelling job.
	confirmCancel(job *imsv1.Job) tea.Cmd
	// ask asks "title?" with details below it, and runs yes (which starts
	// the request, under a generation the view keeps) on y. A view's own
	// dangerous action goes through it, its key marked dangerous in the
	// key map so that read-only mode leaves it unbound.
	ask(title string, details []string, yes func() tea.Cmd) tea.Cmd
	// askTyped is ask for a break_glass job: it runs yes once the
	// install's name (typed) is typed out, and asks again when mistyped.
	askTyped(title string, details []string, typed string, yes func() tea.Cmd) tea.Cmd
	// grant is the operator's live break-glass grant on the install with
	// this id, or nil.
	grant(installID string) *imsv1.BreakGlassGrant
	// copyID puts id on the clipboard (OSC 52) and says so.
	copyID(kind, id string) tea.Cmd
	// switchContext connects to the CLI context name (:ctx NAME).
	switchContext(name string) tea.Cmd
}

// env is what every view shares (soft-serve's common.Common): the
// connection, key map, styles, options, clock and the fleet, which only the
// console changes, and nav for what a view asks of the console.
type env struct {
	ctx   context.Context
	conn  *Conn
	km    *KeyMap
	st    styles
	opts  Options
	fleet *fleet
	// names maps the ids of installs outside the fleet that jobs name to
	// their names, "" while or after looking one up in vain
	// (nameInstalls).
	names   map[string]string
	now     time.Time
	offline error // the fleet watch's last failure, nil while it delivers
	gen     int   // last generation handed out
	nav     nav
}

// nextGen hands out a new request generation.
func (e *env) nextGen() int { e.gen++; return e.gen }

// installName is the name of the install with this id: from the fleet,
// else from names (the vendor's build agent's install, which the fleet
// watch leaves out, runs build jobs), else the id.
func (e *env) installName(id string) string {
	if s := e.fleet.byID[id]; s != nil {
		return s.Install.Name
	}
	if n := e.names[id]; n != "" {
		return n
	}
	return id
}

func (e *env) selectedLine(s string, w int) string {
	return e.st.selected.Render(pad(s, w))
}

// list is a cursor over n rows shown h at a time.
type list struct{ pos, off int }

// move handles the list keys (a page is page rows) and reports whether
// msg was one.
func (l *list) move(km *KeyMap, msg tea.KeyPressMsg, n, page int) bool {
	page = max(1, page)
	switch {
	case km.Is(msg, ActUp):
		l.pos--
	case km.Is(msg, ActDown):
		l.pos++
	case km.Is(msg, ActPageUp):
		l.pos -= page
	case km.Is(msg, ActPageDown):
		l.pos += page
	case km.Is(msg, ActTop):
		l.pos = 0
	case km.Is(msg, ActBottom):
		l.pos = n - 1
	default:
		return false
	}
	l.pos = max(0, min(l.pos, n-1))
	return true
}

// scroll keeps the cursor on one of n rows and the window of h rows
// around it. Views call it in Update (and SetSize, SetFilter) after
// anything that moves rows, so that View only reads the window; with no
// rows it leaves the cursor where it was, for when they come back.
func (l *list) scroll(n, h int) {
	if n == 0 {
		return
	}
	l.pos = max(0, min(l.pos, n-1))
	if l.pos < l.off {
		l.off = l.pos
	}
	if l.pos >= l.off+h {
		l.off = l.pos - h + 1
	}
	l.off = max(0, min(l.off, n-h))
}

// window returns the first and last+1 row to show in h rows, and the
// cursor's row: what scroll left, without changing it.
func (l list) window(n, h int) (first, last, pos int) {
	l.scroll(n, h)
	return l.off, min(n, l.off+h), l.pos
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

// layoutFit is layout for rows whose widest cells (need, by column) are
// known: the room a wide window leaves goes first to the flexible column,
// up to its widest cell, then to the fixed columns whose cells are wider
// than their width (in the order they are kept), then to the flexible
// column again, up to max. So nothing that fits is cut: at 200 columns
// "terraform apply" and "agent.permissions_changed" show whole.
func layoutFit(cols []column, w, flexMin, flexMax int, need map[string]int) []column {
	out := layout(cols, w, flexMin, flexMax)
	flex := -1
	spare := w - len(out) // as layout: one column to spare
	for i, c := range out {
		if slices.ContainsFunc(cols, func(o column) bool { return o.name == c.name && o.width == 0 }) {
			flex = i
			spare -= flexMin
			continue
		}
		spare -= c.width
	}
	give := func(i, upTo int) {
		if g := min(upTo-out[i].width, spare); g > 0 {
			out[i].width += g
			spare -= g
		}
	}
	if flex >= 0 {
		out[flex].width = flexMin
		give(flex, min(need[out[flex].name], flexMax))
	}
	order := make([]int, len(out))
	for i := range out {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return out[order[a]].prio < out[order[b]].prio })
	for _, i := range order {
		if i != flex {
			give(i, need[out[i].name])
		}
	}
	if flex >= 0 {
		give(flex, flexMax)
		out[flex].width = max(1, out[flex].width)
	}
	return out
}

// widest records in need each cell's width, where it is the widest yet.
func widest(need map[string]int, cells map[string]string) {
	for k, c := range cells {
		need[k] = max(need[k], ansi.StringWidth(c))
	}
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

// lines joins a view's lines into its View text.
func lines(l []string) string { return strings.Join(l, "\n") }
