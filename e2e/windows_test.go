package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// dailyWindow is a daily UTC window from `from` after now for d.
func dailyWindow(from, d time.Duration) string {
	start := time.Now().UTC().Add(from).Truncate(time.Minute)
	end := start.Add(d)
	return fmt.Sprintf("daily %s-%s UTC", start.Format("15:04"), end.Format("15:04"))
}

// Maintenance windows end to end, with a real agent and imsd on an
// injected clock (no sleeps): imsd holds a window-bound job while the
// vendor's window (installs/acme.toml) or the customer's (agentd window
// set) is closed, and hands it out at the first heartbeat after both
// open; the agent refuses one outside the customer's window by its own
// clock even when imsd (its clock ahead) sends it, says why and when the
// window opens, and records the refusal in its journal.
func TestMaintenanceWindows(t *testing.T) {
	skipShort(t)
	var offset atomic.Int64 // imsd's clock, ahead of the real one
	opts := fast
	opts.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	vendor := dailyWindow(6*time.Hour, 2*time.Hour) // [6h, 8h) from now
	customer := dailyWindow(6*time.Hour, time.Hour) // [6h, 7h) from now
	p := cli.PushApp(map[string]string{
		"app.toml":           "name = \"shop\"\n",
		"installs/acme.toml": fmt.Sprintf("window = %q\n", vendor),
	})
	stateDir := filepath.Join(t.TempDir(), "agent")
	cluster.StartAgent(t, ims.URL(), p.EnrollToken(t), stateDir)
	waitConnected(t, ims, "acme")
	c := ims.Admin()
	ctx := context.Background()
	enqueueBound := func(script string) *imsv1.Job {
		t.Helper()
		r, err := c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{
			Install: "acme", ComponentType: "action", Operation: "apply", Config: actionConfig(t, script), TimeoutSeconds: 60, WindowBound: true,
		}))
		if err != nil {
			t.Fatal(err)
		}
		if !r.Msg.Job.WindowBound {
			t.Fatal("the enqueued job is not window-bound")
		}
		return r.Msg.Job
	}
	state := func(id string) *imsv1.Job {
		t.Helper()
		r, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: id}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg.Job
	}
	// heldWhileOthersRun enqueues an ordinary job after the held one and
	// waits for it: claims ran and passed the window-bound job over.
	heldWhileOthersRun := func(held *imsv1.Job, why string) {
		t.Helper()
		if _, j := follow(t, c, enqueue(t, c, "acme", "echo ordinary", 60).Id); j.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("an ordinary job ended %s", j.State)
		}
		if j := state(held.Id); j.State != imsv1.JobState_JOB_STATE_QUEUED {
			t.Fatalf("%s: the window-bound job is %s, want held (queued)", why, j.State)
		}
	}

	// 1. The vendor's window is closed by imsd's clock: held.
	a := enqueueBound("echo deployed-in-window")
	heldWhileOthersRun(a, "vendor's window closed")

	// 2. The customer sets a window on the agent; imsd learns it.
	out, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "window", "--state-dir", stateDir, "set", customer).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Now:        closed: jobs of a release are refused; next opens") {
		t.Fatalf("agentd window set: %v\n%s", err, out)
	}
	cluster.Eventually(t, 30*time.Second, "imsd to learn the customer's window", func() bool {
		r, err := c.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "acme"}))
		return err == nil && len(r.Msg.Install.GetAgent().GetPermissions().GetWindows()) == 1
	})
	get := cli.Run(0, "install", "get", "acme")
	for _, want := range []string{"Windows (vendor):    " + vendor, "Windows (customer):  " + customer, "Next window:"} {
		if !strings.Contains(get, want) {
			t.Fatalf("install get lacks %q:\n%s", want, get)
		}
	}

	// 3. imsd's clock in the vendor's window but past the customer's: held.
	offset.Store(int64(7*time.Hour + 30*time.Minute))
	heldWhileOthersRun(a, "customer's window closed")

	// 4. imsd's clock in both windows: imsd sends it at the next heartbeat,
	// and the agent, whose own clock is outside the customer's window,
	// refuses it and says when the window opens.
	offset.Store(int64(6*time.Hour + 30*time.Minute))
	cluster.Eventually(t, 30*time.Second, "the held job to end", func() bool {
		return state(a.Id).EndTime != nil
	})
	got := state(a.Id)
	if got.State != imsv1.JobState_JOB_STATE_REFUSED ||
		!strings.Contains(got.Error, "refused: outside the customer's maintenance window ("+customer+"); it opens next at ") {
		t.Fatalf("job outside the customer's window: %s %q", got.State, got.Error)
	}
	journal, err := os.ReadFile(filepath.Join(stateDir, "audit", "agent.jsonl"))
	if err != nil || !strings.Contains(string(journal), `"job.refused_window"`) || !strings.Contains(string(journal), a.Id) {
		t.Fatalf("the agent's journal has no record of the refusal (%v)", err)
	}

	// 5. The customer lifts the window: a window-bound job runs at once
	// (imsd's clock is in the vendor's window).
	if out, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "window", "--state-dir", stateDir, "clear").CombinedOutput(); err != nil {
		t.Fatalf("agentd window clear: %v\n%s", err, out)
	}
	cluster.Eventually(t, 30*time.Second, "imsd to learn the window is gone", func() bool {
		r, err := c.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "acme"}))
		return err == nil && r.Msg.Install.GetAgent().GetPermissions() != nil && len(r.Msg.Install.GetAgent().GetPermissions().GetWindows()) == 0
	})
	lines, j := follow(t, c, enqueueBound("echo deployed-in-window").Id)
	if j.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("window-bound job in the vendor's window, no customer window: %s %q", j.State, j.Error)
	}
	var text []string
	for _, l := range lines {
		text = append(text, l.Text)
	}
	if !strings.Contains(strings.Join(text, "\n"), "deployed-in-window") {
		t.Fatalf("job output:\n%s", strings.Join(text, "\n"))
	}
}
