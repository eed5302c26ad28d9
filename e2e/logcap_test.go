package e2e

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// An action that logs past imsd's cap (here --job-log-max-lines 50) has
// its lines cut at the cap with one marker line in their place, which a
// follower sees; the agent's batches are all acknowledged, so the job
// ends with its result, and the next job runs.
func TestJobLogCapByFlag(t *testing.T) {
	skipShort(t)
	p := cluster.StartIMSProcess(t, nil, "--log-level", "warn", "--lease", "3s", "--heartbeat", "500ms", "--job-log-max-lines", "50")
	c := p.Client()
	_, token := cluster.NewInstall(t, c, "shop", "acme")
	cluster.StartAgent(t, p.URL(), token, filepath.Join(t.TempDir(), "agent"))
	cluster.Eventually(t, 30*time.Second, "agent of acme to connect", func() bool {
		r, err := c.GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "acme"}))
		return err == nil && r.Msg.Install.Agent != nil && r.Msg.Install.Agent.Connected
	})

	job := enqueue(t, c, "acme", `i=0; while [ $i -lt 5000 ]; do i=$((i+1)); echo "line $i"; done; echo "ok=yes" >> "$BYOC_OUTPUTS"`, 120)
	followed, end := follow(t, c, job.Id)
	if end.State != imsv1.JobState_JOB_STATE_SUCCEEDED || end.Outputs["ok"] != "yes" {
		t.Fatalf("the flooding job ended %v %v: %s", end.State, end.Outputs, end.Error)
	}
	var markers []*imsv1.LogLine
	for _, l := range followed {
		if strings.HasPrefix(l.Text, "[WARN]  imsd: dropped the rest of this attempt's log") {
			markers = append(markers, l)
		}
	}
	if len(markers) != 1 || len(followed) != 51 || markers[0].Stream != imsv1.LogStream_LOG_STREAM_SYSTEM {
		t.Fatalf("followed %d lines with markers %v; want the 50 of the cap and one system marker", len(followed), markers)
	}

	// Read again once the job has ended, the marker counts every line
	// dropped.
	st, err := c.StreamJobLogs(context.Background(), connect.NewRequest(&imsv1.StreamJobLogsRequest{JobId: job.Id}))
	if err != nil {
		t.Fatal(err)
	}
	var all []*imsv1.LogLine
	for st.Receive() {
		all = append(all, st.Msg().Lines...)
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	last := all[len(all)-1].Text
	m := regexp.MustCompile(`: (\d+) lines \(.*\) dropped, counted until the job ends\. imsd keeps at most 50 lines .*imsd --job-log-max-lines`).FindStringSubmatch(last)
	if len(all) != 51 || m == nil {
		t.Fatalf("%d lines read, the last %q; want 51, the last the marker naming the cap and its flag", len(all), last)
	}
	if n, _ := strconv.Atoi(m[1]); n < 4950 {
		t.Errorf("the marker counts %d lines dropped, want at least 4950 (the script's 5000 less the 50 kept)", n)
	}

	// The command line shows it, at --level warn too (it is a warning).
	cli := cluster.NewCLIWith(t, filepath.Join(t.TempDir(), "byoc.json"), p.URL(), p.Token)
	out := cli.Run(0, "job", "logs", job.Id, "--follow")
	_, after, found := strings.Cut(out, "\n==> [WARN]  imsd: dropped the rest of this attempt's log: ")
	if _, end, _ := strings.Cut(after, "\n"); !found || !strings.HasPrefix(end, "==> job "+job.Id+" succeeded") || strings.Count(end, "\n") > 1 {
		t.Errorf("byoc job logs --follow: want the lines kept, the marker, then the job's end:\n%s", out)
	}
	out = cli.Run(0, "job", "logs", job.Id, "--level", "warn")
	if strings.TrimSpace(out) != "==> "+last {
		t.Errorf("byoc job logs --level warn = %q, want only the marker", out)
	}

	next := enqueue(t, c, "acme", `echo "after=yes" >> "$BYOC_OUTPUTS"`, 60)
	if _, end = follow(t, c, next.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED || end.Outputs["after"] != "yes" {
		t.Fatalf("the next job ended %v %v: %s", end.State, end.Outputs, end.Error)
	}
}
