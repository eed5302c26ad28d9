package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// breakGlassGrantApp declares a break-glass role and a break-glass action.
var breakGlassGrantApp = map[string]string{
	"app.toml": "name = \"shop\"\n",
	"break_glass.toml": `max_duration = "2h"
require_reason = true
[[role]]
name = "debugger"
description = "Read logs and restart pods."
`,
	"actions/debug.toml": `description = "Opens a debug shell."
mode = "break_glass"
[[step]]
name = "debug"
script = "echo RAN"
`,
	"installs/acme.toml": "",
}

// breakglass runs agentd breakglass against the agent's state dir and
// returns its output and exit code.
func breakglass(t *testing.T, stateDir string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), append([]string{"breakglass", "--state-dir", stateDir}, args...)...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("agentd breakglass %s: %v", strings.Join(args, " "), err)
	}
	return string(out), code
}

var grantIDRE = regexp.MustCompile(`\bbg_[a-z0-9]+\b`)

// requestGrant asks for a grant on install with byoc breakglass request
// and returns its id.
func requestGrant(t *testing.T, cli *cluster.CLI, install string, args ...string) string {
	t.Helper()
	out := cli.Run(0, append([]string{"breakglass", "request", install}, args...)...)
	id := grantIDRE.FindString(out)
	if id == "" || !strings.Contains(out, "Pending the customer's approval") || !strings.Contains(out, "agentd breakglass approve "+id+" --role ") || !strings.Contains(out, " --for ") {
		t.Fatalf("byoc breakglass request:\n%s", out)
	}
	return id
}

func grantOf(t *testing.T, c interface {
	ListBreakGlassGrants(context.Context, *connect.Request[imsv1.ListBreakGlassGrantsRequest]) (*connect.Response[imsv1.ListBreakGlassGrantsResponse], error)
}, id string) *imsv1.BreakGlassGrant {
	t.Helper()
	r, err := c.ListBreakGlassGrants(context.Background(), connect.NewRequest(&imsv1.ListBreakGlassGrantsRequest{}))
	if err != nil {
		t.Fatalf("list grants: %v", err)
	}
	for _, g := range r.Msg.Grants {
		if g.Id == id {
			return g
		}
	}
	t.Fatalf("grant %s not listed", id)
	return nil
}

// startBreakGlass starts imsd, pushes breakGlassGrantApp, and runs agents
// for acme and beta with break_glass turned on (still needing a grant).
func startBreakGlass(t *testing.T, opts cluster.Options) (*cluster.IMS, *cluster.CLI, *cluster.AgentProc, *cluster.AgentProc) {
	t.Helper()
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	pushed := cli.PushApp(breakGlassGrantApp)
	acme := cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), filepath.Join(t.TempDir(), "acme"))
	_, tok := cluster.NewInstall(t, ims.Admin(), "shop", "beta")
	beta := cluster.StartAgent(t, ims.URL(), tok, filepath.Join(t.TempDir(), "beta"))
	waitConnected(t, ims, "acme")
	waitConnected(t, ims, "beta")
	permissions(t, acme.StateDir, "enable", "break_glass")
	permissions(t, beta.StateDir, "enable", "break_glass")
	return ims, cli, acme, beta
}

// A request names a role of break_glass.toml, a reason when it requires
// one, and at most max_duration. A grant approved for acme lets acme's
// break_glass jobs (an ad-hoc script and a break-glass action) run, and
// beta's stay refused: the grant lives in acme's agent only.
func TestBreakGlassGrantForOneInstallOnly(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims, cli, acme, beta := startBreakGlass(t, opts)
	c := ims.Admin()

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--reason", "x", "--role", "root"}, `"root" is not a role of break_glass.toml: want one of debugger`},
		{[]string{"--for", "1h"}, "reason: is required: break_glass.toml has require_reason"},
		{[]string{"--reason", "x", "--for", "3h"}, "longer than break_glass.toml's max_duration 2h0m0s"},
	} {
		out, errOut, code := cli.Exec(append([]string{"breakglass", "request", "acme"}, bad.args...)...)
		if code == 0 || !strings.Contains(out+errOut, bad.want) {
			t.Errorf("request %v: exit %d, want %q\n%s%s", bad.args, code, bad.want, out, errOut)
		}
	}

	// Without a grant: refused on both.
	r := enqueueMode(t, c, "acme", "break_glass", "echo RAN")
	if j := cluster.WaitJob(t, c, r.Id, 20*time.Second, imsv1.JobState_JOB_STATE_REFUSED, imsv1.JobState_JOB_STATE_SUCCEEDED); j.State != imsv1.JobState_JOB_STATE_REFUSED ||
		!strings.Contains(j.Error, "this install has none") {
		t.Fatalf("break_glass without a grant: %v %q", j.State, j.Error)
	}

	id := requestGrant(t, cli, "acme", "--reason", "INC-42 pods crash-looping", "--for", "1h")
	if g := grantOf(t, c, id); g.State != "pending" || g.Role != "debugger" || g.RequestedBy == "" || g.Reason != "INC-42 pods crash-looping" {
		t.Fatalf("requested grant: %v", g)
	}
	// beta's agent does not see acme's request, and cannot approve it.
	if out, _ := breakglass(t, beta.StateDir, "list"); strings.Contains(out, id) {
		t.Fatalf("beta's agent lists acme's request:\n%s", out)
	}
	if out, code := breakglass(t, beta.StateDir, "approve", id, "--role", "debugger", "--for", "1h"); code == 0 {
		t.Fatalf("beta's agent approved acme's request:\n%s", out)
	}
	out, code := breakglass(t, acme.StateDir, "list")
	if code != 0 || !lineWith(out, id, "pending", "debugger", "INC-42") {
		t.Fatalf("agentd breakglass list: exit %d\n%s", code, out)
	}
	// The customer grants the role it names, and no other.
	if out, code := breakglass(t, acme.StateDir, "approve", id, "--role", "admin", "--for", "1h"); code != 1 || !strings.Contains(out, `asks for role "debugger", not "admin"`) {
		t.Fatalf("approve --role admin of a debugger request: exit %d\n%s", code, out)
	}
	out, code = breakglass(t, acme.StateDir, "approve", id, "--role", "debugger", "--for", "30m")
	if code != 0 || !strings.Contains(out, "approved "+id+": role debugger for 30m0s") {
		t.Fatalf("agentd breakglass approve: exit %d\n%s", code, out)
	}
	g := grantOf(t, c, id)
	if g.State != "approved" || g.DecidedBy == "" || !g.Signed || g.ExpireTime == nil ||
		g.ExpireTime.AsTime().Sub(g.DecideTime.AsTime()) != 30*time.Minute {
		t.Fatalf("approved grant: %v", g)
	}
	if out := cli.Run(0, "breakglass", "list", "--install", "acme"); !lineWith(out, id, "acme", "debugger", "approved", g.DecidedBy) {
		t.Fatalf("byoc breakglass list:\n%s", out)
	}
	// A second approval of the same request is refused.
	if out, code := breakglass(t, acme.StateDir, "approve", id, "--role", "debugger", "--for", "1h"); code == 0 || !strings.Contains(out, "approved: only a pending request") {
		t.Fatalf("approving twice: exit %d\n%s", code, out)
	}

	ok := enqueueMode(t, c, "acme", "break_glass", "echo GRANTED")
	if _, j := follow(t, c, ok.Id); j.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("break_glass on acme under its grant: %v %q", j.State, j.Error)
	}
	if out, errOut, code := cli.Exec("action", "run", "acme", "debug", "--wait"); code != 0 {
		t.Fatalf("break-glass action on acme under its grant: exit %d\n%s%s", code, out, errOut)
	}
	markB := marker()
	onB := enqueueMode(t, c, "beta", "break_glass", "echo RAN; sleep "+markB)
	j := cluster.WaitJob(t, c, onB.Id, 20*time.Second, imsv1.JobState_JOB_STATE_REFUSED, imsv1.JobState_JOB_STATE_SUCCEEDED)
	if j.State != imsv1.JobState_JOB_STATE_REFUSED || !strings.Contains(j.Error, "need a live break-glass grant") {
		t.Fatalf("break_glass on beta with acme's grant: %v %q", j.State, j.Error)
	}
	neverRan(t, c, beta, j, markB)
}

// A request nobody decides expires, and can no longer be approved.
func TestBreakGlassPendingRequestExpires(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.BreakGlassRequestTTL = 2 * time.Second
	ims, cli, acme, _ := startBreakGlass(t, opts)
	c := ims.Admin()
	id := requestGrant(t, cli, "acme", "--reason", "look around")
	cluster.Eventually(t, 10*time.Second, "the request to expire", func() bool { return grantOf(t, c, id).State == "expired" })
	if out := cli.Run(0, "breakglass", "list"); !lineWith(out, id, "expired") {
		t.Fatalf("byoc breakglass list:\n%s", out)
	}
	out, code := breakglass(t, acme.StateDir, "approve", id, "--role", "debugger", "--for", "1h")
	if code == 0 || !strings.Contains(out, "is expired") {
		t.Fatalf("approving an expired request: exit %d\n%s", code, out)
	}
	if g := grantOf(t, c, id); g.State != "expired" || g.DecidedBy != "" {
		t.Fatalf("after the refused approval: %v", g)
	}
	j := enqueueMode(t, c, "acme", "break_glass", "echo RAN")
	if j := cluster.WaitJob(t, c, j.Id, 20*time.Second, imsv1.JobState_JOB_STATE_REFUSED, imsv1.JobState_JOB_STATE_SUCCEEDED); j.State != imsv1.JobState_JOB_STATE_REFUSED {
		t.Fatalf("break_glass after the request expired: %v %q", j.State, j.Error)
	}
}

// The agent ends a grant by its own clock: with imsd stopped, the running
// break-glass job is cancelled at expiry (its processes gone before imsd
// is back), and the next one is refused.
func TestBreakGlassGrantExpiresWhileIMSDown(t *testing.T) {
	skipShort(t)
	opts := fast
	// A lease far longer than the outage, so that only the grant's
	// expiry can stop the job.
	opts.LeaseDuration = 2 * time.Minute
	ims, cli, acme, _ := startBreakGlass(t, opts)
	c := ims.Admin()
	id := requestGrant(t, cli, "acme", "--reason", "short look", "--for", "1h")
	if out, code := breakglass(t, acme.StateDir, "approve", id, "--role", "debugger", "--for", "10s"); code != 0 {
		t.Fatalf("approve: exit %d\n%s", code, out)
	}
	expires := grantOf(t, c, id).ExpireTime.AsTime()
	mark := marker()
	running := enqueueMode(t, c, "acme", "break_glass", sleeper(mark))
	ps := waitPIDs(t, mark, 4)
	ims.Stop()
	cluster.Eventually(t, 20*time.Second, "the job's processes to be killed at the grant's expiry", func() bool {
		for _, p := range ps {
			if alive(p) {
				return false
			}
		}
		return true
	})
	if time.Now().Before(expires) {
		t.Fatalf("the job was stopped before the grant expired at %s", expires)
	}
	if !strings.Contains(acme.Output(), "cancelling a running job the customer's permissions no longer allow") {
		t.Fatalf("agent log has no cancellation:\n%s", acme.Output())
	}
	ims.Restart(t)
	end := cluster.WaitJob(t, c, running.Id, 30*time.Second, imsv1.JobState_JOB_STATE_CANCELLED, imsv1.JobState_JOB_STATE_FAILED, imsv1.JobState_JOB_STATE_SUCCEEDED)
	if end.State != imsv1.JobState_JOB_STATE_CANCELLED || !strings.Contains(end.Error, "grant "+id+" expired") {
		t.Fatalf("the running job after the grant expired: %v %q", end.State, end.Error)
	}
	next := enqueueMode(t, c, "acme", "break_glass", "echo RAN")
	j := cluster.WaitJob(t, c, next.Id, 20*time.Second, imsv1.JobState_JOB_STATE_REFUSED, imsv1.JobState_JOB_STATE_SUCCEEDED)
	if j.State != imsv1.JobState_JOB_STATE_REFUSED || !strings.Contains(j.Error, "grant "+id+" expired") {
		t.Fatalf("break_glass after expiry: %v %q", j.State, j.Error)
	}
	if g := grantOf(t, c, id); g.State != "expired" {
		t.Fatalf("imsd shows the grant %s", g.State)
	}
}

// Revoking a grant cancels the break-glass job running under it and
// refuses the next; imsd records who revoked it. A denied request says
// who and why.
func TestBreakGlassRevokeMidJob(t *testing.T) {
	skipShort(t)
	ims, cli, acme, _ := startBreakGlass(t, fast)
	c := ims.Admin()
	denied := requestGrant(t, cli, "acme", "--reason", "curious")
	if out, code := breakglass(t, acme.StateDir, "deny", denied); code != 2 || !strings.Contains(out, "--reason is required") {
		t.Fatalf("deny without a reason: exit %d\n%s", code, out)
	}
	if out, code := breakglass(t, acme.StateDir, "deny", denied, "--reason", "not during the freeze"); code != 0 {
		t.Fatalf("deny: exit %d\n%s", code, out)
	}
	if g := grantOf(t, c, denied); g.State != "denied" || g.DecisionReason != "not during the freeze" || g.DecidedBy == "" {
		t.Fatalf("denied request: %v", g)
	}

	id := requestGrant(t, cli, "acme", "--reason", "INC-7")
	if out, code := breakglass(t, acme.StateDir, "approve", id, "--role", "debugger", "--for", "1h"); code != 0 {
		t.Fatalf("approve: exit %d\n%s", code, out)
	}
	mark := marker()
	running := enqueueMode(t, c, "acme", "break_glass", sleeper(mark))
	ps := waitPIDs(t, mark, 4)
	out, code := breakglass(t, acme.StateDir, "revoke", id, "--reason", "done")
	if code != 0 || !strings.Contains(out, "revoked "+id) {
		t.Fatalf("revoke: exit %d\n%s", code, out)
	}
	end := cluster.WaitJob(t, c, running.Id, 20*time.Second, imsv1.JobState_JOB_STATE_CANCELLED, imsv1.JobState_JOB_STATE_FAILED, imsv1.JobState_JOB_STATE_SUCCEEDED)
	if end.State != imsv1.JobState_JOB_STATE_CANCELLED || !strings.Contains(end.Error, "grant "+id+" was revoked") {
		t.Fatalf("running job after revoke: %v %q", end.State, end.Error)
	}
	cluster.Eventually(t, 5*time.Second, "the job's processes to exit", func() bool {
		for _, p := range ps {
			if alive(p) {
				return false
			}
		}
		return true
	})
	next := enqueueMode(t, c, "acme", "break_glass", "echo RAN")
	if j := cluster.WaitJob(t, c, next.Id, 20*time.Second, imsv1.JobState_JOB_STATE_REFUSED, imsv1.JobState_JOB_STATE_SUCCEEDED); j.State != imsv1.JobState_JOB_STATE_REFUSED {
		t.Fatalf("break_glass after revoke: %v %q", j.State, j.Error)
	}
	g := grantOf(t, c, id)
	if g.State != "revoked" || g.RevokedBy == "" || g.DecisionReason != "done" {
		t.Fatalf("revoked grant: %v", g)
	}
	if out := cli.Run(0, "breakglass", "list"); !lineWith(out, id, "revoked", "revoked by "+g.RevokedBy) || !lineWith(out, denied, "denied", "not during the freeze") {
		t.Fatalf("byoc breakglass list:\n%s", out)
	}
}

// A break-glass job runs under one grant, the live one ending last, and
// stops when the customer revokes that grant, even while another grant
// they approved is still live: the other grant allows new jobs, not the
// running one's role and end.
func TestBreakGlassRevokeMidJobUnderAnotherLiveGrant(t *testing.T) {
	skipShort(t)
	ims, cli, acme, _ := startBreakGlass(t, fast)
	c := ims.Admin()
	other := requestGrant(t, cli, "acme", "--reason", "INC-9 short look", "--for", "1h")
	if out, code := breakglass(t, acme.StateDir, "approve", other, "--role", "debugger", "--for", "20m"); code != 0 {
		t.Fatalf("approve %s: exit %d\n%s", other, code, out)
	}
	id := requestGrant(t, cli, "acme", "--reason", "INC-9 longer look", "--for", "1h")
	if out, code := breakglass(t, acme.StateDir, "approve", id, "--role", "debugger", "--for", "1h"); code != 0 {
		t.Fatalf("approve %s: exit %d\n%s", id, code, out)
	}
	mark := marker()
	running := enqueueMode(t, c, "acme", "break_glass", sleeper(mark))
	ps := waitPIDs(t, mark, 4)
	if out, code := breakglass(t, acme.StateDir, "revoke", id, "--reason", "done"); code != 0 {
		t.Fatalf("revoke: exit %d\n%s", code, out)
	}
	end := cluster.WaitJob(t, c, running.Id, 20*time.Second, imsv1.JobState_JOB_STATE_CANCELLED, imsv1.JobState_JOB_STATE_FAILED, imsv1.JobState_JOB_STATE_SUCCEEDED)
	if end.State != imsv1.JobState_JOB_STATE_CANCELLED || !strings.Contains(end.Error, "grant "+id+" was revoked") {
		t.Fatalf("the job running under %s after its revocation, %s still live: %v %q", id, other, end.State, end.Error)
	}
	cluster.Eventually(t, 5*time.Second, "the job's processes to exit", func() bool {
		for _, p := range ps {
			if alive(p) {
				return false
			}
		}
		return true
	})
	// The other grant still lets a new break-glass job run.
	next := enqueueMode(t, c, "acme", "break_glass", "echo RAN")
	if j := cluster.WaitJob(t, c, next.Id, 20*time.Second, imsv1.JobState_JOB_STATE_REFUSED, imsv1.JobState_JOB_STATE_SUCCEEDED); j.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("break_glass under %s: %v %q", other, j.State, j.Error)
	}
}

// TestBreakGlassConsoleFlow drives the console in a real terminal (tmux):
// b requests break-glass on acme, the customer approves on the agent's
// side, the warning banner and its countdown appear, an action needs the
// install's name typed and then runs under the grant, and the banner goes
// when the grant expires.
func TestBreakGlassConsoleFlow(t *testing.T) {
	skipShort(t)
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("no tmux: the console flow needs a real terminal")
	}
	ims, _, acme, _ := startBreakGlass(t, fast)
	term := cluster.StartTerminal(t, 140, 30, []string{"BYOC_CONFIG=" + filepath.Join(t.TempDir(), "config.json")},
		filepath.Join(cluster.Binaries(t), "byoc"), "--server", ims.URL(), "--token", ims.AdminToken)
	term.WaitFor("acme online", func(s string) bool { return lineWith(s, "acme", "online") })
	term.Keys("Enter")
	term.WaitText("installs › acme", "b break-glass")
	term.Keys("b")
	term.WaitText("Request break-glass on acme", "Choose a role", "› debugger", "Read logs and restart pods.")
	term.Keys("Enter")
	term.WaitText("role:     debugger", "Type the reason below (required")
	term.Type("INC-9 checkout down")
	term.Keys("Enter")
	term.WaitText("Choose how long", "› 1h", "2h")
	term.Keys("Enter")
	s := term.WaitText("waiting for the customer's approval")
	id := grantIDRE.FindString(s)
	if id == "" {
		t.Fatalf("no grant id on screen:\n%s", s)
	}
	if out, code := breakglass(t, acme.StateDir, "approve", id, "--role", "debugger", "--for", "25s"); code != 0 {
		t.Fatalf("approve: exit %d\n%s", code, out)
	}
	who := grantOf(t, ims.Admin(), id).DecidedBy
	s = term.WaitText("BREAK-GLASS on acme · role debugger · approved by "+who, "left")
	first := regexp.MustCompile(`(\d\d:\d\d) left`).FindStringSubmatch(s)
	if first == nil {
		t.Fatalf("no countdown:\n%s", s)
	}
	term.WaitFor("the countdown to move", func(s string) bool {
		m := regexp.MustCompile(`(\d\d:\d\d) left`).FindStringSubmatch(s)
		return m != nil && m[1] != first[1]
	})

	adHocScript(term, "echo UNDER-GRANT")
	term.WaitText("Runs UNDER BREAK-GLASS grant "+id, "Type the install's name (acme)")
	term.Type("y")
	term.Keys("Enter")
	// Mistyped: asked again, the script kept.
	term.WaitText(`You typed "y", not the install's name "acme": type it again.`, "run `echo UNDER-GRANT` on acme under break-glass")
	term.Type("acme")
	term.Keys("Enter")
	term.WaitText("› logs", "UNDER-GRANT", "succeeded (exit 0)", "BREAK-GLASS on acme")

	// Watch the banner until it goes (WaitFor's 20 s may be shorter than
	// what is left of the grant).
	expires := grantOf(t, ims.Admin(), id).ExpireTime.AsTime()
	for s = term.Screen(); strings.Contains(s, "BREAK-GLASS"); s = term.Screen() {
		if time.Now().After(expires.Add(5 * time.Second)) {
			t.Fatalf("the banner outlived the grant by 5 s:\n%s", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if late := time.Since(expires); late < 0 || late > 2*time.Second {
		t.Errorf("the banner went %s after the grant's end", late)
	}
	if g := grantOf(t, ims.Admin(), id); g.State != "expired" {
		t.Fatalf("after the banner went, imsd shows the grant %s:\n%s", g.State, s)
	}
}

// TestIMSCannotMintAGrant plays a compromised imsd: it records acme's
// request as approved for an hour straight in its database, with no
// decision of the customer. imsd then shows it approved (unsigned), but
// the agent honours only the grants it approved itself, so acme's
// break_glass job is still refused and never runs. (Extending a grant is
// the same case: the agent enforces the end time it signed; see
// TestBreakGlassGrantExpiresWhileIMSDown.)
func TestIMSCannotMintAGrant(t *testing.T) {
	skipShort(t)
	ims, cli, acme, _ := startBreakGlass(t, fast)
	c := ims.Admin()
	ctx := context.Background()
	id := requestGrant(t, cli, "acme", "--reason", "I am imsd and I say so")
	g := grantOf(t, c, id)
	now := time.Now()
	if _, err := ims.Store().DecideBreakGlass(ctx, store.BreakGlassDecision{GrantID: id, InstallID: g.InstallId, State: store.GrantApproved,
		By: "customer-admin", At: now, ExpiresAt: now.Add(time.Hour)}, now); err != nil {
		t.Fatal(err)
	}
	if g := grantOf(t, c, id); g.State != "approved" || g.Signed {
		t.Fatalf("the forged grant as imsd shows it: %v", g)
	}
	// The customer's list shows it as imsd's word, not a grant the agent
	// honours.
	out, code := breakglass(t, acme.StateDir, "list")
	starred := false
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == id {
			starred = f[1] == "approved*"
		}
	}
	if code != 0 || !starred || !strings.Contains(out, "this agent approved no such grant") {
		t.Fatalf("agentd breakglass list of a grant imsd minted: exit %d\n%s", code, out)
	}
	mark := marker()
	j := enqueueMode(t, c, "acme", "break_glass", "echo RAN; sleep "+mark)
	// Running is the ack, before the agent's own check of the grant: wait
	// for the end (neverRan checks that nothing ran meanwhile).
	end := cluster.WaitJob(t, c, j.Id, 20*time.Second, imsv1.JobState_JOB_STATE_REFUSED, imsv1.JobState_JOB_STATE_FAILED, imsv1.JobState_JOB_STATE_SUCCEEDED)
	if end.State != imsv1.JobState_JOB_STATE_REFUSED || !strings.Contains(end.Error, "this install has none") {
		t.Fatalf("a job under a grant imsd minted: %v %q", end.State, end.Error)
	}
	neverRan(t, c, acme, end, mark)
}

// adHocScript opens the console's action picker (`a`), picks the ad-hoc
// script, last after the app's actions, and types script.
func adHocScript(term *cluster.Terminal, script string) {
	term.Keys("a")
	term.WaitText("ad-hoc script…")
	term.Keys("G")
	term.Keys("Enter")
	term.WaitText("script:")
	term.Type(script)
	term.Keys("Enter")
}
