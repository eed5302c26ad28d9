package console

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/internal/reltime"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// Break-glass in the console. From an install, the break-glass key asks
// for a role, a reason and a duration and sends the request; the console
// then polls the grants of the install being looked at every second.
// While the operator (the console's token) holds a live grant there, the
// header carries a warning-coloured banner with the install, role,
// approver and a countdown (on the install's views and its actions), and
// an ad-hoc script runs as a break_glass job under the grant; such a job,
// like an app action of mode break_glass, asks for the install's name
// typed out before it runs (a mistyped name asks again), after showing
// the customer's modes and whether the agent will refuse it. The
// countdown runs on the console's clock, so the banner goes the second
// the grant ends; a revocation shows at the next poll. The agent, not the
// console, enforces the grant.

// installScoped is a view about one install: the install whose grants the
// console shows while the view is on top.
type installScoped interface{ InstallID() string }

func (v *installView) InstallID() string { return v.id }
func (v *logView) InstallID() string     { return v.job.GetInstallId() }
func (v *actionsView) InstallID() string { return v.install.GetInstall().GetId() }

// bgState is the console's break-glass state.
type bgState struct {
	me       string                              // the token's name, from WhoAmI
	grants   map[string][]*imsv1.BreakGlassGrant // by install id, from the last poll
	pollGen  int
	polling  bool
	requests map[string]string // state last seen of requests made here, by id
	// The request being made: install, then a role chosen from the
	// app's (policy), a reason typed, a duration chosen.
	install      string
	role, reason string
	policy       *imsv1.GetBreakGlassPolicyResponse
	policyErr    error
	policyGen    int
	pos          int // the cursor in the role or duration choices
}

// policyMsg is GetBreakGlassPolicy's answer.
type policyMsg struct {
	gen    int
	policy *imsv1.GetBreakGlassPolicyResponse
	err    error
}

// durationChoices are the durations offered, up to the policy's longest
// (which is always offered).
func durationChoices(max time.Duration) []time.Duration {
	var out []time.Duration
	for _, d := range []time.Duration{15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 24 * time.Hour} {
		if d < max {
			out = append(out, d)
		}
	}
	return append(out, max)
}

func (m *Model) choices() int {
	switch {
	case m.bg.policy == nil:
		return 0
	case m.mode == inputBGRole:
		return len(m.bg.policy.Roles)
	}
	return len(durationChoices(time.Duration(m.bg.policy.MaxDurationSeconds) * time.Second))
}

// grantsMsg is a poll's answer.
type grantsMsg struct {
	gen     int
	install string
	me      string
	grants  []*imsv1.BreakGlassGrant
	err     error
}

// requestedMsg is RequestBreakGlass's answer.
type requestedMsg struct {
	grant *imsv1.BreakGlassGrant
	err   error
}

// viewedInstall is the id of the install the operator looks at ("" on
// the fleet or jobs lists).
func (m *Model) viewedInstall() string {
	if s, ok := m.top().(installScoped); ok {
		return s.InstallID()
	}
	return ""
}

// liveGrant is the operator's live grant on install at the console's
// clock, or nil.
func (m *Model) liveGrant(install string) *imsv1.BreakGlassGrant {
	if install == "" || m.bg.me == "" {
		return nil
	}
	for _, g := range m.bg.grants[install] {
		if g.State == "approved" && g.RequestedBy == m.bg.me && g.ExpireTime != nil && m.now.Before(g.ExpireTime.AsTime()) {
			return g
		}
	}
	return nil
}

// grantBanner is the break-glass line of the header, or "".
func (m *Model) grantBanner() string {
	in := m.viewedInstall()
	if g := m.liveGrant(in); g != nil {
		left := g.ExpireTime.AsTime().Sub(m.now).Truncate(time.Second)
		return fmt.Sprintf(" BREAK-GLASS on %s · role %s · approved by %s · %s left · scripts run as break_glass ",
			m.installName(in), g.Role, g.DecidedBy, countdown(left))
	}
	for _, g := range m.bg.grants[in] {
		if _, mine := m.bg.requests[g.Id]; mine && g.State == "pending" {
			// The command first, whole on a narrow terminal, with
			// --role and --for: agentd requires them where stdin is not a
			// terminal.
			return fmt.Sprintf(" %s waiting for the customer's approval: agentd breakglass approve %s --role %s --for %s ",
				m.installName(in), g.Id, g.Role, reltime.Flag(time.Duration(g.DurationSeconds)*time.Second))
		}
	}
	return ""
}

// countdown renders d as 59:07 or 1:02:03.
func countdown(d time.Duration) string {
	s := int(d / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%02d:%02d", s/60, s%60)
}

// pollGrants asks for the viewed install's grants once a second (at
// most one request at a time).
func (m *Model) pollGrants() tea.Cmd {
	in := m.viewedInstall()
	if in == "" || m.bg.polling || m.conn == nil || m.opts.NoWatch {
		return nil
	}
	m.bg.polling = true
	m.bg.pollGen = m.nextGen()
	gen, me, ctx, c := m.bg.pollGen, m.bg.me, m.ctx, m.conn.Client
	return func() tea.Msg { return fetchGrants(ctx, c, gen, in, me) }
}

func fetchGrants(ctx context.Context, c imsv1connect.OperatorServiceClient, gen int, install, me string) tea.Msg {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if me == "" {
		w, err := c.WhoAmI(ctx, connect.NewRequest(&imsv1.WhoAmIRequest{}))
		if err != nil {
			return grantsMsg{gen: gen, install: install, err: err}
		}
		me = w.Msg.Name
	}
	r, err := c.ListBreakGlassGrants(ctx, connect.NewRequest(&imsv1.ListBreakGlassGrantsRequest{Install: install}))
	if err != nil {
		return grantsMsg{gen: gen, install: install, me: me, err: err}
	}
	return grantsMsg{gen: gen, install: install, me: me, grants: r.Msg.Grants}
}

// grantsUpdate handles the break-glass messages; ok is false for others.
func (m *Model) grantsUpdate(msg tea.Msg) (cmd tea.Cmd, ok bool) {
	switch msg := msg.(type) {
	case grantsMsg:
		if msg.gen != m.bg.pollGen {
			return nil, true
		}
		m.bg.polling = false
		if msg.me != "" {
			m.bg.me = msg.me
		}
		if msg.err != nil {
			return nil, true // the fleet watch's banner says when imsd is away
		}
		if m.bg.grants == nil {
			m.bg.grants = map[string][]*imsv1.BreakGlassGrant{}
		}
		m.bg.grants[msg.install] = msg.grants
		for _, g := range msg.grants {
			if prev, mine := m.bg.requests[g.Id]; mine && prev != g.State {
				m.bg.requests[g.Id] = g.State
				switch g.State {
				case "approved":
					m.setStatus(false, "break-glass %s approved by %s until %s", g.Id, g.DecidedBy, g.ExpireTime.AsTime().Local().Format("15:04:05"))
				case "denied":
					m.setStatus(true, "break-glass %s denied by %s: %s", g.Id, g.DecidedBy, g.DecisionReason)
				default:
					m.setStatus(g.State != "pending", "break-glass %s is %s", g.Id, g.State)
				}
			}
		}
		return nil, true
	case policyMsg:
		if msg.gen != m.bg.policyGen {
			return nil, true
		}
		m.bg.policy, m.bg.policyErr = msg.policy, msg.err
		if msg.err == nil && len(msg.policy.Roles) == 0 && m.mode == inputBGRole {
			m.mode = inputNone
			m.setStatus(true, "break-glass not available on %s: its app declares no roles in break_glass.toml", m.bg.install)
		}
		return nil, true
	case requestedMsg:
		if msg.err != nil {
			m.setStatus(true, "break-glass not requested: %s", errText(msg.err))
			return nil, true
		}
		if m.bg.requests == nil {
			m.bg.requests = map[string]string{}
		}
		g := msg.grant
		m.bg.requests[g.Id] = g.State
		if m.bg.grants == nil {
			m.bg.grants = map[string][]*imsv1.BreakGlassGrant{}
		}
		m.bg.grants[g.InstallId] = append([]*imsv1.BreakGlassGrant{g}, m.bg.grants[g.InstallId]...)
		m.setStatus(false, "break-glass %s requested on %s (role %s): pending the customer's approval", g.Id, g.InstallName, g.Role)
		return nil, true
	}
	return nil, false
}

// startBreakGlass asks for a break-glass request's role (chosen from the
// app's), reason (typed) and duration (chosen), in turn, then sends it.
func (m *Model) startBreakGlass(install *imsv1.InstallStatus) tea.Cmd {
	if install == nil || m.opts.ReadOnly || slices.Contains(m.opts.Denied, ActBreakGlass) || m.conn == nil ||
		(m.conn.Access != nil && !m.conn.Access.Allows(ActBreakGlass, install)) {
		return nil
	}
	m.bg.install, m.bg.role, m.bg.reason, m.bg.pos = install.Install.Name, "", "", 0
	m.bg.policy, m.bg.policyErr = nil, nil
	m.bg.policyGen = m.nextGen()
	m.mode, m.status = inputBGRole, ""
	gen, ctx, c, in := m.bg.policyGen, m.ctx, m.conn.Client, install.Install.Name
	return func() tea.Msg {
		r, err := c.GetBreakGlassPolicy(ctx, connect.NewRequest(&imsv1.GetBreakGlassPolicyRequest{Install: in}))
		if err != nil {
			return policyMsg{gen: gen, err: err}
		}
		return policyMsg{gen: gen, policy: r.Msg}
	}
}

// chooseKey handles a key while choosing the role or the duration: up
// and down move, enter picks, esc gives up.
func (m *Model) chooseKey(msg tea.KeyPressMsg) tea.Cmd {
	n := m.choices()
	switch {
	case msg.String() == "esc":
		m.mode = inputNone
		m.setStatus(false, "no break-glass requested")
	case m.km.Is(msg, ActUp):
		m.bg.pos = max(0, m.bg.pos-1)
	case m.km.Is(msg, ActDown):
		m.bg.pos = min(max(0, n-1), m.bg.pos+1)
	case msg.String() == "enter" && n > 0:
		pos := min(m.bg.pos, n-1)
		if m.mode == inputBGRole {
			m.bg.role = m.bg.policy.Roles[pos].Name
			m.mode = inputNone
			return m.startInput(inputBGReason, "")
		}
		m.mode = inputNone
		d := durationChoices(time.Duration(m.bg.policy.MaxDurationSeconds) * time.Second)[pos]
		return m.sendBreakGlass(d)
	}
	return nil
}

// bgInput takes the typed reason.
func (m *Model) bgInput(mode inputMode, val string) tea.Cmd {
	if m.bg.policy != nil && m.bg.policy.RequireReason && val == "" {
		cmd := m.startInput(inputBGReason, "")
		m.setStatus(true, "a reason is required (break_glass.toml has require_reason)")
		return cmd
	}
	m.bg.reason = val
	m.bg.pos = 0
	durs := durationChoices(time.Duration(m.bg.policy.GetMaxDurationSeconds()) * time.Second)
	for i, d := range durs {
		if d == time.Hour {
			m.bg.pos = i // one hour, as byoc breakglass request
		}
	}
	m.mode = inputBGDuration
	return nil
}

// sendBreakGlass sends the request for d.
func (m *Model) sendBreakGlass(d time.Duration) tea.Cmd {
	ctx, c := m.ctx, m.conn.Client
	req := &imsv1.RequestBreakGlassRequest{Install: m.bg.install, Role: m.bg.role, Reason: m.bg.reason, DurationSeconds: int64(d / time.Second)}
	m.setStatus(false, "requesting break-glass on %s…", m.bg.install)
	return func() tea.Msg {
		r, err := c.RequestBreakGlass(ctx, connect.NewRequest(req))
		if err != nil {
			return requestedMsg{err: err}
		}
		return requestedMsg{grant: r.Msg.Grant}
	}
}

func (m *Model) bgBody() []string {
	out := []string{
		"",
		m.st.title.Render("Request break-glass on " + m.bg.install),
		"",
		"  Asks the install's customer for a time-boxed grant to run break_glass",
		"  jobs there. Their admin approves or denies it in their own account",
		"  (agentd breakglass approve|deny); the agent enforces it and ends it.",
		"",
		"  role:     " + orDash(m.bg.role),
		"  reason:   " + orDash(m.bg.reason),
		"",
	}
	p := m.bg.policy
	switch {
	case m.bg.policyErr != nil:
		return append(out, m.st.bad.Render("  cannot read the app's break_glass.toml: "+errText(m.bg.policyErr)))
	case p == nil:
		return append(out, m.st.muted.Render("  reading the app's break_glass.toml…"))
	case m.mode == inputBGRole:
		out = append(out, "  Choose a role (up/down, enter):")
		for i, r := range p.Roles {
			out = append(out, m.choice(i, r.Name+m.st.muted.Render("  "+r.Description)))
		}
	case m.mode == inputBGReason:
		req := "optional"
		if p.RequireReason {
			req = "required"
		}
		out = append(out, "  Type the reason below ("+req+"; the customer sees it) and press enter.")
		if m.statusIsErr && m.status != "" {
			out = append(out, "  "+m.st.bad.Render(m.status))
		}
	case m.mode == inputBGDuration:
		out = append(out, "  Choose how long (up/down, enter; at most "+shortDur(time.Duration(p.MaxDurationSeconds)*time.Second)+"):")
		for i, d := range durationChoices(time.Duration(p.MaxDurationSeconds) * time.Second) {
			out = append(out, m.choice(i, shortDur(d)))
		}
	}
	return out
}

func (m *Model) choice(i int, text string) string {
	if i == m.bg.pos {
		return m.st.selected.Render("  › " + text)
	}
	return "    " + text
}

// shortDur renders d as 30m, 1h or 1h30m.
func shortDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func orDash(v string) string {
	if v == "" {
		return "-"
	}
	return v
}

// typedConfirmKey handles a key while a confirmation needs the install's
// name typed out: enter compares, esc aborts.
func (m *Model) typedConfirmKey(msg tea.KeyPressMsg) tea.Cmd {
	c := m.confirm
	switch msg.String() {
	case "esc":
		m.confirm = nil
		m.input.Blur()
		m.setStatus(false, "not done: %s", c.title)
		return nil
	case "enter":
		typed := strings.TrimSpace(m.input.Value())
		if typed != c.typed {
			// Asked again: what the confirmation is about (a typed
			// script) stays, only the answer is typed again.
			c.mistyped = typed
			m.input.SetValue("")
			return nil
		}
		m.confirm = nil
		m.input.Blur()
		return c.yes()
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	return cmd
}

// idOf is the id of the install named name in the fleet ("" if unknown).
func (f *fleet) idOf(name string) string {
	for id, s := range f.byID {
		if s.Install.Name == name {
			return id
		}
	}
	return ""
}

// countOrDash is n, or a dash for none.
func countOrDash(n int) string {
	if n == 0 {
		return dash
	}
	return strconv.Itoa(n)
}
