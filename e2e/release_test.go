package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// releaseApp is one action component; from revision 2 on it fails on an
// install whose input fail is "yes".
func releaseApp(rev int) map[string]string {
	script := "echo v1"
	if rev > 1 {
		script = fmt.Sprintf(`echo v%d; test "{{ .inputs.fail }}" != yes`, rev)
	}
	return map[string]string{
		"app.toml":            "name = \"fleet\"\n",
		"inputs.toml":         "[[input]]\nname = \"fail\"\ndefault = \"no\"\n",
		"components/web.toml": "type = \"action\"\n[config]\nsteps = [{ name = \"web\", script = '" + script + "' }]\n",
	}
}

// The release test: a revision rolls over 20 real agents in
// three waves with a canary; two installs of the second wave fail, which
// crosses the 5 % threshold and halts the release with the third wave
// untouched; once their failure is fixed a retry finishes it; a rollback
// takes every install back to the revision before.
func TestReleaseWavesHaltRetryRollback(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	opts.ReleaseInterval = 100 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	c := ims.Admin()
	ctx := context.Background()
	cli := cluster.NewCLI(t, ims)
	p := cli.PushApp(releaseApp(1))

	const n = 20
	start := time.Now()
	names := make([]string, n)
	agents := make([]*cluster.AgentProc, n)
	var wg sync.WaitGroup
	for i := range n {
		names[i] = fmt.Sprintf("shop-%02d", i)
		inputs := map[string]string{}
		if i == 4 || i == 5 { // both in the second wave
			inputs["fail"] = "yes"
		}
		res, err := c.CreateInstall(ctx, connect.NewRequest(&imsv1.CreateInstallRequest{App: "fleet", Name: names[i], Inputs: inputs}))
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		agents[i] = cluster.StartAgent(t, ims.URL(), res.Msg.GetEnrollmentToken().GetToken(), dir)
		wg.Go(func() { cli.Run(0, "install", "provision", names[i], "--wait") })
	}
	wg.Wait()
	t.Cleanup(func() { stopAll(agents) }) // runs first: all at once, not one after the other
	t.Logf("%s: 20 installs provisioned", time.Since(start))

	cluster.WriteApp(t, p.Dir, releaseApp(2))
	cli.Run(0, "app", "push", p.Dir, "--no-deploy")
	out := cli.Run(0, "release", "create", "fleet", "--revision", "2", "--waves", "canary:2,50%,100%", "--max-failures", "5%", "-o", "json")
	id := jsonField(t, out, "id")
	// 5 % of 20 tolerates one failure; the second halts the release.
	stdout, _, code := cli.Exec("release", "get", id, "--wait")
	if code != 4 || !strings.Contains(stdout, "halted: 2 installs failed, more than the 1 tolerated") {
		t.Fatalf("release get --wait exited %d, want 4 (halted):\n%s", code, stdout)
	}
	t.Logf("%s: halted", time.Since(start))
	r := getRelease(t, c, id)
	for _, in := range r.GetInstalls() {
		want := "succeeded"
		switch {
		case in.GetInstallName() == "shop-04" || in.GetInstallName() == "shop-05":
			want = "failed"
		case in.GetWave() == 2:
			want = "pending" // untouched
		}
		if in.GetState() != want {
			t.Errorf("install %s (wave %d) is %s, want %s", in.GetInstallName(), in.GetWave()+1, in.GetState(), want)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if out := cli.Run(0, "release", "get", id); !strings.Contains(out, "shop-04") || !strings.Contains(out, "web: ") {
		t.Errorf("release get does not show the failures and why:\n%s", out)
	}

	// Fixed: the two installs no longer fail; a retry finishes the release.
	for _, name := range []string{"shop-04", "shop-05"} {
		cli.Run(0, "install", "update", name, "--input", "fail=no", "--no-deploy")
	}
	stdout, _, code = cli.Exec("release", "retry", id, "--reason", "fixed the inputs", "--wait")
	if code != 0 || !strings.Contains(stdout, "Release "+id+" succeeded: 20/20 done") {
		t.Fatalf("release retry --wait exited %d:\n%s", code, stdout)
	}
	t.Logf("%s: retried to the end", time.Since(start))
	for _, name := range names {
		in, err := c.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: name}))
		if err != nil {
			t.Fatal(err)
		}
		if got := in.Msg.GetInstall().GetAppRevision(); got != 2 {
			t.Errorf("install %s at revision %d, want 2", name, got)
		}
	}
	// Every job of the release names it, in the job and its audit records.
	jobs, err := c.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{Install: "shop-04"}))
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, j := range jobs.Msg.GetJobs() {
		if j.GetReleaseId() == id {
			named++
		}
	}
	if named != 2 {
		t.Errorf("%d jobs of shop-04 name the release, want 2 (the failed one and the retry)", named)
	}
	audit := cli.Run(0, "audit", "list", "--install", "shop-04", "-o", "json")
	if !strings.Contains(audit, `\"release\":\"`+id+`\"`) {
		t.Errorf("the audit records of shop-04 do not name the release:\n%s", audit)
	}
	vendor := cli.Run(0, "audit", "list", "--vendor", "-o", "json")
	for _, kind := range []string{"release.created", "release.wave_started", "release.halted", "release.retried", "release.ended"} {
		if !strings.Contains(vendor, kind) {
			t.Errorf("no %s audit record", kind)
		}
	}

	// Roll back: every install back at revision 1, the last wave first.
	out = cli.Run(0, "release", "rollback", id, "--reason", "checkout errors", "-o", "json")
	back := jsonField(t, out, "id")
	stdout, _, code = cli.Exec("release", "get", back, "--wait")
	if code != 0 {
		t.Fatalf("rollback exited %d:\n%s", code, stdout)
	}
	t.Logf("%s: rolled back", time.Since(start))
	if first := strings.SplitN(stdout, "\n", 2)[0]; !strings.Contains(first, "undo wave 3") {
		t.Errorf("the rollback's first wave is %q, want the release's last", first)
	}
	for _, name := range names {
		in, err := c.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: name}))
		if err != nil {
			t.Fatal(err)
		}
		if got := in.Msg.GetInstall().GetAppRevision(); got != 1 {
			t.Errorf("install %s at revision %d after the rollback, want 1", name, got)
		}
	}
	if r := getRelease(t, c, id); r.GetRolledBackBy() != back {
		t.Errorf("release %s rolled back by %q, want %s", id, r.GetRolledBackBy(), back)
	}
}

func getRelease(t *testing.T, c interface {
	GetRelease(context.Context, *connect.Request[imsv1.GetReleaseRequest]) (*connect.Response[imsv1.GetReleaseResponse], error)
}, id string) *imsv1.Release {
	t.Helper()
	res, err := c.GetRelease(context.Background(), connect.NewRequest(&imsv1.GetReleaseRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetRelease()
}

// jsonField reads one string field of a JSON object a command printed.
func jsonField(t *testing.T, out, field string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not a JSON object (%v):\n%s", err, out)
	}
	s, _ := m[field].(string)
	if s == "" {
		t.Fatalf("no %s in:\n%s", field, out)
	}
	return s
}

// stopAll stops agents together.
func stopAll(agents []*cluster.AgentProc) {
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Go(a.Stop)
	}
	wg.Wait()
}

// TestConsoleReleases drives the real byoc console in tmux against a
// release halted by its canary's failure: :releases lists it, enter shows
// its waves and the failed install with why, r asks and y resumes it,
// after which the second wave runs.
func TestConsoleReleases(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	opts.ReleaseInterval = 100 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	c := ims.Admin()
	cli := cluster.NewCLI(t, ims)
	p := cli.PushApp(releaseApp(1))
	for i, name := range []string{"acme", "beta"} {
		inputs := map[string]string{}
		if i == 0 {
			inputs["fail"] = "yes"
		}
		res, err := c.CreateInstall(context.Background(), connect.NewRequest(&imsv1.CreateInstallRequest{App: "fleet", Name: name, Inputs: inputs}))
		if err != nil {
			t.Fatal(err)
		}
		cluster.StartAgent(t, ims.URL(), res.Msg.GetEnrollmentToken().GetToken(), t.TempDir())
		cli.Run(0, "install", "provision", name, "--wait")
	}
	cluster.WriteApp(t, p.Dir, releaseApp(2))
	cli.Run(0, "app", "push", p.Dir, "--no-deploy")
	id := jsonField(t, cli.Run(0, "release", "create", "fleet", "--revision", "2", "--waves", "canary:1,100%", "-o", "json"), "id")
	if _, _, code := cli.Exec("release", "get", id, "--wait"); code != 4 {
		t.Fatalf("release get --wait exited %d, want 4 (halted)", code)
	}

	term := cluster.StartTerminal(t, 140, 32, []string{"BYOC_CONFIG=" + cli.Config}, filepath.Join(cluster.Binaries(t), "byoc"))
	term.WaitFor("acme online", func(s string) bool { return lineWith(s, "acme", "online") })
	term.Keys(":")
	term.Type("releases")
	term.Keys("Enter")
	term.WaitFor("the release", func(s string) bool { return lineWith(s, id[:12], "fleet", "halted", "1/2 canary") })
	term.Keys("Enter")
	term.WaitFor("waves and the failure", func(s string) bool {
		return lineWith(s, "1 canary", "0/1") && lineWith(s, "acme", "failed", "web: ")
	})
	term.Keys("r")
	term.WaitText("Confirm: resume release " + id)
	term.Keys("y")
	term.WaitText("release " + id + " resumed")
	term.WaitFor("the second wave done", func(s string) bool { return lineWith(s, "2 wave 2", "1/1") })
	if r := getRelease(t, c, id); r.GetState() != imsv1.ReleaseState_RELEASE_STATE_FAILED || r.GetFailuresAccepted() != 1 {
		t.Errorf("release %s, %d failures accepted; want failed (acme did not succeed) with 1 accepted", r.GetState(), r.GetFailuresAccepted())
	}
}

// A release that respects windows, with real agents and imsd's clock
// injected (no sleeps): an install outside the vendor's window
// (installs/b.toml) and one outside the customer's (agentd window set)
// wait, saying whose window and when it opens, while the rest deploy;
// each is deployed once imsd's clock reaches its window, the customer's
// also by the agent's own clock; the release then succeeds.
func TestReleaseWaitsForWindows(t *testing.T) {
	skipShort(t)
	var offset atomic.Int64 // imsd's clock, ahead of the real one
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	opts := fast
	opts.Now, opts.ReleaseNow = now, now
	opts.WorkflowInterval = 200 * time.Millisecond
	opts.ReleaseInterval = 100 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	c := ims.Admin()
	ctx := context.Background()
	cli := cluster.NewCLI(t, ims)
	vendor := dailyWindow(6*time.Hour, 2*time.Hour)  // [6h, 8h) from now
	customer := dailyWindow(-time.Hour, 2*time.Hour) // [-1h, 1h) from now, daily
	files := releaseApp(1)
	files["installs/b.toml"] = fmt.Sprintf("window = %q\n", vendor)
	p := cli.PushApp(files)
	cluster.StartAgent(t, ims.URL(), p.EnrollToken(t), t.TempDir())
	stateDirs := map[string]string{}
	for _, name := range []string{"a", "c"} {
		res, err := c.CreateInstall(ctx, connect.NewRequest(&imsv1.CreateInstallRequest{App: "fleet", Name: name}))
		if err != nil {
			t.Fatal(err)
		}
		stateDirs[name] = t.TempDir()
		cluster.StartAgent(t, ims.URL(), res.Msg.GetEnrollmentToken().GetToken(), stateDirs[name])
	}
	for _, name := range []string{"a", "b", "c"} {
		cli.Run(0, "install", "provision", name, "--wait")
	}
	if out, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "window", "--state-dir", stateDirs["c"], "set", customer).CombinedOutput(); err != nil {
		t.Fatalf("agentd window set: %v\n%s", err, out)
	}
	cluster.Eventually(t, 30*time.Second, "imsd to learn the customer's window", func() bool {
		r, err := c.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "c"}))
		return err == nil && len(r.Msg.Install.GetAgent().GetPermissions().GetWindows()) == 1
	})
	cluster.WriteApp(t, p.Dir, releaseApp(2))
	cli.Run(0, "app", "push", p.Dir, "--no-deploy")

	// imsd's clock 3 h ahead: a is open; b's vendor window opens in 3 h,
	// c's customer window (by imsd's clock) tomorrow.
	offset.Store(int64(3 * time.Hour))
	id := jsonField(t, cli.Run(0, "release", "create", "fleet", "--revision", "2", "--respect-windows", "-o", "json"), "id")
	state := func() map[string]*imsv1.ReleaseInstall {
		out := map[string]*imsv1.ReleaseInstall{}
		for _, in := range getRelease(t, c, id).GetInstalls() {
			out[in.GetInstallName()] = in
		}
		return out
	}
	cluster.Eventually(t, 60*time.Second, "a deployed, b and c waiting", func() bool {
		s := state()
		return s["a"].GetState() == "succeeded" && s["b"].GetState() == "waiting" && s["c"].GetState() == "waiting"
	})
	s := state()
	if why := s["b"].GetError(); !strings.Contains(why, "vendor's window "+vendor) {
		t.Errorf("b waits because %q, want the vendor's window", why)
	}
	if why := s["c"].GetError(); !strings.Contains(why, "customer's window "+customer) {
		t.Errorf("c waits because %q, want the customer's window", why)
	}
	if opens := s["b"].GetWindowOpenTime().AsTime(); opens.Sub(now()) < 2*time.Hour || opens.Sub(now()) > 4*time.Hour {
		t.Errorf("b's window opens at %s, %s from imsd's now; want about 3 h", opens, opens.Sub(now()))
	}
	if out := cli.Run(0, "release", "get", id); !strings.Contains(out, "window opens") {
		t.Errorf("release get does not say when the window opens:\n%s", out)
	}

	// In b's window: b deploys; c still waits.
	offset.Store(int64(6*time.Hour + 30*time.Minute))
	cluster.Eventually(t, 60*time.Second, "b deployed", func() bool { return state()["b"].GetState() == "succeeded" })
	if st := state()["c"].GetState(); st != "waiting" {
		t.Fatalf("c is %s outside the customer's window, want waiting", st)
	}
	// A day on, imsd's clock is in c's window (and the agent's, by its own
	// clock, has been all along): c deploys and the release succeeds.
	offset.Store(int64(24 * time.Hour))
	if _, _, code := cli.Exec("release", "get", id, "--wait"); code != 0 {
		t.Fatalf("release get --wait exited %d: %v", code, state())
	}
	jobs, err := c.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{Install: "c"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Msg.GetJobs() {
		if j.GetReleaseId() == id && (!j.GetWindowBound() || j.GetState() != imsv1.JobState_JOB_STATE_SUCCEEDED) {
			t.Errorf("c's release job %s: window-bound %v, %s", j.GetId(), j.GetWindowBound(), j.GetState())
		}
	}
}
