// Package console is byoc's interactive fleet console: a Bubble Tea program
// that shows every install live (pushed by imsd's WatchInstalls stream),
// drills down from an install to its jobs and their logs, runs actions
// after a confirmation, and switches between imsd contexts.
//
// Update never blocks: every call to imsd runs in a tea.Cmd or in a
// goroutine feeding a channel that a tea.Cmd drains in batches, and every
// result carries the generation of the request that asked for it, so a
// result that arrives after the user moved on is dropped. View only slices
// and formats what Update prepared.
package console

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/textinput"
	"charm.land/bubbles/v2/viewport"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"connectrpc.com/connect"
	"github.com/charmbracelet/x/ansi"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// Options configure a console.
type Options struct {
	Conn *Conn
	// Dial connects to the named CLI context, for :ctx NAME.
	Dial func(ctx context.Context, name string) (*Conn, error)
	// ReadOnly leaves every dangerous action unbound.
	ReadOnly bool
	// Denied are the actions the caller's roles allow on no install
	// (byoc auth whoami): unbound, as in read-only mode.
	Denied   []Action
	Settings Settings
	// Now is the clock (for "last heartbeat 3s ago"); nil means time.Now.
	Now func() time.Time
	// LogLines and LogBytes bound the memory of a log view (defaults
	// 20,000 lines and 32 MiB).
	LogLines, LogBytes int
	// Contexts lists the CLI config's contexts, for :ctx (nil when the
	// console was started with --server). It reads a file: Update calls
	// it only in a command.
	Contexts func() ([]ContextInfo, error)
	// NoWatch skips the fleet watch (tests feed fleetMsg themselves).
	NoWatch bool
}

type inputMode int

const (
	inputNone inputMode = iota
	inputFilter
	inputCommand
	inputSearch
	inputScript
	// inputBGRole, inputBGReason and inputBGDuration take a break-glass
	// request's fields in turn (breakglass.go): the role and duration are
	// chosen from lists, the reason typed.
	inputBGRole
	inputBGReason
	inputBGDuration
)

// confirmation is a pending yes/no question before something dangerous.
type confirmation struct {
	title   string
	details []string
	yes     func() tea.Cmd
	// typed, when set, must be typed out (the install's name) instead of
	// answering y: a break_glass job. mistyped is the last wrong answer,
	// shown while the question is asked again.
	typed, mistyped string
}

// Model is the console's Bubble Tea model: the root around a stack of
// views (views.go). It owns what the views share (env) and is the only one
// to change it.
type Model struct {
	*env
	w, h int
	// actionGen and cancelGen are the generations of the action run and
	// the cancel awaiting their answers: an answer of another generation
	// (an earlier request, or one sent before a context switch) is stale.
	// They are apart from gen, which every list refresh moves on.
	actionGen, cancelGen int
	// shellGen is the generation of the support shell last opened
	// (supportshell.go).
	shellGen int

	fleetGen    int
	fleetCancel context.CancelFunc
	fleetCh     chan fleetEvent
	retryAt     time.Time
	lastData    time.Time

	stack []view

	mode        inputMode
	input       textinput.Model
	scriptFor   string // install the action script is for
	confirm     *confirmation
	help        bool
	hints       help.Model // the footer's key hints
	footerKM    *KeyMap    // footerLine was rendered for these keys and actions
	footerActs  []Action
	footerLine  string
	titleKey    titleKey // titleLine was rendered for this
	titleLine   string
	helpPage    viewport.Model // the help screen, scrolled with up/down
	status      string
	statusIsErr bool

	// bg is the break-glass state: the grants of the install looked at,
	// the request being typed (breakglass.go).
	bg bgState

	// keysDenied are the dangerous actions km leaves unbound: read-only
	// mode, Options.Denied, and those the connection's Access allows not
	// on the selected row's install (refreshKeys).
	keysDenied []Action
}

// New returns a console model for opts.
func New(ctx context.Context, opts Options) (*Model, error) {
	km, err := newKeyMap(opts.Settings.Keys, func(d Action) bool { return opts.ReadOnly || slices.Contains(opts.Denied, d) })
	if err != nil {
		return nil, err
	}
	th, err := opts.Settings.theme()
	if err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LogLines <= 0 {
		opts.LogLines = 20000
	}
	if opts.LogBytes <= 0 {
		opts.LogBytes = 32 << 20
	}
	in := textinput.New()
	in.Prompt = ""
	hints := help.New()
	hints.ShortSeparator = "  "
	st := newStyles(th)
	hints.Styles.ShortKey, hints.Styles.ShortDesc, hints.Styles.ShortSeparator = st.muted, st.muted, st.muted
	m := &Model{env: &env{opts: opts, km: km, st: st, ctx: ctx, conn: opts.Conn,
		now: opts.Now(), fleet: newFleet(), names: map[string]string{}}, w: 80, h: 24, input: in, hints: hints}
	m.nav = m
	m.stack = []view{newFleetView(m.env)}
	if err := m.bindKeys(m.deniedHere()); err != nil {
		return nil, err
	}
	m.resize()
	return m, nil
}

// deniedHere returns the dangerous actions the console leaves unbound
// now: all in read-only mode; else Options.Denied and those the
// connection's grants do not allow on the install of the row under the
// cursor (or, with no such row, on any install).
func (m *Model) deniedHere() []Action {
	var out []Action
	in := m.rowInstall()
	for _, d := range keyDefaults {
		if !d.dangerous {
			continue
		}
		if m.opts.ReadOnly || slices.Contains(m.opts.Denied, d.act) || (m.conn != nil && m.conn.Access != nil && !m.conn.Access.Allows(d.act, in)) {
			out = append(out, d.act)
		}
	}
	return out
}

// refreshKeys rebinds the keys when what the caller may do on the
// selected row changed: another row, another view, another context.
func (m *Model) refreshKeys() {
	if denied := m.deniedHere(); !slices.Equal(denied, m.keysDenied) {
		m.bindKeys(denied) // the same settings built the first key map
	}
}

// bindKeys binds the keys, leaving the dangerous actions in denied
// unbound.
func (m *Model) bindKeys(denied []Action) error {
	km, err := newKeyMap(m.opts.Settings.Keys, func(d Action) bool { return slices.Contains(denied, d) })
	if err != nil {
		return err
	}
	m.km, m.keysDenied = km, denied
	return nil
}

// rowInstall is the install the top view's selected row belongs to: the
// install itself, or a job's; the install of an install's own views
// (actions); nil when none.
func (m *Model) rowInstall() *imsv1.InstallStatus {
	if len(m.stack) == 0 {
		return nil
	}
	v := m.top()
	if iv, ok := v.(interface{ rowInstall() *imsv1.InstallStatus }); ok {
		return iv.rowInstall()
	}
	sv, ok := v.(selectable)
	if !ok {
		return nil
	}
	switch o := sv.Selected().obj.(type) {
	case *imsv1.InstallStatus:
		return o
	case *imsv1.Job:
		return m.fleet.byID[o.GetInstallId()]
	}
	return nil
}

// Init starts the fleet watch and the clock.
func (m *Model) Init() tea.Cmd {
	return tea.Batch(m.startWatch(), tick())
}

// startWatch (re)opens the fleet watch under a new generation.
func (m *Model) startWatch() tea.Cmd {
	if m.fleetCancel != nil {
		m.fleetCancel()
	}
	m.fleetGen = m.nextGen()
	if m.opts.NoWatch || m.conn == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(m.ctx)
	m.fleetCancel = cancel
	m.fleetCh = make(chan fleetEvent, 64)
	go watchFleet(ctx, m.conn.Client, m.fleetCh)
	return m.waitFleet()
}

func (m *Model) waitFleet() tea.Cmd {
	gen, ch := m.fleetGen, m.fleetCh
	return nextBatch(ch, 256, func(ev []fleetEvent, closed bool) tea.Msg { return fleetMsg{gen: gen, events: ev} })
}

func (m *Model) top() view { return m.stack[len(m.stack)-1] }

func (m *Model) push(v view) tea.Cmd {
	m.stack = append(m.stack, v)
	v.SetSize(m.w, m.bodyHeight())
	return v.Init()
}

func closeView(v view) {
	if c, ok := v.(closer); ok {
		c.Close()
	}
}

func (m *Model) pop() {
	if len(m.stack) > 1 {
		closeView(m.top())
		m.stack = m.stack[:len(m.stack)-1]
	}
}

// reset replaces the whole stack with root.
func (m *Model) reset(root view) tea.Cmd {
	for len(m.stack) > 1 {
		m.pop()
	}
	closeView(m.stack[0])
	m.stack = nil
	return m.push(root)
}

// resize gives every view the body's size, which the window and the
// header's banners decide.
func (m *Model) resize() {
	h := m.bodyHeight()
	for _, v := range m.stack {
		v.SetSize(m.w, h)
	}
	if m.help && (m.helpPage.Width() != m.w || m.helpPage.Height() != h) {
		m.helpPage.SetWidth(m.w)
		m.helpPage.SetHeight(h)
		m.helpPage.SetContentLines(m.helpLines())
	}
}

func (m *Model) setStatus(err bool, format string, args ...any) {
	m.status, m.statusIsErr = fmt.Sprintf(format, args...), err
}

// bodyHeight is the rows left for the current view: the window less the
// header (headerLines: the title, the banners and the breadcrumbs) and the
// footer.
func (m *Model) bodyHeight() int {
	return max(1, m.h-2-len(m.banners())-1)
}

// Update handles one message. It never waits on I/O.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	cmd := m.update(msg)
	m.refreshKeys() // the row, the view or the context may have changed
	m.resize()      // the window, or the banners above the body, may have changed
	return m, cmd
}

// update is Update without the resize: messages for the console itself,
// key presses for the top view, anything else for every view.
func (m *Model) update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.w, m.h = msg.Width, msg.Height
		m.input.SetWidth(max(1, m.w-12))
		return nil
	case tickMsg:
		m.now = m.opts.Now()
		return tea.Batch(tick(), m.pollGrants())
	case fleetMsg:
		if msg.gen != m.fleetGen {
			return nil // a watch of a previous context
		}
		var resps []*imsv1.WatchInstallsResponse
		for _, ev := range msg.events {
			if ev.err != nil {
				m.offline, m.retryAt = ev.err, m.opts.Now().Add(ev.retryIn)
				continue
			}
			m.offline = nil
			m.lastData = m.opts.Now()
			resps = append(resps, ev.resp)
		}
		if len(resps) > 0 {
			m.fleet.apply(resps)
		}
		var cmds []tea.Cmd
		for _, v := range m.stack {
			cmds = append(cmds, v.Update(fleetChangedMsg{resps}))
		}
		if m.fleetCh != nil && !m.opts.NoWatch {
			cmds = append(cmds, m.waitFleet())
		}
		return tea.Batch(cmds...)
	case ctxMsg:
		if msg.err != nil {
			m.setStatus(true, "%v", msg.err)
			return nil
		}
		m.conn = msg.conn
		m.actionGen, m.cancelGen, m.shellGen = 0, 0, 0
		m.bg = bgState{}
		m.fleet = newFleet()
		m.names = map[string]string{}
		m.offline = nil
		m.setStatus(false, "switched to context %s (%s)", msg.conn.Context, msg.conn.Server)
		return tea.Batch(m.reset(newFleetView(m.env)), m.startWatch())
	case enqueuedMsg:
		if msg.gen != m.actionGen {
			return nil
		}
		if msg.err != nil {
			m.setStatus(true, "action not started: %s", errText(msg.err))
			return nil
		}
		m.setStatus(false, "action %s queued on %s", msg.job.Id, m.installName(msg.job.InstallId))
		return m.push(newLogView(m.env, msg.job))
	case cancelledMsg:
		if msg.gen != m.cancelGen {
			return nil
		}
		if msg.err != nil {
			m.setStatus(true, "cancel failed: %s", errText(msg.err))
		} else {
			// No state that goes stale in the status line: a running job
			// stops later, and its own row and view say when.
			switch st := msg.job.State; {
			case st == imsv1.JobState_JOB_STATE_CANCELLED:
				m.setStatus(false, "job %s cancelled", msg.job.Id)
			case terminal(st):
				m.setStatus(false, "job %s had already ended: %s", msg.job.Id, stateName(st))
			default:
				m.setStatus(false, "asked the agent to stop job %s; its state turns cancelled once it has stopped", msg.job.Id)
			}
		}
		return nil
	case shellEndedMsg:
		m.shellEnded(msg)
		return nil
	case tea.KeyPressMsg:
		return m.key(msg)
	case tea.PasteMsg:
		if m.mode != inputNone {
			var cmd tea.Cmd
			m.input, cmd = m.input.Update(msg)
			if m.mode == inputFilter {
				m.setFilter(m.input.Value())
			}
			return cmd
		}
		return nil
	}
	if cmd, ok := m.grantsUpdate(msg); ok {
		return cmd
	}
	// Results for a view: each view checks its own generation.
	var cmds []tea.Cmd
	switch msg := msg.(type) {
	case jobsMsg:
		cmds = append(cmds, m.nameInstalls(msg.jobs...))
	case jobMsg:
		if msg.job != nil {
			cmds = append(cmds, m.nameInstalls(msg.job))
		}
	case installNameMsg:
		if msg.conn == m.conn { // not an answer from a previous context
			m.names[msg.id] = msg.name
		}
		return nil
	}
	for _, v := range m.stack {
		cmds = append(cmds, v.Update(msg))
	}
	return tea.Batch(cmds...)
}

// filter is the top view's filter ("" for a view without one).
func (m *Model) filter() string {
	if f, ok := m.top().(filterable); ok {
		return f.Filter()
	}
	return ""
}

func (m *Model) setFilter(s string) {
	if f, ok := m.top().(filterable); ok {
		f.SetFilter(s)
	}
}

func (m *Model) key(msg tea.KeyPressMsg) tea.Cmd {
	if msg.String() == "ctrl+c" {
		return tea.Quit
	}
	if m.confirm != nil && m.confirm.typed != "" {
		return m.typedConfirmKey(msg)
	}
	if m.confirm != nil {
		c := m.confirm
		switch msg.String() {
		case "y", "Y":
			m.confirm = nil
			return c.yes()
		case "n", "N", "esc", "q":
			m.confirm = nil
			m.setStatus(false, "not done: %s", c.title)
		}
		return nil // every other key is ignored while asking
	}
	if m.mode == inputBGRole || m.mode == inputBGDuration {
		return m.chooseKey(msg)
	}
	if m.mode != inputNone {
		return m.inputKey(msg)
	}
	if m.help {
		switch {
		case m.km.Is(msg, ActHelp), m.km.Is(msg, ActBack), msg.String() == "q":
			m.help = false
		case m.km.Is(msg, ActDown):
			m.helpPage.ScrollDown(1)
		case m.km.Is(msg, ActUp):
			m.helpPage.ScrollUp(1)
		}
		return nil
	}
	switch {
	case m.km.Is(msg, ActHelp):
		m.help = true
		m.helpPage.SetWidth(0) // resize fills it
		m.helpPage.SetYOffset(0)
		return nil
	case m.km.Is(msg, ActCommand):
		return m.startInput(inputCommand, "")
	case m.km.Is(msg, ActFilter):
		if _, ok := m.top().(searchable); ok {
			return m.startInput(inputSearch, "")
		}
		return m.startInput(inputFilter, m.filter())
	case m.km.Is(msg, ActBack):
		if m.filter() != "" {
			m.setFilter("")
			return nil
		}
		// The status line (a log search's "match 3 of 9") is about the
		// view being left, so it goes with it.
		if len(m.stack) > 1 {
			m.status = ""
		}
		m.pop()
		return nil
	case m.km.Is(msg, ActQuit):
		if msg.String() != "q" || len(m.stack) == 1 {
			return tea.Quit
		}
		return nil
	}
	if sv, ok := m.top().(selectable); ok {
		f, isObj := map[Action]objectFormat{ActDescribe: fmtDescribe, ActYAML: fmtYAML, ActJSON: fmtJSON}, false
		for act, format := range f {
			if m.km.Is(msg, act) {
				isObj = true
				sel := sv.Selected()
				if sel.obj != nil {
					return m.push(newObjectView(m.env, sel, format))
				}
				if sel.id != "" {
					m.setStatus(true, "a %s is not an object imsd holds: nothing to describe", sel.kind)
					return nil
				}
			}
		}
		if m.km.Is(msg, ActCopyID) {
			if sel := sv.Selected(); sel.id != "" {
				return m.copyID(sel.kind, sel.id)
			}
			isObj = true
		}
		if isObj {
			m.setStatus(true, "no row under the cursor")
			return nil
		}
	}
	return m.top().Update(msg)
}

func (m *Model) startInput(mode inputMode, value string) tea.Cmd {
	m.mode = mode
	m.input.SetValue(value)
	m.input.CursorEnd()
	m.status = ""
	return m.input.Focus()
}

func (m *Model) inputKey(msg tea.KeyPressMsg) tea.Cmd {
	switch msg.String() {
	case "esc":
		if m.mode == inputFilter {
			m.setFilter("")
		}
		m.mode = inputNone
		m.input.Blur()
		return nil
	case "enter":
		mode, val := m.mode, strings.TrimSpace(m.input.Value())
		m.mode = inputNone
		m.input.Blur()
		switch mode {
		case inputCommand:
			return m.command(val)
		case inputFilter:
			m.setFilter(val)
		case inputSearch:
			if sv, ok := m.top().(searchable); ok {
				sv.Search(val)
			}
		case inputScript:
			return m.confirmScript(m.scriptFor, val)
		case inputBGReason:
			return m.bgInput(mode, val)
		}
		return nil
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	if m.mode == inputFilter {
		m.setFilter(m.input.Value()) // filter as you type
	}
	return cmd
}

// command runs a `:` command line.
func (m *Model) command(line string) tea.Cmd {
	f := strings.Fields(line)
	if len(f) == 0 {
		return nil
	}
	for _, s := range rootViews {
		if slices.Contains(s.names, f[0]) {
			return m.reset(s.open(m.env))
		}
	}
	switch f[0] {
	case "q", "quit":
		return tea.Quit
	case "ctx", "context", "contexts":
		if len(f) > 2 {
			m.setStatus(true, ":ctx takes one context name, as in :ctx prod, or none to list them")
			return nil
		}
		if len(f) == 2 {
			return m.switchContext(f[1])
		}
		if m.opts.Contexts == nil {
			m.setStatus(true, ":ctx is not available: the console was started with --server")
			return nil
		}
		return m.reset(newContextsView(m.env))
	}
	m.setStatus(true, "unknown command :%s; try %s, :ctx [NAME] or :q", f[0], rootViewNames(", "))
	return nil
}

// switchContext connects to the CLI context name in a command; ctxMsg
// brings the connection.
func (m *Model) switchContext(name string) tea.Cmd {
	if m.opts.Dial == nil {
		m.setStatus(true, ":ctx is not available: the console was started with --server")
		return nil
	}
	dial, ctx := m.opts.Dial, m.ctx
	m.setStatus(false, "connecting to context %s…", name)
	return func() tea.Msg {
		c, err := dial(ctx, name)
		return ctxMsg{conn: c, err: err}
	}
}

// startAction opens the install's actions, the ad-hoc script last.
func (m *Model) startAction(install *imsv1.InstallStatus) tea.Cmd {
	if install == nil {
		return nil
	}
	return m.push(newActionsView(m.env, install))
}

// startScript asks for the script of an ad-hoc action on install.
func (m *Model) startScript(install *imsv1.InstallStatus) tea.Cmd {
	if install == nil {
		return nil
	}
	m.scriptFor = install.Install.Name
	return m.startInput(inputScript, "")
}

func (m *Model) confirmScript(install, script string) tea.Cmd {
	if script == "" {
		m.setStatus(true, "no action run: the script is empty")
		return nil
	}
	mode := "maintenance"
	g := m.liveGrant(m.fleet.idOf(install))
	if g != nil {
		mode = "break_glass"
	}
	details := []string{
		"Runs the script with sh -e in a fresh work dir on the install's agent,",
		"as an `action` apply job (time limit 1 h), and follows its log.",
		"Needs permission mode: maintenance (refused while the customer has it off).",
	}
	if g != nil {
		details[2] = m.st.warn.Render(fmt.Sprintf("Runs UNDER BREAK-GLASS grant %s (role %s, approved by %s): permission mode break_glass.", g.Id, g.Role, g.DecidedBy))
	}
	details = append(details, m.modeLines(install, mode, g)...)
	if g != nil {
		return m.askTyped(fmt.Sprintf("run `%s` on %s under break-glass", script, install), details, install, func() tea.Cmd {
			m.actionGen = m.nextGen()
			return runAction(m.ctx, m.conn.Client, m.actionGen, install, script, "break_glass")
		})
	}
	return m.ask(fmt.Sprintf("run `%s` on %s", script, install), details, func() tea.Cmd {
		m.actionGen = m.nextGen()
		return runAction(m.ctx, m.conn.Client, m.actionGen, install, script, "")
	})
}

// modeLines are the confirmation's lines about the permission the job
// needs: the customer's modes as the install's agent last reported them,
// then, in the warning colour, why the agent will refuse the job, when it
// will (the mode off, every job disabled, or a break_glass job without a
// live grant, which is grant).
func (e *env) modeLines(install, mode string, grant *imsv1.BreakGlassGrant) []string {
	var p *imsv1.Permissions
	if s := e.fleet.byID[e.fleet.idOf(install)]; s != nil {
		p = s.Install.Agent.GetPermissions()
	}
	if p == nil {
		return []string{e.st.muted.Render("The customer's modes: not reported by an agent yet (the agent decides when the job comes).")}
	}
	out := []string{"The customer's modes, as the agent last reported them: " + ModesText(p) + e.st.muted.Render("  (P M D B: provision, maintenance, deprovision, break_glass)")}
	on := map[string]bool{"provision": p.Provision, "maintenance": p.Maintenance, "deprovision": p.Deprovision, "break_glass": p.BreakGlass}
	switch {
	case p.DisabledAll:
		out = append(out, e.st.warn.Render("The customer has disabled all jobs: the agent will refuse it."))
	case !on[mode]:
		out = append(out, e.st.warn.Render("The customer has "+mode+" turned off: the agent will refuse it."))
	}
	if mode == "break_glass" && grant == nil {
		out = append(out, e.st.warn.Render("You hold no live break-glass grant on "+install+": the agent will refuse it (b on the install requests one)."))
	}
	return out
}

func (m *Model) confirmCancel(job *imsv1.Job) tea.Cmd {
	if job == nil {
		return nil
	}
	if terminal(job.State) {
		m.setStatus(true, "job %s has already ended (%s)", job.Id, stateName(job.State))
		return nil
	}
	return m.ask(fmt.Sprintf("cancel job %s on %s", job.Id, m.installName(job.InstallId)),
		[]string{"A queued job ends at once; a running one is stopped by its agent (SIGTERM, then SIGKILL)."},
		func() tea.Cmd {
			m.cancelGen = m.nextGen()
			return cancelJob(m.ctx, m.conn.Client, m.cancelGen, job.Id)
		})
}

// copyID puts id on the clipboard with OSC 52 (the terminal, not a
// clipboard library, does it; over ssh too where the terminal allows it).
func (m *Model) copyID(kind, id string) tea.Cmd {
	m.setStatus(false, "copied %s id %s to the clipboard (OSC 52)", kind, id)
	return tea.SetClipboard(id)
}

// ask shows title and details and runs yes if the answer is y.
func (m *Model) ask(title string, details []string, yes func() tea.Cmd) tea.Cmd {
	m.confirm = &confirmation{title: title, details: details, yes: yes}
	return nil
}

// askTyped shows title and details and runs yes once typed (the install's
// name) is typed out; a mistyped answer asks again.
func (m *Model) askTyped(title string, details []string, typed string, yes func() tea.Cmd) tea.Cmd {
	m.confirm = &confirmation{title: title, details: details, yes: yes, typed: typed}
	m.input.SetValue("")
	return m.input.Focus()
}

// grant is the operator's live break-glass grant on the install with
// this id, or nil.
func (m *Model) grant(installID string) *imsv1.BreakGlassGrant { return m.liveGrant(installID) }

// View renders the screen. It formats what Update prepared and does no I/O.
func (m *Model) View() tea.View {
	v := tea.NewView(m.Render())
	v.AltScreen = true
	v.WindowTitle = "byoc"
	return v
}

// Render returns the screen as text, each line at most the window's width.
func (m *Model) Render() string {
	lines := m.headerLines()
	bodyH := m.bodyHeight()
	var body []string
	switch {
	case m.help:
		body = m.helpBody()
	case m.confirm != nil:
		body = m.confirmBody(bodyH)
	case m.mode == inputScript:
		body = m.scriptBody(bodyH)
	case m.mode == inputBGRole, m.mode == inputBGReason, m.mode == inputBGDuration:
		body = m.bgBody()
	default:
		body = strings.Split(m.top().View(), "\n")
	}
	for len(body) < bodyH {
		body = append(body, "")
	}
	lines = append(lines, body[:bodyH]...)
	lines = append(lines, m.footer())
	for i, l := range lines {
		lines[i] = fit(l, m.w)
	}
	return strings.Join(lines, "\n")
}

func (m *Model) headerLines() []string {
	n := -1 // no snapshot yet
	if m.fleet.loaded {
		n = len(m.fleet.byID)
	}
	// The title changes with the server and the number of installs only:
	// kept, like the footer, rather than styled again at every frame.
	if k := (titleKey{m.conn, m.opts.ReadOnly, n}); k != m.titleKey || m.titleLine == "" {
		m.titleKey, m.titleLine = k, m.title(n)
	}
	title := m.titleLine
	out := append([]string{title}, m.banners()...)
	var crumbs []string
	for _, v := range m.stack {
		crumbs = append(crumbs, v.Title())
	}
	out = append(out, m.st.accent.Render(strings.Join(crumbs, " › ")))
	return out
}

// titleKey is what the header's first line depends on.
type titleKey struct {
	conn     *Conn
	readOnly bool
	installs int // -1 before the first snapshot
}

func (m *Model) title(n int) string {
	where := "no server"
	if m.conn != nil {
		where = m.conn.Server
		if m.conn.Context != "" {
			where = m.conn.Context + " " + m.st.muted.Render("("+m.conn.Server+")")
		}
	}
	title := m.st.title.Render("byoc") + " " + where
	if m.conn != nil && m.conn.Identity != "" {
		title += " as " + m.conn.Identity
	}
	if m.opts.ReadOnly {
		title += " " + m.st.warn.Render("[read-only]")
	}
	if n >= 0 {
		plural := "s"
		if n == 1 {
			plural = ""
		}
		title += m.st.muted.Render(fmt.Sprintf("  %d install%s", n, plural))
	}
	return title
}

// banners are the header's lines between the title and the breadcrumbs,
// each a whole styled line: the break-glass grant's (warning colour), then
// the unreachable imsd's (banner style). bodyHeight counts them, so a new
// banner goes here and nowhere else.
func (m *Model) banners() []string {
	var out []string
	if b := m.grantBanner(); b != "" {
		out = append(out, m.st.glass.Render(b))
	}
	if m.offline != nil {
		since := "no data yet"
		if !m.lastData.IsZero() {
			since = "showing data from " + m.lastData.Format("15:04:05")
		}
		retry := m.retryAt.Sub(m.now).Round(time.Second)
		what := "imsd unreachable"
		switch connect.CodeOf(m.offline) {
		case connect.CodeUnauthenticated:
			what = "imsd did not accept the token (fix it with byoc context add)"
		case connect.CodePermissionDenied:
			what = "imsd refused the fleet watch"
		}
		out = append(out, m.st.banner.Render(fmt.Sprintf(" %s, retrying in %s; %s: %s ", what, max(retry, 0), since, errText(m.offline))))
	}
	return out
}

func (m *Model) footer() string {
	switch m.mode {
	case inputCommand:
		return ":" + m.input.View()
	case inputFilter:
		return "filter: " + m.input.View()
	case inputSearch:
		return "search: " + m.input.View()
	case inputScript:
		return "script: " + m.input.View()
	case inputBGRole, inputBGDuration:
		return "up/down choose, enter pick, esc cancel"
	case inputBGReason:
		return "reason: " + m.input.View()
	}
	if m.confirm != nil && m.confirm.typed != "" {
		return m.st.warn.Render("type "+m.confirm.typed+" to confirm: ") + m.input.View()
	}
	if m.confirm != nil {
		return m.st.warn.Render(m.confirm.title+"? ") + "y to confirm, n or esc to abort"
	}
	if m.status != "" {
		if m.statusIsErr {
			return m.st.bad.Render(m.status)
		}
		return m.status
	}
	acts := []Action{ActHelp, ActFilter, ActCommand, ActOpen, ActBack}
	if h, ok := m.top().(hinted); ok {
		acts = append(acts, h.Hints()...)
	}
	// No width: the footer is cut like every line, by fit. The hints
	// change only with the view on top, so the rendered line is kept
	// (rendering it at each of 100 updates a second was a tenth of the
	// console's CPU in Fleet10k).
	if m.footerKM != m.km || !slices.Equal(m.footerActs, acts) {
		m.footerKM, m.footerActs = m.km, acts
		m.footerLine = m.hints.ShortHelpView(m.km.ShortHelp(acts))
	}
	return m.footerLine
}

// helpLines is the help screen's text at the window's width (cut as fit
// cuts every line, so the viewport never cuts or wraps it).
func (m *Model) helpLines() []string {
	lines := append([]string{m.st.title.Render("Keys") + m.st.muted.Render("  (from the live bindings; change them in console.json; j/k scroll)"), ""}, m.km.HelpLines()...)
	for i, l := range lines {
		lines[i] = fit(l, m.w)
	}
	return lines
}

// helpBody is the help screen: the viewport's rows without the spaces it
// pads them with (the console's lines end where their text does).
func (m *Model) helpBody() []string {
	rows := strings.Split(m.helpPage.View(), "\n")
	for i, r := range rows {
		rows[i] = strings.TrimRight(r, " ")
	}
	return rows
}

func (m *Model) confirmBody(h int) []string {
	out := []string{"", m.st.warn.Render("Confirm: " + m.confirm.title), ""}
	for _, d := range m.confirm.details {
		out = append(out, "  "+d)
	}
	if m.confirm.typed != "" {
		out = append(out, "", "  Type the install's name ("+m.confirm.typed+") and press enter; esc aborts.")
		if m.confirm.mistyped != "" {
			out = append(out, "  "+m.st.bad.Render(fmt.Sprintf("You typed %q, not the install's name %q: type it again.", m.confirm.mistyped, m.confirm.typed)))
		}
		return out
	}
	return append(out, "", "  y: yes   n/esc: no")
}

func (m *Model) scriptBody(h int) []string {
	mode := "  Needs permission mode: maintenance (refused while the customer has it off)."
	if g := m.liveGrant(m.fleet.idOf(m.scriptFor)); g != nil {
		mode = m.st.warn.Render(fmt.Sprintf("  Runs UNDER BREAK-GLASS grant %s: permission mode break_glass; you type the install's name to confirm.", g.Id))
	}
	return []string{
		"",
		m.st.title.Render("Run an action on " + m.scriptFor),
		"",
		"  Type a shell script and press enter; you confirm before it runs.",
		"  It runs with sh -e in a fresh work dir on the install's agent, as an",
		"  `action` apply job (time limit 1 h); its log opens and follows.",
		mode,
		"  The app's own actions (actions/*.toml of its config) are in the list",
		"  before this one: esc goes back to them.",
	}
}

// fit cuts s (which may hold colour) to at most w columns.
func fit(s string, w int) string {
	if ansi.StringWidth(s) <= w {
		return s
	}
	return ansi.Truncate(s, w, "…")
}

// errText is the message of an error from imsd, without Connect's prefix.
func errText(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		if ce.Message() != "" {
			return ce.Message()
		}
		return ce.Code().String()
	}
	return err.Error()
}

type styles struct {
	title, accent, muted, ok, warn, bad, banner, glass, selected, match lipgloss.Style
}

func newStyles(t Theme) styles {
	return styles{
		title:    lipgloss.NewStyle().Bold(true).Foreground(t.Accent),
		accent:   lipgloss.NewStyle().Foreground(t.Accent),
		muted:    lipgloss.NewStyle().Foreground(t.Muted),
		ok:       lipgloss.NewStyle().Foreground(t.OK),
		warn:     lipgloss.NewStyle().Foreground(t.Warn),
		bad:      lipgloss.NewStyle().Foreground(t.Bad),
		banner:   lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("#ffffff")).Background(t.Banner),
		glass:    lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("#000000")).Background(t.Warn),
		selected: lipgloss.NewStyle().Background(t.Selected).Bold(true),
		match:    lipgloss.NewStyle().Reverse(true),
	}
}

// nameInstalls looks up the names of the installs of jobs that are not in
// the fleet, once each: the vendor's build agent's install (_vendor),
// whose build jobs the jobs view lists, or an install deleted since.
func (m *Model) nameInstalls(jobs ...*imsv1.Job) tea.Cmd {
	if m.conn == nil || m.conn.Client == nil {
		return nil
	}
	var cmds []tea.Cmd
	for _, j := range jobs {
		id := j.GetInstallId()
		if _, ok := m.names[id]; ok || id == "" || m.fleet.byID[id] != nil {
			continue
		}
		m.names[id] = ""
		cmds = append(cmds, installName(m.ctx, m.conn, id))
	}
	return tea.Batch(cmds...)
}
