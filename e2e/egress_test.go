package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/ledger"
	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

var egressApp = map[string]string{
	"app.toml": "name = \"ledger\"\n",
	"components/a.toml": `type = "action"
[config]
steps = [{ name = "a", script = "echo hello-from-a; echo url=db-a >> $BYOC_OUTPUTS" }]
`,
	"components/b.toml": `type = "action"
dependencies = ["a"]
[config]
steps = [{ name = "b", script = "echo hello-from-b" }]
`,
	"installs/acme.toml": "",
}

// The egress ledger test: a provision through real imsd and a
// real agentd, then agentd egress list shows every message of it (the
// enrolment, the hello, heartbeats, and each job's ack, logs and result)
// with its size and hash, the log lines and outputs in full as the
// customer asked, and agentd egress stats sums them.
func TestEgressLedgerListsEveryMessageOfAProvision(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	pushed := cli.PushApp(egressApp)
	state := t.TempDir()
	cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), state, "--egress-ledger-content", "logs,outputs")
	if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded: 2/2 done") {
		t.Fatalf("provision:\n%s", out)
	}
	jobs := installJobs(t, ims.Admin())
	if len(jobs) != 2 {
		t.Fatalf("%d jobs, want 2", len(jobs))
	}
	agentd := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), append([]string{"egress", "--state-dir", state}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("agentd egress %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	var entries []ledger.Entry
	have := func(kind, job string) bool {
		for _, e := range entries {
			if e.Kind == kind && e.Job == job {
				return true
			}
		}
		return false
	}
	// The ledger is written off the stream, in batches: poll.
	cluster.Eventually(t, 20*time.Second, "every message of the provision in the ledger", func() bool {
		entries = nil
		for _, line := range strings.Split(strings.TrimSpace(agentd("list", "--json")), "\n") {
			var e ledger.Entry
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("agentd egress list --json: %q: %v", line, err)
			}
			entries = append(entries, e)
		}
		for _, j := range jobs {
			if !have("ack", j.Id) || !have("logs", j.Id) || !have("result", j.Id) {
				return false
			}
		}
		return have("enroll", "") && have("hello", "") && have("heartbeat", "")
	})
	var sum int64
	aLine := false // a's log lines are sent in one batch or more
	for _, e := range entries {
		if e.Size <= 0 || len(e.SHA256) != 64 || e.Time.IsZero() {
			t.Errorf("entry without a size, hash or time: %+v", e)
		}
		if e.Kind != "enroll" && e.Install != jobs[0].InstallId {
			t.Errorf("entry of install %q, want %q: %+v", e.Install, jobs[0].InstallId, e)
		}
		if e.Kind == "logs" && e.Job == jobComponent(jobs, "a") && strings.Contains(string(e.Content), "hello-from-a") {
			aLine = true
		}
		if e.Kind == "logs" && len(e.Content) == 0 {
			t.Errorf("a logs entry without its lines (--egress-ledger-content logs): %+v", e)
		}
		if e.Kind == "result" && e.Job == jobComponent(jobs, "a") && !strings.Contains(string(e.Content), `"url":"db-a"`) {
			t.Errorf("a's result entry without its outputs (--egress-ledger-content outputs): %s", e.Content)
		}
		sum += int64(e.Size)
	}
	if !aLine {
		t.Error("no logs entry of a holds its line hello-from-a (--egress-ledger-content logs)")
	}
	// The table, and stats summing the same entries (the agent may have
	// sent more heartbeats since: stats reads the ledger again).
	list := agentd("list")
	if !strings.HasPrefix(list, "TIME") || !strings.Contains(list, "SHA256") || !strings.Contains(list, entries[0].SHA256) {
		t.Fatalf("agentd egress list:\n%s", list)
	}
	var stats struct {
		Kinds []struct {
			Kind     string `json:"kind"`
			Messages int    `json:"messages"`
			Bytes    int64  `json:"bytes"`
		} `json:"kinds"`
		Total struct {
			Messages int   `json:"messages"`
			Bytes    int64 `json:"bytes"`
		} `json:"total"`
	}
	if err := json.Unmarshal([]byte(agentd("stats", "--json")), &stats); err != nil {
		t.Fatal(err)
	}
	var kindSum int64
	var kindMsgs int
	results := 0
	for _, k := range stats.Kinds {
		kindSum += k.Bytes
		kindMsgs += k.Messages
		if k.Kind == "result" {
			results = k.Messages
		}
	}
	if stats.Total.Bytes < sum || stats.Total.Messages < len(entries) || kindSum != stats.Total.Bytes || kindMsgs != stats.Total.Messages || results != 2 {
		t.Fatalf("stats %+v: want totals summing the kinds, at least the %d entries (%d bytes) listed, and 2 results", stats, len(entries), sum)
	}
	if out := agentd("stats", "--since", "1ns"); !strings.Contains(out, "total") {
		t.Fatalf("agentd egress stats --since 1ns:\n%s", out)
	}
}

func jobComponent(jobs []*imsv1.Job, component string) string {
	for _, j := range jobs {
		if j.Component == component {
			return j.Id
		}
	}
	return ""
}
