package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
)

// With --job-log-retention, imsd's pruner removes the log of a job that
// ended longer ago than that, leaves the job's marker line and result,
// and counts what it removed in /metrics.
func TestJobLogRetentionPrunes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		JobLogRetention: time.Hour, JobLogPruneInterval: 10 * time.Millisecond, JobLogMaxLines: 2000})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	st := s.Store()
	then := time.Now().Add(-3 * time.Hour)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateApp(ctx, store.App{ID: "app_1", Name: "shop", CreatedAt: then}))
	must(st.CreateInstall(ctx, store.Install{ID: "ins_1", AppID: "app_1", Name: "acme", CreatedAt: then},
		store.EnrollmentToken{Hash: "h1", ExpiresAt: then.Add(time.Hour), CreatedAt: then}))
	a, err := st.Enroll(ctx, "h1", store.Agent{ID: "agt_1", PublicKey: make([]byte, 32), Hostname: "h", Version: "v"}, then)
	must(err)
	run := func(id string, ended time.Time, n int) {
		t.Helper()
		must(st.EnqueueJob(ctx, store.Job{ID: id, InstallID: "ins_1", ComponentType: "action", Operation: "apply",
			Config: []byte(`{}`), MaxAttempts: 1, Timeout: time.Hour, CreatedAt: ended.Add(-time.Minute), CreatedBy: "t"}))
		jobs, err := st.ClaimJobs(ctx, "ins_1", store.Writer{AgentID: a.ID}, 1, ended.Add(time.Hour), ended.Add(-time.Minute))
		must(err)
		w := store.Writer{AgentID: a.ID, FencingToken: jobs[0].FencingToken}
		var ls []store.LogLine
		for i := range n {
			ls = append(ls, store.LogLine{Seq: int64(i + 1), Time: ended, Stream: 1, Text: fmt.Sprintf("line %d", i+1)})
		}
		must(st.AppendLogs(ctx, id, w, ls))
		_, err = st.FinishJob(ctx, id, w, store.Result{State: store.JobSucceeded}, ended)
		must(err)
	}
	run("job_old", time.Now().Add(-2*time.Hour), 1500) // two of the pruner's batches
	run("job_new", time.Now(), 10)

	deadline := time.Now().Add(10 * time.Second)
	var metrics string
	for {
		r, err := http.Get("http://" + s.Addr() + "/metrics")
		must(err)
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		metrics = string(b)
		if strings.Contains(metrics, "\nbyoc_job_logs_pruned_total 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job's log pruned after 10s:\n%s", grepLines(metrics, "byoc_job_log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{"\nbyoc_job_log_lines_pruned_total 1500\n", "\nbyoc_job_log_lines_dropped_total 0\n"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", strings.TrimSpace(want), grepLines(metrics, "byoc_job_log"))
		}
	}
	old, err := st.ListLogs(ctx, "job_old", 0, 0, 0)
	must(err)
	if len(old) != 1 || !strings.HasPrefix(old[0].Text, store.PrunedMarkerPrefix) {
		t.Errorf("job_old's log = %+v, want only the line saying it was pruned", old)
	}
	if j, err := st.GetJob(ctx, "job_old"); err != nil || j.State != store.JobSucceeded {
		t.Errorf("job_old = %+v, %v: want it kept, succeeded", j, err)
	}
	if fresh, err := st.ListLogs(ctx, "job_new", 0, 0, 0); err != nil || len(fresh) != 10 {
		t.Errorf("job_new's log: %d lines, %v; want its 10", len(fresh), err)
	}
}

func TestJobLogConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{JobLogMaxLines: -1}, "--job-log-max-lines -1: want at least 1"},
		{Config{JobLogMaxBytes: -5}, "--job-log-max-bytes -5: want at least 1"},
		{Config{JobLogRetention: -time.Hour}, "--job-log-retention -1h0m0s: want a positive duration"},
	} {
		tc.cfg.DataDir = t.TempDir()
		if err := tc.cfg.defaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// The lines left out of an imported results file's job log (held to a
// live log batch's bounds, operatorapi's importedLog) count in
// byoc_job_log_lines_dropped_total, with those the job log cap drops
// from it, once the import is recorded.
func TestJobLogLinesLeftOutOfAnImportCounted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler), JobLogMaxLines: 2})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	st := s.Store()
	then := time.Now().Add(-time.Hour)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateApp(ctx, store.App{ID: "app_1", Name: "shop", CreatedAt: then}))
	must(st.CreateInstall(ctx, store.Install{ID: "ins_1", AppID: "app_1", Name: "acme", CreatedAt: then},
		store.EnrollmentToken{Hash: "h1", ExpiresAt: then.Add(time.Hour), CreatedAt: then}))
	a, err := st.Enroll(ctx, "h1", store.Agent{ID: "agt_1", PublicKey: make([]byte, 32), Hostname: "h", Version: "v"}, then)
	must(err)
	var ls []store.LogLine
	for i := range 3 {
		ls = append(ls, store.LogLine{Seq: int64(i + 1), Time: then, Stream: 1, Text: fmt.Sprintf("line %d", i+1)})
	}
	// What the import records: a job with 3 lines (the cap of 2 drops
	// one) and 1,500 more left out before the store.
	must(st.RecordOfflineWorkflow(ctx, store.OfflineWorkflow{
		Workflow: store.Workflow{ID: "wf_1", InstallID: "ins_1", Kind: "provision", AppRevision: 1, Parallelism: 1, CreatedAt: then, CreatedBy: "bundle b"},
		Steps:    []store.Step{{Name: "web", Component: "web", ComponentType: "action", Operation: "apply", Config: []byte(`{}`), Timeout: time.Minute}},
		AgentID:  a.ID,
		Ran: []store.OfflineStep{{Name: "web", Job: store.Job{ID: "job_1", InstallID: "ins_1", ComponentType: "action", Component: "web", Operation: "apply",
			Config: []byte(`{}`), MaxAttempts: 1, Timeout: time.Minute, CreatedAt: then, CreatedBy: "bundle b"},
			Result: store.Result{State: store.JobFailed}, Logs: ls, LeftOut: 1500, Started: then, Ended: then, StepState: store.StepFailed}},
		State: store.WorkflowFailed, InstallState: store.InstallFailed,
		Audit: store.AuditEvent{Chain: "ins_1", At: then, Kind: "bundle.results_imported", Actor: "imsd", Subject: "bundle:b"},
		Now:   then,
	}))
	r, err := http.Get("http://" + s.Addr() + "/metrics")
	must(err)
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if want := "\nbyoc_job_log_lines_dropped_total 1501\n"; !strings.Contains(string(b), want) {
		t.Errorf("/metrics lacks %q:\n%s", strings.TrimSpace(want), grepLines(string(b), "byoc_job_log"))
	}
}
