package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/term"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/agentd/sessionrec"
	"github.com/byoc-dev/byoc/internal/reltime"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
)

const breakglassUsage = `usage: agentd breakglass [--state-dir DIR] [--ims URL] COMMAND

The vendor's break-glass requests for this install, decided here, on the
customer's side. An approval is signed with the agent's key and kept in
DIR/breakglass.json; the agent lets break_glass jobs run only while a
grant you approved is live by its own clock, and cancels them when it
ends. imsd (the vendor) can neither make a grant nor extend one.

  list                     every request and grant, with its state
  approve ID [--role R] [--for D] [--allow-sessions]
                           grant a pending request, for the duration asked
                           or the shorter D (e.g. 30m). On a terminal it
                           shows the request and asks you to type its role;
                           elsewhere --role R and --for D are required, the
                           request must ask for R and for D or longer (imsd
                           cannot change the role or lengthen the grant
                           between what you saw and what you grant).
                           --allow-sessions also lets the holder open
                           interactive support sessions (byoc support
                           shell), recorded here (agentd session); off by
                           default
  deny ID --reason TEXT    refuse a pending request
  revoke ID [--reason T]   end an approved grant now; running break-glass
                           jobs are cancelled within a second, even if
                           imsd cannot be told
`

// breakglassCmd runs "agentd breakglass ...".
//
// stdin answers approve's question when it is a terminal.
func breakglassCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, now func() time.Time) int {
	fs := flag.NewFlagSet("agentd breakglass", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), breakglassUsage) }
	stateDir := fs.String("state-dir", os.Getenv("BYOC_STATE_DIR"), "the agent's state `directory`; also $BYOC_STATE_DIR")
	ims := fs.String("ims", os.Getenv("BYOC_IMS_URL"), "imsd `URL` (default: the one the agent enrolled with); also $BYOC_IMS_URL")
	dur := fs.Duration("for", 0, "approve for this `duration` (at most what was asked; required where stdin is not a terminal)")
	reason := fs.String("reason", "", "why (required to deny)")
	allowSessions := fs.Bool("allow-sessions", false, "approve: also allow interactive support sessions under the grant")
	role := fs.String("role", "", "approve: the `role` you grant; the request must ask for it (required where stdin is not a terminal)")
	words, code := parseWords(fs, args, stdout)
	if words == nil {
		return code
	}
	cmd, rest := words[0], words[1:]
	want, ok := map[string]int{"list": 0, "approve": 1, "deny": 1, "revoke": 1}[cmd]
	if !ok {
		fmt.Fprintf(stderr, "agentd breakglass: unknown command %q\n\n%s", cmd, breakglassUsage)
		return 2
	}
	if len(rest) != want {
		fmt.Fprintf(stderr, "agentd breakglass %s: want %d argument(s), got %d\n", cmd, want, len(rest))
		return 2
	}
	if cmd == "deny" && strings.TrimSpace(*reason) == "" {
		fmt.Fprintln(stderr, "agentd breakglass deny: --reason is required")
		return 2
	}
	if *allowSessions && cmd != "approve" {
		fmt.Fprintln(stderr, "agentd breakglass: --allow-sessions is for approve only")
		return 2
	}
	if *role != "" && cmd != "approve" {
		fmt.Fprintln(stderr, "agentd breakglass: --role is for approve only")
		return 2
	}
	asker := terminalAsker(stdin, stdout)
	if cmd == "approve" && *role == "" && asker == nil {
		fmt.Fprintln(stderr, "agentd breakglass approve: --role is required where stdin is not a terminal: name the role you grant (agentd breakglass list shows what each request asks for)")
		return 2
	}
	if cmd == "approve" && *dur == 0 && asker == nil {
		// As with the role: imsd reports the duration asked, and could
		// report a longer one than the customer saw in list.
		fmt.Fprintln(stderr, "agentd breakglass approve: --for is required where stdin is not a terminal: name how long you grant, at most what the request asks (agentd breakglass list shows it)")
		return 2
	}
	if *dur < 0 || (*dur != 0 && cmd != "approve") {
		fmt.Fprintln(stderr, "agentd breakglass: --for is for approve only, and positive")
		return 2
	}
	dir, id, code := agentIdentity("agentd breakglass", *stateDir, stderr)
	if code != 0 {
		return code
	}
	if *ims == "" {
		*ims = id.IMSURL
	}
	client, done := commandClient(dir, id.InstallID, *ims, stderr)
	defer done()
	c := &bgClient{id: id, dir: dir, now: now, stdout: stdout, stderr: stderr, client: client}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch cmd {
	case "list":
		return c.list(ctx)
	case "approve":
		return c.approve(ctx, rest[0], approval{d: *dur, role: *role, allowSessions: *allowSessions, ask: asker})
	case "deny":
		return c.deny(ctx, rest[0], *reason)
	default:
		return c.revoke(ctx, rest[0], *reason)
	}
}

type bgClient struct {
	id     identity.Identity
	dir    string
	now    func() time.Time
	client agentv1connect.AgentServiceClient
	stdout io.Writer
	stderr io.Writer
}

func (c *bgClient) fetch(ctx context.Context) ([]*agentv1.BreakGlassGrant, error) {
	at := c.now()
	resp, err := c.client.ListBreakGlass(ctx, connect.NewRequest(&agentv1.ListBreakGlassRequest{
		AgentId: c.id.AgentID, Time: timestamppb.New(at), Signature: agentproto.SignListBreakGlass(c.id.PrivateKey, c.id.AgentID, at)}))
	if err != nil {
		return nil, fmt.Errorf("ask imsd for the requests: %w", err)
	}
	return resp.Msg.Grants, nil
}

func (c *bgClient) find(ctx context.Context, id string) (*agentv1.BreakGlassGrant, error) {
	gs, err := c.fetch(ctx)
	if err != nil {
		return nil, err
	}
	for _, g := range gs {
		if g.Id == id {
			return g, nil
		}
	}
	return nil, fmt.Errorf("no break-glass request %q for this install (agentd breakglass list)", id)
}

func (c *bgClient) decide(ctx context.Context, d agentproto.BreakGlassDecision) (*agentv1.BreakGlassGrant, error) {
	st, sig, err := agentproto.SignBreakGlassDecision(c.id.PrivateKey, d)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.DecideBreakGlass(ctx, connect.NewRequest(&agentv1.DecideBreakGlassRequest{AgentId: c.id.AgentID, Statement: st, Signature: sig}))
	if err != nil {
		return nil, fmt.Errorf("record the decision with imsd: %w", err)
	}
	return resp.Msg.Grant, nil
}

func (c *bgClient) fail(err error) int {
	// The error may quote imsd's answer: shown, not obeyed.
	fmt.Fprintf(c.stderr, "agentd breakglass: %s\n", shown(err.Error()))
	return 1
}

func (c *bgClient) list(ctx context.Context) int {
	local, lerr := permissions.LoadGrants(c.dir)
	switch {
	case permissions.IsRefused(lerr):
		fmt.Fprintf(c.stderr, "agentd breakglass: %v (the agent refuses every job until it is fixed)\n", lerr)
	case lerr != nil:
		fmt.Fprintf(c.stderr, "agentd breakglass: %v (break_glass jobs are refused until it can be read)\n", lerr)
	}
	now := c.now()
	remote, err := c.fetch(ctx)
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tROLE\tREQUESTED BY\tREASON\tDECIDED BY\tUNTIL")
	seen := map[string]bool{}
	imsdOnly := false
	for _, g := range remote {
		seen[g.Id] = true
		state, by, until := oneLine(g.State), g.DecidedBy, ""
		switch g.State {
		case "pending":
			until = "asks " + reltime.Duration(time.Duration(g.DurationSeconds)*time.Second) + "; request expires " + reltime.Since(now, g.RequestExpireTime.AsTime())
		case "approved", "expired", "revoked":
			until = untilText(g.State, now, stamp(g.ExpireTime), stamp(g.RevokeTime))
		}
		// This agent's own record decides what it enforces.
		if l, ok := local.Find(g.Id); ok {
			state, by = localState(*l, now), l.ApprovedBy
			until = untilText(state, now, l.ExpiresAt, l.RevokedAt)
		} else if g.State == "approved" && lerr == nil {
			// imsd says approved, but not this agent: a grant imsd made
			// (or one this agent's file lost) is shown as imsd's word,
			// never as one the agent honours.
			state += "*"
			imsdOnly = true
		}
		// Every field imsd sent is the vendor's to write: shown, not
		// obeyed, so that a request cannot rewrite what you approve.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", oneLine(g.Id), oneLine(state), oneLine(g.Role), oneLine(g.RequestedBy), oneLine(g.Reason), oneLine(by), until)
	}
	for _, l := range local.Grants {
		if !seen[l.ID] {
			state := localState(l, now)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", oneLine(l.ID), state, oneLine(l.Role), oneLine(l.RequestedBy), oneLine(l.Reason), oneLine(l.ApprovedBy), untilText(state, now, l.ExpiresAt, l.RevokedAt))
		}
	}
	tw.Flush()
	if imsdOnly {
		fmt.Fprintf(c.stdout, "* imsd says approved, but this agent approved no such grant (%s): it does not honour it\n", permissions.GrantsPath(c.dir))
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "agentd breakglass: %s (shown: the grants this agent approved)\n", shown(err.Error()))
		return 1
	}
	return 0
}

// untilText is the UNTIL of a decided grant, as byoc breakglass list
// shows it: "in 54m" while live, "ended 5m ago" once expired, "revoked 2m
// ago" once revoked; never the end a revoked grant no longer has.
func untilText(state string, now, expires, revoked time.Time) string {
	switch state {
	case "approved":
		if !now.Before(expires) {
			// imsd may not have heard yet that it ended.
			return "ended " + reltime.Since(now, expires)
		}
		return reltime.Since(now, expires)
	case "expired":
		return strings.TrimSpace("ended " + reltime.Since(now, expires))
	case "revoked":
		return strings.TrimSpace("revoked " + reltime.Since(now, revoked))
	}
	return ""
}

// stamp is ts as a time, the zero time when unset.
func stamp(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func localState(g permissions.Grant, now time.Time) string {
	switch {
	case !g.RevokedAt.IsZero():
		return "revoked"
	case g.LiveAt(now):
		return "approved"
	}
	return "expired"
}

func oneLine(s string) string {
	s = shown(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > 60 {
		s = string(r[:57]) + "..."
	}
	return s
}

// approval is what the customer said on approve's command line.
type approval struct {
	d             time.Duration
	role          string // the role the customer grants: the request must ask for it
	allowSessions bool
	// ask shows a question on the customer's terminal and returns the
	// line typed; nil where stdin is not a terminal (role is then set).
	ask func(question string) (string, error)
}

// terminalAsker returns approve's question on stdin's terminal, or nil
// when stdin is not one.
func terminalAsker(stdin io.Reader, stdout io.Writer) func(string) (string, error) {
	f, ok := stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	r := bufio.NewReader(f)
	return func(q string) (string, error) {
		fmt.Fprint(stdout, q)
		line, err := r.ReadString('\n')
		if err != nil && line == "" {
			return "", err
		}
		return strings.TrimSpace(line), nil
	}
}

func (c *bgClient) approve(ctx context.Context, id string, a approval) int {
	g, err := c.find(ctx, id)
	if err != nil {
		return c.fail(err)
	}
	if g.State != "pending" {
		return c.fail(fmt.Errorf("break-glass request %s is %s: only a pending request can be approved", id, g.State))
	}
	d := a.d
	asked := time.Duration(g.DurationSeconds) * time.Second
	if d == 0 {
		d = asked
	}
	if d > asked {
		return c.fail(fmt.Errorf("--for %s is longer than the %s asked", d, asked))
	}
	// The vendor's server says what was asked: never more than a grant
	// may last, whatever it says.
	if d > permissions.MaxGrant {
		if a.d != 0 {
			return c.fail(fmt.Errorf("--for %s is longer than the %s a grant may last", d, permissions.MaxGrant))
		}
		return c.fail(fmt.Errorf("break-glass request %s asks for %s, longer than the %s a grant may last; approve it with --for %s or less",
			id, d, permissions.MaxGrant, permissions.MaxGrant))
	}
	by := whoami()
	if by == "" || by == g.RequestedBy {
		return c.fail(fmt.Errorf("the approver (%q) must be a local user other than the requester", by))
	}
	// The role is what the grant gives (with a stack, the cloud role the
	// jobs assume): the vendor's server reports it, so the customer names
	// it, typed or with --role, and a request asking for another one is
	// not approved whatever list showed before.
	if a.role == "" {
		fmt.Fprintf(c.stdout, "Break-glass request %s on this install:\n  role:         %s\n  asked by:     %s\n  reason:       %s\n  for:          %s\n  sessions:     %s\n\n",
			oneLine(g.Id), oneLine(g.Role), oneLine(g.RequestedBy), oneLine(g.Reason), d, map[bool]string{true: "allowed (--allow-sessions)", false: "not allowed"}[a.allowSessions])
		typed, err := a.ask(fmt.Sprintf("Type the role (%s) to approve it, anything else cancels: ", oneLine(g.Role)))
		if err != nil || typed != g.Role {
			if err != nil {
				typed = "nothing"
			} else {
				typed = strconv.Quote(typed)
			}
			return c.fail(fmt.Errorf("approval of %s cancelled: %s typed, not the role %q; nothing was decided", id, typed, oneLine(g.Role)))
		}
	} else if a.role != g.Role {
		return c.fail(fmt.Errorf("break-glass request %s asks for role %q, not %q: nothing was decided (agentd breakglass list)", id, oneLine(g.Role), a.role))
	}
	allowSessions := a.allowSessions
	now := c.now().UTC()
	dec := agentproto.BreakGlassDecision{GrantID: id, AgentID: c.id.AgentID, InstallID: c.id.InstallID,
		Decision: agentproto.DecisionApprove, Role: g.Role, By: by, At: now, ExpiresAt: now.Add(d)}
	if _, err := c.decide(ctx, dec); err != nil {
		return c.fail(err)
	}
	_, err = permissions.UpdateGrants(c.dir, func(gs *permissions.Grants) error {
		if _, ok := gs.Find(id); ok {
			return fmt.Errorf("break-glass grant %s is already recorded here", id)
		}
		gs.Grants = append(gs.Grants, permissions.Grant{ID: id, Role: g.Role, Reason: g.Reason, RequestedBy: g.RequestedBy,
			ApprovedBy: by, ApprovedAt: now, ExpiresAt: dec.ExpiresAt, AllowSessions: allowSessions})
		return nil
	})
	if err != nil {
		return c.fail(fmt.Errorf("keep the grant in %s: %w (imsd shows it approved, but this agent will not honour it)", permissions.GrantsPath(c.dir), err))
	}
	fmt.Fprintf(c.stdout, "approved %s: role %s for %s, until %s, by %s\n", id, oneLine(g.Role), d, dec.ExpiresAt.Local().Format(time.DateTime), by)
	if allowSessions {
		fmt.Fprintf(c.stdout, "support sessions allowed under %s: each is recorded in %s (agentd session list)\n", id, sessionrec.Dir(c.dir))
	}
	if st, err := permissions.Load(c.dir); err == nil && st.RefusalAt(string(permissions.BreakGlass), permissions.Grants{Grants: []permissions.Grant{{ExpiresAt: dec.ExpiresAt}}}, now) != "" {
		fmt.Fprintf(c.stdout, "note: break_glass jobs are still refused: %s\n", st.Refusal(string(permissions.BreakGlass)))
	}
	return 0
}

func (c *bgClient) deny(ctx context.Context, id, reason string) int {
	by := whoami()
	g, err := c.decide(ctx, agentproto.BreakGlassDecision{GrantID: id, AgentID: c.id.AgentID, InstallID: c.id.InstallID,
		Decision: agentproto.DecisionDeny, By: by, At: c.now().UTC(), Reason: strings.TrimSpace(reason)})
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stdout, "denied %s (role %s, asked by %s) by %s\n", id, oneLine(g.Role), oneLine(g.RequestedBy), by)
	return 0
}

func (c *bgClient) revoke(ctx context.Context, id, reason string) int {
	by, now := whoami(), c.now().UTC()
	// The local record first: the agent stops honouring the grant within
	// a second whether or not imsd can be told.
	_, err := permissions.UpdateGrants(c.dir, func(gs *permissions.Grants) error {
		g, ok := gs.Find(id)
		if !ok {
			return fmt.Errorf("this agent approved no break-glass grant %q", id)
		}
		if !g.RevokedAt.IsZero() {
			return fmt.Errorf("break-glass grant %s was already revoked by %s", id, g.RevokedBy)
		}
		g.RevokedAt, g.RevokedBy, g.RevokeReason = now, by, strings.TrimSpace(reason)
		return nil
	})
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stdout, "revoked %s by %s: break_glass jobs are refused and running ones cancelled\n", id, by)
	if _, err := c.decide(ctx, agentproto.BreakGlassDecision{GrantID: id, AgentID: c.id.AgentID, InstallID: c.id.InstallID,
		Decision: agentproto.DecisionRevoke, By: by, At: now, Reason: strings.TrimSpace(reason)}); err != nil {
		return c.fail(fmt.Errorf("%w (the revocation holds in this account all the same)", err))
	}
	return 0
}
