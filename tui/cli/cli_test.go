package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// result is one run of the command line.
type result struct {
	code           int
	stdout, stderr string
}

// byoc runs the real command line with args and returns what it printed.
func byoc(tb testing.TB, args ...string) result {
	tb.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// mustRun runs args and fails the test unless they exit 0.
func mustRun(tb testing.TB, args ...string) result {
	tb.Helper()
	r := byoc(tb, args...)
	if r.code != 0 {
		tb.Fatalf("byoc %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// useConfig points BYOC_CONFIG at a fresh file in a fresh directory and
// returns its path.
func useConfig(tb testing.TB) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "byoc", "config.json")
	tb.Setenv(configEnv, path)
	return path
}

// setup starts a fake server and adds a current context for it.
func setup(tb testing.TB) (*fakeOperator, string) {
	tb.Helper()
	useConfig(tb)
	f := &fakeOperator{}
	url := newFakeServer(tb, f)
	mustRun(tb, "context", "add", "test", "--server", url, "--token", testToken, "--use")
	return f, url
}

func TestContextAddUseList(t *testing.T) {
	path := useConfig(t)
	mustRun(t, "context", "add", "prod", "--server", "https://ims.example.com", "--token", "byoc_op_prodsecret")
	mustRun(t, "context", "add", "dev", "--server", "http://127.0.0.1:8080", "--token", "byoc_op_devsecret")

	// The first context added becomes current.
	if r := mustRun(t, "context", "current"); r.stdout != "prod\n" {
		t.Errorf("context current = %q, want prod", r.stdout)
	}
	mustRun(t, "context", "use", "dev")

	r := mustRun(t, "context", "list")
	for _, secret := range []string{"prodsecret", "devsecret"} {
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("context list printed a token:\n%s", r.stdout)
		}
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("context list printed %d lines, want 3:\n%s", len(lines), r.stdout)
	}
	if !strings.HasPrefix(lines[2], "*") || !strings.Contains(lines[2], "dev") || strings.HasPrefix(lines[1], "*") {
		t.Errorf("context list does not mark dev as current:\n%s", r.stdout)
	}

	r = mustRun(t, "context", "list", "-o", "json")
	var views []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &views); err != nil {
		t.Fatalf("context list -o json: %v\n%s", err, r.stdout)
	}
	if len(views) != 2 || views[1]["name"] != "dev" || views[1]["current"] != true || views[0]["token"] != nil {
		t.Errorf("context list -o json = %v", views)
	}
	if strings.Contains(r.stdout, "secret") {
		t.Errorf("context list -o json printed a token:\n%s", r.stdout)
	}

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("config mode = %v, want 0600", fi.Mode().Perm())
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("config dir mode = %v, want 0700", di.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("config dir holds %d files, want only config.json (temp files left behind?)", len(entries))
	}

	// Removing the current context leaves none current.
	mustRun(t, "context", "remove", "dev")
	if r := byoc(t, "context", "current"); r.code != exitError {
		t.Errorf("context current with none current: exit %d, want 1", r.code)
	}
	if r := byoc(t, "context", "use", "nope"); r.code != exitError || !strings.Contains(r.stderr, `context "nope" not found`) || !strings.Contains(r.stderr, "prod") {
		t.Errorf("context use nope: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestContextAddTokenFromStdin(t *testing.T) {
	useConfig(t)
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"context", "add", "dev", "--server", "http://127.0.0.1:1", "--token", "-"},
		strings.NewReader("byoc_op_fromstdin\n"), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	path, _ := configPath(os.Getenv)
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Context("dev").Token; got != "byoc_op_fromstdin" {
		t.Errorf("token = %q", got)
	}
}

func TestWhoAmISendsToken(t *testing.T) {
	f, url := setup(t)
	r := mustRun(t, "whoami")
	if got := f.lastAuth(); got != "Bearer "+testToken {
		t.Errorf("Authorization = %q", got)
	}
	for _, want := range []string{url, "ci", "tok_1", "admin", "test"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("whoami output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, testToken) {
		t.Errorf("whoami printed the token:\n%s", r.stdout)
	}

	// --token overrides the context's token.
	r = byoc(t, "whoami", "--token", "byoc_op_wrong")
	if r.code != exitError || f.lastAuth() != "Bearer byoc_op_wrong" || !strings.Contains(r.stderr, "invalid API token") {
		t.Errorf("whoami --token wrong: exit %d, auth %q, stderr %q", r.code, f.lastAuth(), r.stderr)
	}
}

func TestServerFlagNeverSendsContextTokenElsewhere(t *testing.T) {
	f, _ := setup(t)
	other := &fakeOperator{}
	otherURL := newFakeServer(t, other)

	r := byoc(t, "--server", otherURL, "whoami")
	if r.code != exitUsage || !strings.Contains(r.stderr, "no token for "+otherURL) {
		t.Errorf("--server without --token: exit %d, stderr %q", r.code, r.stderr)
	}
	if other.lastAuth() != "" {
		t.Errorf("the other server got Authorization %q", other.lastAuth())
	}
	mustRun(t, "--server", otherURL, "--token", testToken, "whoami")
	if other.lastAuth() != "Bearer "+testToken {
		t.Errorf("other server got %q", other.lastAuth())
	}
	_ = f
}

// --server alone uses the token of a context for that server: the
// current one (however the URL is written), or another one; never one for
// a different server.
func TestServerFlagUsesTheTokenOfItsContext(t *testing.T) {
	f, url := setup(t)
	other := &fakeOperator{}
	otherURL := newFakeServer(t, other)
	mustRun(t, "context", "add", "other", "--server", otherURL, "--token", testToken)

	r := mustRun(t, "--server", otherURL, "whoami")
	if other.lastAuth() != "Bearer "+testToken || !strings.Contains(r.stdout, "other") {
		t.Errorf("--server of another context: Authorization %q\n%s", other.lastAuth(), r.stdout)
	}
	port := url[strings.LastIndex(url, ":")+1:]
	for _, u := range []string{url + "/", "HTTP://LOCALHOST:" + port, "http://localhost:" + port + "/"} {
		mustRun(t, "--server", u, "whoami")
		if f.lastAuth() != "Bearer "+testToken {
			t.Errorf("--server %s: Authorization %q, want the current context's token", u, f.lastAuth())
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"http://127.0.0.1:80", "http://localhost"},
		{"https://ims.example.com/", "https://IMS.example.com:443"},
	} {
		if !sameServer(tc.a, tc.b) {
			t.Errorf("sameServer(%q, %q) = false", tc.a, tc.b)
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8081"},
		{"http://ims.example.com", "https://ims.example.com"},
		{"https://ims.example.com", "https://ims.example.com.evil.com"},
		{"https://ims.example.com/a", "https://ims.example.com/b"},
		{"https://u:p@ims.example.com", "https://ims.example.com"},
	} {
		if sameServer(tc.a, tc.b) {
			t.Errorf("sameServer(%q, %q) = true", tc.a, tc.b)
		}
	}
}

func TestJSONOutput(t *testing.T) {
	setup(t)

	r := mustRun(t, "app", "list", "-o", "json")
	var apps []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &apps); err != nil {
		t.Fatalf("app list -o json: %v\n%s", err, r.stdout)
	}
	if len(apps) != 2 || apps[0]["name"] != "shop" || apps[1]["description"] != "" {
		t.Errorf("app list -o json = %v", apps)
	}

	r = mustRun(t, "app", "get", "shop", "--output", "json")
	var app map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &app); err != nil {
		t.Fatalf("app get -o json: %v\n%s", err, r.stdout)
	}
	if app["id"] != "app_1" || app["createTime"] != "2025-01-02T03:04:05Z" {
		t.Errorf("app get -o json = %v", app)
	}
	// The same call prints the same bytes.
	if again := mustRun(t, "app", "get", "shop", "-o", "json"); again.stdout != r.stdout {
		t.Errorf("json output is not stable:\n%s\n%s", r.stdout, again.stdout)
	}

	r = mustRun(t, "job", "list", "-o", "json")
	var jobs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil {
		t.Fatalf("job list -o json: %v\n%s", err, r.stdout)
	}
	if len(jobs) != 2 || jobs[1]["state"] != "failed" || jobs[1]["exitCode"] != float64(4) || jobs[0]["exitCode"] != float64(0) {
		t.Errorf("job list -o json = %v", jobs)
	}
}

func TestTextTables(t *testing.T) {
	setup(t)
	r := mustRun(t, "app", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "ago") {
		t.Fatalf("app list:\n%s", r.stdout)
	}
	// Columns line up: ID starts at the same offset on every line.
	col := strings.Index(lines[0], "ID")
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l[col:], "app_") {
			t.Errorf("misaligned row %q (ID column at %d)", l, col)
		}
	}

	r = mustRun(t, "install", "get", "shop-acme")
	for _, want := range []string{"connected, last seen now", "region=eu-west-1, size=m", "agt_1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("install get lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestInstallCreate(t *testing.T) {
	f, url := setup(t)
	r := mustRun(t, "install", "create", "shop-acme", "--app", "shop", "--input", "region=eu-west-1", "--input", "note=a=b", "--token-ttl", "1h")
	want := "agentd --ims " + url + " --enroll-token byoc_enr_secret --state-dir ./agent-shop-acme"
	if !strings.Contains(r.stdout, want) {
		t.Errorf("install create output lacks %q:\n%s", want, r.stdout)
	}
	got := f.created[0]
	if got.GetApp() != "shop" || got.GetName() != "shop-acme" || got.GetEnrollmentTokenTtlSeconds() != 3600 ||
		got.GetInputs()["region"] != "eu-west-1" || got.GetInputs()["note"] != "a=b" {
		t.Errorf("server received %v", got)
	}

	for _, args := range [][]string{
		{"install", "create", "x", "--app", "shop", "--input", "novalue"},
		{"install", "create", "x"},
		{"install", "create", "x", "--app", "shop", "--token-ttl", "-1h"},
	} {
		if r := byoc(t, args...); r.code != exitUsage {
			t.Errorf("byoc %v: exit %d, want 2 (stderr %q)", args, r.code, r.stderr)
		}
	}
}

func TestActionRunBuildsConfig(t *testing.T) {
	f, _ := setup(t)
	r := mustRun(t, "action", "run", "shop-acme", "--timeout", "10m", "--max-attempts", "2", "--", "echo", "-n", "hi", "&&", "ls")
	if r.stdout != "job_1\n" {
		t.Errorf("stdout = %q, want the job id", r.stdout)
	}
	got := f.enqueued[0]
	if got.GetInstall() != "shop-acme" || got.GetComponentType() != "action" || got.GetOperation() != "apply" ||
		got.GetTimeoutSeconds() != 600 || got.GetMaxAttempts() != 2 {
		t.Errorf("server received %v", got)
	}
	cfg, _ := json.Marshal(got.GetConfig().AsMap())
	if want := `{"steps":[{"name":"run","script":"echo -n hi \u0026\u0026 ls"}]}`; string(cfg) != want {
		t.Errorf("config = %s, want %s", cfg, want)
	}

	for _, args := range [][]string{
		{"action", "run", "shop-acme"},
		{"action", "run", "--", "echo"},
		{"action", "run", "a", "b", "--"},
		{"action", "run", "a", "b", "a", "--", "echo"},
		{"action", "run", "a", "b", "--follow", "--", "echo"},
		{"action", "run", "shop-acme", "check", "extra"},
		{"action", "run", "shop-acme", "check", "--follow"},
		{"action", "run", "shop-acme", "--wait", "--", "echo"},
	} {
		if r := byoc(t, args...); r.code != exitUsage {
			t.Errorf("byoc %v: exit %d, want 2 (stderr %q)", args, r.code, r.stderr)
		}
	}
}

func TestActionRunOnSeveralInstalls(t *testing.T) {
	f, _ := setup(t)
	r := mustRun(t, "action", "run", "shop-acme", "shop-globex", "--timeout", "1m", "--", "uptime")
	if want := "JOB     INSTALL\njob_1   shop-acme\njob_2   shop-globex\n"; r.stdout != want {
		t.Errorf("stdout = %q, want %q", r.stdout, want)
	}
	if len(f.enqueued) != 2 || f.enqueued[0].GetInstall() != "shop-acme" || f.enqueued[1].GetInstall() != "shop-globex" ||
		f.enqueued[1].GetTimeoutSeconds() != 60 || f.enqueued[1].GetConfig().GetFields()["steps"] == nil {
		t.Errorf("server received %v", f.enqueued)
	}
	r = mustRun(t, "action", "run", "shop-acme", "shop-globex", "-o", "json", "--", "uptime")
	var jobs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil || len(jobs) != 2 || jobs[1]["installId"] != "ins_shop-globex" {
		t.Errorf("-o json = %s (%v)", r.stdout, err)
	}
}

func TestJobListFilters(t *testing.T) {
	f, _ := setup(t)
	r := mustRun(t, "job", "list", "--install", "shop-acme", "--state", "queued,Running", "--state", "timed-out", "--limit", "5")
	got := f.listed[0]
	wantStates := []imsv1.JobState{imsv1.JobState_JOB_STATE_QUEUED, imsv1.JobState_JOB_STATE_RUNNING, imsv1.JobState_JOB_STATE_TIMED_OUT}
	if got.GetInstall() != "shop-acme" || !slices.Equal(got.GetStates(), wantStates) || got.GetPageSize() != 5 {
		t.Errorf("server received %v", got)
	}
	if !strings.Contains(r.stdout, "running") || !strings.Contains(r.stdout, "1/3") {
		t.Errorf("job list:\n%s", r.stdout)
	}
	// A failed job is not tried again: its attempt is not "1/3" (issue 33, item 16).
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, "job_1 ") && (strings.Contains(line, "1/3") || !regexp.MustCompile(`failed\s+1\s`).MatchString(line)) {
			t.Errorf("a failed job's attempt: %q, want 1, not 1/3", line)
		}
	}
}

func TestJobGetShowsPendingReason(t *testing.T) {
	f, _ := setup(t)
	f.job = &imsv1.Job{Id: "job_1", State: imsv1.JobState_JOB_STATE_QUEUED, PendingReason: "the install's agent is not connected", MaxAttempts: 3, CreateTime: testTime}
	r := mustRun(t, "job", "get", "job_1")
	if !strings.Contains(r.stdout, "the install's agent is not connected") || !strings.Contains(r.stdout, "queued") {
		t.Errorf("job get:\n%s", r.stdout)
	}
}

// TestWorkflowGetJSONCarriesPlans: workflow get -o json adds to every
// step its plan job's planned changes, policy findings and, when the job
// cannot be read, why; the text output shows the same.
func TestWorkflowGetJSONCarriesPlans(t *testing.T) {
	f, _ := setup(t)
	f.workflow = &imsv1.Workflow{Id: "wf_1", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION, State: imsv1.WorkflowState_WORKFLOW_STATE_AWAITING_APPROVAL,
		Steps: []*imsv1.WorkflowStep{
			{Name: "db", Component: "db", ComponentType: "terraform", State: imsv1.StepState_STEP_STATE_PENDING, PlanJobId: "job_p1", PlanState: "planned", PlanDigest: "sha256:" + strings.Repeat("a", 64)},
			{Name: "api", Component: "api", ComponentType: "helm", State: imsv1.StepState_STEP_STATE_PENDING, PlanJobId: "job_p2", PlanState: "failed", PlanError: "denied by policy"},
			{Name: "gone", Component: "gone", ComponentType: "action", State: imsv1.StepState_STEP_STATE_PENDING, PlanJobId: "job_missing", PlanState: "planned"},
			{Name: "hook", ComponentType: "action", State: imsv1.StepState_STEP_STATE_PENDING},
		}}
	f.jobs = map[string]*imsv1.Job{
		"job_p1": {Id: "job_p1", PlannedChanges: []*imsv1.PlannedChange{{Address: "aws_s3_bucket.logs", Action: "create", Summary: "create bucket"}},
			PolicyFindings: []*imsv1.PolicyFinding{{Policy: "policies/tags.rego", Source: "vendor", Level: "warn", Message: "bucket lacks a cost tag"}}},
		"job_p2": {Id: "job_p2", PolicyFindings: []*imsv1.PolicyFinding{{Policy: "/etc/byoc/policy/public.rego", Source: "customer", Level: "deny", Message: "public service"}}},
	}
	r := mustRun(t, "workflow", "get", "wf_1", "-o", "json")
	var got struct {
		ID    string `json:"id"`
		Steps []struct {
			Name           string `json:"name"`
			PlanJobID      string `json:"planJobId"`
			PlannedChanges []struct {
				Address, Action string
			} `json:"plannedChanges"`
			PolicyFindings []struct {
				Policy, Source, Level, Message string
			} `json:"policyFindings"`
			PlanReadError *string `json:"planReadError"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("workflow get -o json: %v\n%s", err, r.stdout)
	}
	if got.ID != "wf_1" || len(got.Steps) != 4 {
		t.Fatalf("workflow get -o json:\n%s", r.stdout)
	}
	db, api, gone, hook := got.Steps[0], got.Steps[1], got.Steps[2], got.Steps[3]
	if db.Name != "db" || len(db.PlannedChanges) != 1 || db.PlannedChanges[0].Address != "aws_s3_bucket.logs" || db.PlannedChanges[0].Action != "create" ||
		len(db.PolicyFindings) != 1 || db.PolicyFindings[0].Level != "warn" || db.PlanReadError == nil || *db.PlanReadError != "" {
		t.Errorf("step db: %+v\n%s", db, r.stdout)
	}
	if len(api.PlannedChanges) != 0 || len(api.PolicyFindings) != 1 || api.PolicyFindings[0].Level != "deny" || api.PolicyFindings[0].Source != "customer" {
		t.Errorf("step api (a plan denied by policy): %+v", api)
	}
	if gone.PlanReadError == nil || !strings.Contains(*gone.PlanReadError, `job "job_missing" not found`) {
		t.Errorf("step gone (its plan job cannot be read): %+v", gone)
	}
	if hook.PlannedChanges == nil || len(hook.PlannedChanges) != 0 || hook.PolicyFindings == nil {
		t.Errorf("a step without a plan has empty lists: %+v\n%s", hook, r.stdout)
	}
	if strings.Index(r.stdout, `"id"`) > strings.Index(r.stdout, `"kind"`) || strings.Index(r.stdout, `"kind"`) > strings.Index(r.stdout, `"steps"`) {
		t.Errorf("workflow json reorders the fields:\n%s", r.stdout)
	}

	r = mustRun(t, "workflow", "get", "wf_1")
	for _, want := range []string{"+ aws_s3_bucket.logs", "Policy: 0 denied, 1 warning\n", "warn [vendor] policies/tags.rego: bucket lacks a cost tag",
		"deny [customer] /etc/byoc/policy/public.rego: public service"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("workflow get lacks %q:\n%s", want, r.stdout)
		}
	}
}

// logScript is a job's log: two output lines, a stderr line and the agent's
// own line, then the ended job.
func logScript(end *imsv1.Job) [][]*imsv1.StreamJobLogsResponse {
	return [][]*imsv1.StreamJobLogsResponse{{
		{Lines: []*imsv1.LogLine{
			{Attempt: 1, Seq: 1, Stream: imsv1.LogStream_LOG_STREAM_SYSTEM, Text: "starting action", Time: testTime},
			{Attempt: 1, Seq: 2, Stream: imsv1.LogStream_LOG_STREAM_STDOUT, Text: "hello\n", Time: testTime},
		}},
		{Lines: []*imsv1.LogLine{
			{Attempt: 1, Seq: 3, Stream: imsv1.LogStream_LOG_STREAM_STDERR, Text: "oops", Time: testTime},
		}},
		{Job: end},
	}}
}

func TestJobLogsFollowExitCode(t *testing.T) {
	tests := []struct {
		name       string
		job        *imsv1.Job
		wantCode   int
		wantStderr string
	}{
		{"succeeded", &imsv1.Job{Id: "job_1", State: imsv1.JobState_JOB_STATE_SUCCEEDED}, 0, "job job_1 succeeded"},
		{"failed", &imsv1.Job{Id: "job_1", State: imsv1.JobState_JOB_STATE_FAILED, ExitCode: 3, Error: "step run failed"}, 3, "error: job job_1 failed with exit code 3: step run failed"},
		{"timed out", &imsv1.Job{Id: "job_1", State: imsv1.JobState_JOB_STATE_TIMED_OUT, Error: "time limit of 10m0s reached"}, 1, "error: job job_1 timed out: time limit"},
		{"cancelled", &imsv1.Job{Id: "job_1", State: imsv1.JobState_JOB_STATE_CANCELLED, Error: "cancelled by ci"}, 1, "cancelled"},
		{"huge exit code", &imsv1.Job{Id: "job_1", State: imsv1.JobState_JOB_STATE_FAILED, ExitCode: 256}, 1, "exit code 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _ := setup(t)
			f.logCalls = logScript(tt.job)
			r := byoc(t, "job", "logs", "job_1", "-f")
			if r.code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr %q", r.code, tt.wantCode, r.stderr)
			}
			if want := "==> starting action\nhello\noops\n"; r.stdout != want {
				t.Errorf("stdout = %q, want %q", r.stdout, want)
			}
			if !strings.Contains(r.stderr, tt.wantStderr) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("stderr = %q, want one line with %q", r.stderr, tt.wantStderr)
			}
			if reqs := f.logRequestsCopy(); len(reqs) != 1 || !reqs[0].GetFollow() {
				t.Errorf("log requests = %v", reqs)
			}
		})
	}
}

// TestJobLogsCancelledBeforeStart: a job cancelled before its agent
// started it has no log by design; job logs says so (on stderr, stdout
// stays the log) instead of printing nothing, with and without --follow.
func TestJobLogsCancelledBeforeStart(t *testing.T) {
	f, _ := setup(t)
	cancelled := &imsv1.Job{Id: "job_1", State: imsv1.JobState_JOB_STATE_CANCELLED, Attempt: 1, MaxAttempts: 3, Error: "cancelled by ci", CreateTime: testTime, EndTime: testTime}
	f.job = cancelled
	f.logCalls = [][]*imsv1.StreamJobLogsResponse{{{Job: cancelled}}}
	r := mustRun(t, "job", "logs", "job_1")
	if r.stdout != "" || r.stderr != "==> job job_1 has no log lines: cancelled before it started (cancelled by ci)\n" {
		t.Errorf("job logs: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	r = byoc(t, "job", "logs", "job_1", "-f")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "job job_1 cancelled before it started (no log lines): cancelled by ci") {
		t.Errorf("job logs -f: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// The server sends no job with the lines: it is asked for.
	f.logCalls = [][]*imsv1.StreamJobLogsResponse{{}}
	if r := mustRun(t, "job", "logs", "job_1"); !strings.Contains(r.stderr, "cancelled before it started") {
		t.Errorf("job logs without the job in the stream: stderr %q", r.stderr)
	}
	// A job that started says nothing more, even with no lines.
	started := &imsv1.Job{Id: "job_1", State: imsv1.JobState_JOB_STATE_CANCELLED, StartTime: testTime, EndTime: testTime}
	f.job = started
	f.logCalls = [][]*imsv1.StreamJobLogsResponse{{{Job: started}}}
	if r := mustRun(t, "job", "logs", "job_1"); r.stderr != "" {
		t.Errorf("job logs of a job that started: stderr %q", r.stderr)
	}
}

func TestJobLogsFormats(t *testing.T) {
	f, _ := setup(t)
	f.logCalls = logScript(nil)
	r := mustRun(t, "job", "logs", "job_1", "--stream-prefix")
	if want := "==> starting action\nout | hello\nerr | oops\n"; r.stdout != want {
		t.Errorf("stdout = %q, want %q", r.stdout, want)
	}
	r = mustRun(t, "job", "logs", "job_1", "--timestamps")
	ts := testTime.AsTime().Local().Format("2006-01-02T15:04:05.000Z07:00")
	if !strings.HasPrefix(r.stdout, ts+" ==> starting action\n") {
		t.Errorf("stdout = %q", r.stdout)
	}
}

func TestJobLogsFollowResumes(t *testing.T) {
	f, _ := setup(t)
	end := &imsv1.Job{Id: "job_1", State: imsv1.JobState_JOB_STATE_FAILED, ExitCode: 7}
	f.job = &imsv1.Job{Id: "job_1", State: imsv1.JobState_JOB_STATE_RUNNING}
	// The first stream breaks off after two lines (as when imsd restarts);
	// the second replays from the start, and the client skips what it
	// printed already.
	full := logScript(end)[0]
	f.logCalls = [][]*imsv1.StreamJobLogsResponse{full[:1], full}
	r := byoc(t, "job", "logs", "job_1", "-f")
	if r.code != 7 {
		t.Errorf("exit %d, want 7; stderr %q", r.code, r.stderr)
	}
	if want := "==> starting action\nhello\noops\n"; r.stdout != want {
		t.Errorf("stdout = %q, want %q", r.stdout, want)
	}
	reqs := f.logRequestsCopy()
	if len(reqs) != 2 || reqs[1].GetAfterAttempt() != 1 || reqs[1].GetAfterSeq() != 2 {
		t.Errorf("log requests = %v", reqs)
	}
}

func TestActionRunFollow(t *testing.T) {
	f, _ := setup(t)
	start := timestamppb.New(testTime.AsTime())
	endTime := timestamppb.New(testTime.AsTime().Add(12e9))
	f.logCalls = logScript(&imsv1.Job{Id: "job_1", State: imsv1.JobState_JOB_STATE_FAILED, ExitCode: 42, StartTime: start, EndTime: endTime})
	r := byoc(t, "action", "run", "shop-acme", "-f", "--", "exit 42")
	if r.code != 42 {
		t.Errorf("exit %d, want 42; stderr %q", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "job job_1 failed in 12s with exit code 42") {
		t.Errorf("stderr = %q", r.stderr)
	}
	if !strings.Contains(r.stdout, "hello") || strings.Contains(r.stdout, "job_1\n") {
		t.Errorf("stdout = %q", r.stdout)
	}
}

func TestJobCancel(t *testing.T) {
	setup(t)
	r := mustRun(t, "job", "cancel", "job_1", "--reason", "stuck")
	if !strings.Contains(r.stdout, "Asked the agent to stop job job_1") {
		t.Errorf("stdout = %q", r.stdout)
	}
}

func TestErrors(t *testing.T) {
	setup(t)
	tests := []struct {
		args       []string
		wantCode   int
		wantStderr string
	}{
		{[]string{"app", "get", "nope"}, exitError, "error: app \"nope\" not found\n"},
		{[]string{"app", "create", "Bad Name"}, exitError, "error: name: must be lowercase letters, digits and dashes\n"},
		{[]string{"app", "get"}, exitUsage, "error: missing NAME"},
		{[]string{"app", "get", "a", "b"}, exitUsage, `error: unexpected argument "b"`},
		{[]string{"app", "list", "--bogus"}, exitUsage, "error: unknown flag: --bogus"},
		{[]string{"bogus"}, exitUsage, `error: unknown command "bogus" for "byoc"`},
		{[]string{"job", "bogus"}, exitUsage, `error: unknown command "bogus" for "byoc job"`},
		{[]string{"instal"}, exitUsage, `error: unknown command "instal" for "byoc" (did you mean "install"?)`},
		{[]string{"jbo", "list"}, exitUsage, `error: unknown command "jbo" for "byoc" (did you mean "job"?)`},
		{[]string{"install", "gett"}, exitUsage, `error: unknown command "gett" for "byoc install" (did you mean "get"?)`},
		{[]string{"workflow", "aprove"}, exitUsage, `error: unknown command "aprove" for "byoc workflow" (did you mean "approve"?)`},
		// A flag after a mistyped command: the command is the mistake (issue 33, item 5).
		{[]string{"instal", "list", "--app", "shop"}, exitUsage, `error: unknown command "instal" for "byoc" (did you mean "install"?)`},
		{[]string{"install", "lst", "--app", "shop"}, exitUsage, `error: unknown command "lst" for "byoc install" (did you mean "get" or "list"?)`},
		{[]string{"--server", "http://127.0.0.1:1", "jbo", "--limit", "3"}, exitUsage, `error: unknown command "jbo" for "byoc" (did you mean "job"?)`},
		{[]string{"app", "list", "-o", "xml"}, exitUsage, "--output must be text, wide, json, yaml"},
		{[]string{"job", "list", "--state", "done"}, exitUsage, `--state "done" is not one of`},
		{[]string{"context", "add", "x", "--server", "ftp://x", "--token", "t"}, exitUsage, "must be an http:// or https:// URL"},
		{[]string{"--context", "nope", "app", "list"}, exitError, `context "nope" not found`},
		{[]string{"job", "get", "job_9"}, exitError, `error: job "job_9" not found`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := byoc(t, tt.args...)
			if r.code != tt.wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", r.code, tt.wantCode, r.stderr)
			}
			if !strings.Contains(r.stderr, tt.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", r.stderr, tt.wantStderr)
			}
		})
	}
}

func TestNoContext(t *testing.T) {
	useConfig(t)
	r := byoc(t, "app", "list")
	if r.code != exitError || !strings.Contains(r.stderr, "byoc context add NAME --server URL --token TOKEN") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestUnreachableServer(t *testing.T) {
	useConfig(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	mustRun(t, "context", "add", "gone", "--server", url, "--token", testToken, "--use")

	for _, args := range [][]string{{"whoami"}, {"job", "logs", "-f", "job_1"}} {
		r := byoc(t, args...)
		if r.code != exitError {
			t.Errorf("%v: exit %d, want 1", args, r.code)
		}
		for _, want := range []string{"cannot reach the byoc server at " + url, `context "gone"`, "byoc context list"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%v: stderr %q lacks %q", args, r.stderr, want)
			}
		}
	}
}

// byoc --help documents the exit codes, awaiting approval's among them.
func TestHelpListsExitCodes(t *testing.T) {
	useConfig(t)
	r := mustRun(t, "--help")
	for _, want := range []string{"Exit codes:", "3 a --wait whose workflow awaits approval", "130 stopped by\nCtrl-C or SIGTERM"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--help lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestTablesShowNames: install list names the app and job list the
// install; -o wide adds their ids beside the names.
func TestTablesShowNames(t *testing.T) {
	setup(t)
	r := mustRun(t, "install", "list")
	if !strings.Contains(r.stdout, "shop-acme   shop ") || strings.Contains(r.stdout, "app_1") || strings.Contains(r.stdout, "ins_1") {
		t.Errorf("install list should name the app, not show ids:\n%s", r.stdout)
	}
	r = mustRun(t, "install", "list", "-o", "wide")
	for _, want := range []string{"APP ID", "ins_1", "shop", "app_1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("install list -o wide lacks %q:\n%s", want, r.stdout)
		}
	}
	r = mustRun(t, "job", "list")
	if !strings.Contains(r.stdout, "job_1   shop-acme ") || strings.Contains(r.stdout, "ins_1") {
		t.Errorf("job list should name the install, not its id:\n%s", r.stdout)
	}
	r = mustRun(t, "job", "list", "-o", "wide")
	if !strings.Contains(r.stdout, "INSTALL ID") || !strings.Contains(r.stdout, "shop-acme   ins_1 ") {
		t.Errorf("job list -o wide lacks the install id beside its name:\n%s", r.stdout)
	}
	r = mustRun(t, "job", "list", "-o", "json")
	if !strings.Contains(r.stdout, `"installId": "ins_1"`) {
		t.Errorf("job list -o json lacks the install id:\n%s", r.stdout)
	}
}

// TestJSONConvention: one JSON convention everywhere. Enum values are
// lower-case names, as the string states are; context current and job
// logs print JSON; an error under -o json is a JSON object on stderr with
// the exit code.
func TestJSONConvention(t *testing.T) {
	f, _ := setup(t)

	wf := &imsv1.Workflow{Id: "wf_1", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION, State: imsv1.WorkflowState_WORKFLOW_STATE_AWAITING_APPROVAL,
		Reason: "JOB_STATE_FAILED", // a string that only looks like an enum stays
		Steps:  []*imsv1.WorkflowStep{{Name: "db", State: imsv1.StepState_STEP_STATE_SUCCEEDED}, {Name: "api", State: imsv1.StepState_STEP_STATE_PENDING}}}
	var buf bytes.Buffer
	if err := writeJSON(&buf, wf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"kind": "provision"`, `"state": "awaiting_approval"`, `"state": "succeeded"`, `"state": "pending"`, `"reason": "JOB_STATE_FAILED"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("workflow json lacks %s:\n%s", want, buf.String())
		}
	}
	if strings.Index(buf.String(), `"id"`) > strings.Index(buf.String(), `"kind"`) {
		t.Errorf("workflow json reorders the fields:\n%s", buf.String())
	}
	if err := writeJSON(&buf, &imsv1.WhoAmIResponse{Role: imsv1.Role_ROLE_VIEWER}); err != nil || !strings.Contains(buf.String(), `"role": "viewer"`) {
		t.Errorf("whoami json: %v\n%s", err, buf.String())
	}

	r := mustRun(t, "context", "current", "-o", "json")
	var cur map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &cur); err != nil || cur["name"] != "test" || !strings.HasPrefix(cur["server"].(string), "http") {
		t.Errorf("context current -o json: %v\n%s", err, r.stdout)
	}

	f.logCalls = logScript(nil)
	r = mustRun(t, "job", "logs", "job_1", "-o", "json")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("job logs -o json: want one object a line, got:\n%s", r.stdout)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &line); err != nil || line["text"] != "hello\n" || line["stream"] != "stdout" || line["seq"] != "2" {
		t.Errorf("job logs -o json line 2 = %v (%v)", line, err)
	}

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"app", "get", "nope", "-o", "json"}, 1, `app "nope" not found`},
		{[]string{"job", "list", "--state", "bogus", "-o", "json"}, 2, `--state "bogus"`},
	} {
		r := byoc(t, tc.args...)
		var e map[string]any
		if err := json.Unmarshal([]byte(r.stderr), &e); err != nil {
			t.Errorf("%v: stderr is not JSON: %v\n%s", tc.args, err, r.stderr)
			continue
		}
		if r.code != tc.code || e["exitCode"] != float64(tc.code) || !strings.Contains(e["error"].(string), tc.msg) {
			t.Errorf("%v: exit %d, stderr %v", tc.args, r.code, e)
		}
	}
}

// LAST SEEN means what it says: "now" while the agent's stream is live
// (imsd stores the time only once per lease, so it reads up to a lease
// old), the time of its last message once it has gone.
func TestLastSeenMeansWhatItSays(t *testing.T) {
	setup(t)
	r := mustRun(t, "install", "list")
	if !lineHas(r.stdout, "shop-acme", "connected", "now") || strings.Contains(r.stdout, "38s ago") {
		t.Errorf("a connected agent last written 38s ago should read now:\n%s", r.stdout)
	}
	if !lineHas(r.stdout, "shop-beta", "disconnected", "5m ago") {
		t.Errorf("a gone agent should show when it was last heard:\n%s", r.stdout)
	}
	r = mustRun(t, "install", "get", "shop-acme")
	if !strings.Contains(r.stdout, "connected, last seen now") {
		t.Errorf("install get:\n%s", r.stdout)
	}
}

// The agent's health shows with how long it has held: a column of
// install list, a line of install get with since when and why.
func TestAgentHealthShown(t *testing.T) {
	setup(t)
	r := mustRun(t, "install", "list")
	if !lineHas(r.stdout, "AGENT HEALTH") || !lineHas(r.stdout, "shop-beta", "offline (3m)") || !lineHas(r.stdout, "shop-acme", " - ") {
		t.Errorf("install list:\n%s", r.stdout)
	}
	r = mustRun(t, "install", "get", "shop-acme")
	if !lineHas(r.stdout, "Agent health", "degraded since 10m ago (", "): disk 93% full") {
		t.Errorf("install get:\n%s", r.stdout)
	}
}

// lineHas reports whether one line of s holds every part.
func lineHas(s string, parts ...string) bool {
	for _, l := range strings.Split(s, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// Shell completion names what exists on the server (installs, apps, jobs,
// an install's actions; for arguments and --install/--app), never files,
// and `completion` is listed in --help.
func TestCompletionAsksTheServer(t *testing.T) {
	setup(t)
	for _, tc := range []struct {
		args []string
		want []string
		not  []string
	}{
		{[]string{"install", "get", ""}, []string{"shop-acme\tactive", "shop-beta\tactive"}, nil},
		{[]string{"install", "get", "shop-b"}, []string{"shop-beta"}, []string{"shop-acme"}},
		{[]string{"install", "get", "shop-acme", ""}, nil, []string{"shop-"}}, // one argument only
		{[]string{"app", "get", ""}, []string{"shop\tthe shop", "blog"}, nil},
		{[]string{"job", "logs", ""}, []string{"job_2\taction apply running", "job_1"}, nil},
		{[]string{"action", "run", "shop-acme", ""}, []string{"migrate\trun the migrations", "health\tprobe the api"}, nil},
		{[]string{"action", "list", ""}, []string{"shop-acme"}, nil},
		{[]string{"job", "list", "--install", ""}, []string{"shop-acme", "shop-beta"}, nil},
		{[]string{"install", "list", "--app", "b"}, []string{"blog"}, []string{"shop"}},
		{[]string{"install", "create", ""}, nil, []string{"shop-acme"}}, // a new name
	} {
		r := mustRun(t, append([]string{"__complete"}, tc.args...)...)
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("complete %q lacks %q:\n%s", tc.args, w, r.stdout)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(r.stdout, n) {
				t.Errorf("complete %q offers %q:\n%s", tc.args, n, r.stdout)
			}
		}
		// :4 is cobra's ShellCompDirectiveNoFileComp: never file names.
		if !strings.HasPrefix(r.stdout, ":4\n") && !strings.Contains(r.stdout, "\n:4\n") {
			t.Errorf("complete %q may fall back to files:\n%s", tc.args, r.stdout)
		}
	}
	if r := mustRun(t, "--help"); !strings.Contains(r.stdout, "completion ") {
		t.Errorf("--help does not list completion:\n%s", r.stdout)
	}
}

// byoc without a command opens the console, which needs a terminal: with
// none (a script, a pipe, cron) it says what to run instead and exits 2,
// before it tries the server (issue 33, item 9).
func TestConsoleWithoutTerminal(t *testing.T) {
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	for _, configured := range []bool{true, false} {
		if configured {
			setup(t)
		} else {
			useConfig(t)
		}
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), nil, devNull, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "which needs a terminal") || !strings.Contains(stderr.String(), "byoc --help") {
			t.Errorf("configured %v: exit %d, stderr %q; want 2 and what to run instead", configured, code, stderr.String())
		}
	}
}

// breakglass list: an approved grant ends "in 6m", a revoked or expired
// one says so and when, never "in 6m" (issue 33, item 16).
func TestBreakglassListUntil(t *testing.T) {
	f, _ := setup(t)
	now := time.Now()
	f.grants = []*imsv1.BreakGlassGrant{
		{Id: "bg_live", InstallName: "shop-acme", Role: "dba", State: "approved", ExpireTime: timestamppb.New(now.Add(7 * time.Minute))},
		{Id: "bg_revoked", InstallName: "shop-acme", Role: "dba", State: "revoked", ExpireTime: timestamppb.New(now.Add(7 * time.Minute)),
			RevokedBy: "alice", RevokeTime: timestamppb.New(now.Add(-2 * time.Minute))},
		{Id: "bg_expired", InstallName: "shop-acme", Role: "dba", State: "expired", ExpireTime: timestamppb.New(now.Add(-time.Hour))},
	}
	r := mustRun(t, "breakglass", "list")
	for id, want := range map[string]*regexp.Regexp{
		"bg_live":    regexp.MustCompile(`approved\s+in [67]m\s`),
		"bg_revoked": regexp.MustCompile(`revoked\s+revoked 2m ago\s.*\s+revoked by alice`),
		"bg_expired": regexp.MustCompile(`expired\s+ended 1h ago`),
	} {
		line := ""
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(l, id+" ") {
				line = l
			}
		}
		if !want.MatchString(line) {
			t.Errorf("%s: %q, want %v\n%s", id, line, want, r.stdout)
		}
	}
}

// app diff shows each changed key's old and new values (a sensitive one as
// imsd masked it), and --detailed-exitcode exits 2 on changes, 0 without,
// as terraform plan does (issue 33, item 13).
func TestAppDiffValues(t *testing.T) {
	f, _ := setup(t)
	f.changes = []*imsv1.ConfigChange{
		{Kind: "component", Name: "db", Op: "changed", Fields: []string{"config.size", "timeout"},
			Values: []*imsv1.FieldChange{{Field: "config.size", Old: `"small"`, New: `"large"`}, {Field: "timeout", Old: "null", New: `"1h0m0s"`}}},
		{Kind: "install", Name: "demo", Op: "changed", Fields: []string{"inputs.password"},
			Values: []*imsv1.FieldChange{{Field: "inputs.password", Old: `"(sensitive)"`, New: `"(sensitive)"`}}},
		{Kind: "component", Name: "web", Op: "removed"},
	}
	r := mustRun(t, "app", "diff", "shop", "1", "2")
	for _, want := range []string{
		"  ~ component db: config.size, timeout\n      config.size: \"small\" → \"large\"\n      timeout: (none) → \"1h0m0s\"\n",
		"      inputs.password: (sensitive) → (sensitive)\n",
		"  - component web\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("app diff:\n%s\nwant %q", r.stdout, want)
		}
	}
	if r := byoc(t, "app", "diff", "shop", "1", "2", "--detailed-exitcode"); r.code != 2 || !strings.Contains(r.stdout, "config.size") || r.stderr != "" {
		t.Errorf("--detailed-exitcode with changes: exit %d, stderr %q; want 2 and the changes", r.code, r.stderr)
	}
	if r := byoc(t, "app", "diff", "shop", "1", "2", "--detailed-exitcode", "-o", "json"); r.code != 2 || !strings.Contains(r.stdout, `"old"`) {
		t.Errorf("--detailed-exitcode -o json with changes: exit %d, stdout %q; want 2 and the values", r.code, r.stdout)
	}
	f.mu.Lock()
	f.changes = nil
	f.mu.Unlock()
	if r := byoc(t, "app", "diff", "shop", "1", "2", "--detailed-exitcode"); r.code != 0 || !strings.Contains(r.stdout, "No changes.") {
		t.Errorf("--detailed-exitcode without changes: exit %d, %q; want 0", r.code, r.stdout)
	}
}

// byocOnTerminal runs the command line as if standard input were a
// terminal on which stdin is typed.
func byocOnTerminal(tb testing.TB, stdin string, args ...string) result {
	tb.Helper()
	var stdout, stderr bytes.Buffer
	a := &app{stdin: strings.NewReader(stdin), stdout: &stdout, stderr: &stderr, getenv: os.Getenv, now: time.Now,
		terminal: func(io.Writer) bool { return false }, stdinTerminal: func() bool { return true }}
	code := a.run(context.Background(), args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// install deprovision asks first, as terraform destroy does: on a terminal
// it shows what would be destroyed and wants the install's name typed
// back; without one it refuses unless --yes; --dry-run only shows (issue
// 33, item 15).
func TestDeprovisionConfirms(t *testing.T) {
	f, _ := setup(t)
	r := byoc(t, "install", "deprovision", "shop-acme")
	if r.code != exitUsage || !strings.Contains(r.stderr, "pass --yes to confirm") || f.startedCount() != 0 {
		t.Fatalf("no terminal, no --yes: exit %d, stderr %q, %d started; want 2, naming --yes, none", r.code, r.stderr, f.startedCount())
	}
	r = mustRun(t, "install", "deprovision", "shop-acme", "--dry-run")
	if !regexp.MustCompile(`-\s+db\s+terraform\s+destroy`).MatchString(r.stdout) || !strings.Contains(r.stdout, "Dry run: nothing was changed") || f.startedCount() != 0 {
		t.Fatalf("--dry-run: %q, %d started; want the plan and nothing started", r.stdout, f.startedCount())
	}
	r = byocOnTerminal(t, "shop\n", "install", "deprovision", "shop-acme")
	if r.code != exitError || !strings.Contains(r.stdout, "Type the install's name (shop-acme)") || !strings.Contains(r.stderr, `deprovision cancelled: "shop" typed, not "shop-acme"`) || f.startedCount() != 0 {
		t.Fatalf("wrong name typed: exit %d, %q, %q, %d started", r.code, r.stdout, r.stderr, f.startedCount())
	}
	r = byocOnTerminal(t, "shop-acme\n", "install", "deprovision", "shop-acme")
	if r.code != 0 || !strings.Contains(r.stdout, "api") || f.startedCount() != 1 {
		t.Fatalf("name typed: exit %d, %q, %q, %d started; want it started", r.code, r.stdout, r.stderr, f.startedCount())
	}
	r = mustRun(t, "install", "deprovision", "shop-acme", "--yes")
	if strings.Contains(r.stdout, "Type the install's name") || f.startedCount() != 2 {
		t.Fatalf("--yes: %q, %d started; want it started without asking", r.stdout, f.startedCount())
	}
	if r := byoc(t, "install", "deprovision", "shop-acme", "--yes", "--dry-run"); r.code != exitUsage {
		t.Errorf("--yes --dry-run: exit %d, want 2", r.code)
	}
}

// A live plan whose component plans failed exits 1, naming them, after
// printing the plan; one whose plans all succeeded exits 0.
func TestLivePlanFailedExitsNonZero(t *testing.T) {
	f, _ := setup(t)
	f.plan = &imsv1.PlanInstallResponse{Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION, AppRevision: 3, Steps: []*imsv1.WorkflowStep{
		{Name: "db", Component: "db", ComponentType: "terraform", Operation: "apply", Reason: "new", PlanState: "failed",
			PlanError: "dial tcp 127.0.0.1:8080: connect: connection refused", PlanJobId: "job_db"},
		{Name: "web", Component: "web", ComponentType: "helm", Operation: "apply", Reason: "new", PlanState: "timed_out",
			PlanError: "no plan within 2m0s", PlanJobId: "job_web"},
	}}
	r := byoc(t, "install", "plan", "acme", "--live", "--kind", "provision")
	if r.code != exitError || !strings.Contains(r.stdout, "failed: dial tcp") || !strings.Contains(r.stderr, "2 of 2 component plans failed (db, web)") {
		t.Fatalf("live plan with failed plans: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = byoc(t, "install", "plan", "acme", "--live", "--kind", "provision", "-o", "json")
	if r.code != exitError || !strings.Contains(r.stdout, `"planState": "failed"`) {
		t.Fatalf("live plan -o json with failed plans: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	f.mu.Lock()
	f.plan.Steps = f.plan.Steps[:1]
	f.plan.Steps[0].PlanState, f.plan.Steps[0].PlanError, f.plan.Steps[0].PlanJobId = "not_planned", "needs outputs of net", ""
	f.mu.Unlock()
	if r := byoc(t, "install", "plan", "acme", "--live", "--kind", "provision"); r.code != 0 {
		t.Fatalf("live plan with nothing failed: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// install plan --detailed-exitcode exits as terraform plan's does: 2 when
// some install has a step to run, 0 when none has, 1 when a plan failed
// (issue 33: --detailed-exitcode on plans and diffs).
func TestInstallPlanDetailedExitcode(t *testing.T) {
	f, _ := setup(t)
	if r := byoc(t, "install", "plan", "acme", "--detailed-exitcode"); r.code != exitChanges || !strings.Contains(r.stdout, "2 steps") {
		t.Fatalf("plan with steps: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r := byoc(t, "install", "plan", "acme"); r.code != 0 {
		t.Fatalf("plan with steps, without the flag: exit %d", r.code)
	}
	if r := byoc(t, "install", "plan", "acme", "shop-beta", "--detailed-exitcode"); r.code != exitChanges {
		t.Fatalf("plan of two installs with steps: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	f.mu.Lock()
	f.plan = &imsv1.PlanInstallResponse{Kind: imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE, AppRevision: 3, Unchanged: []string{"db"}}
	f.mu.Unlock()
	if r := byoc(t, "install", "plan", "acme", "--detailed-exitcode"); r.code != 0 || !strings.Contains(r.stdout, "No changes") {
		t.Fatalf("plan without steps: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	f.mu.Lock()
	f.plan = &imsv1.PlanInstallResponse{Kind: imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE, AppRevision: 3, Steps: []*imsv1.WorkflowStep{
		{Name: "db", ComponentType: "terraform", Operation: "apply", PlanState: "failed", PlanJobId: "job_db"}}}
	f.mu.Unlock()
	if r := byoc(t, "install", "plan", "acme", "--live", "--detailed-exitcode"); r.code != exitError {
		t.Fatalf("plan that failed: exit %d, want 1", r.code)
	}
}

// Following a workflow whose step's job is queued while the install's
// agent is offline says so, not "running"; "running" follows once the
// agent is back. A script queued for an offline agent warns on stderr
// and still exits 0.
func TestQueuedForOfflineAgent(t *testing.T) {
	f, _ := setup(t)
	defer func(p time.Duration) { followPoll = p }(followPoll)
	followPoll = time.Millisecond
	step := func(st imsv1.StepState) []*imsv1.WorkflowStep {
		return []*imsv1.WorkflowStep{{Name: "sandbox", State: st, JobId: "job_s"}}
	}
	running := &imsv1.Workflow{Id: "wf_1", InstallId: "ins_1", InstallName: "acme", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION,
		State: imsv1.WorkflowState_WORKFLOW_STATE_RUNNING, Steps: step(imsv1.StepState_STEP_STATE_RUNNING)}
	done := &imsv1.Workflow{Id: "wf_1", InstallId: "ins_1", InstallName: "acme", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION,
		State: imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED, Steps: step(imsv1.StepState_STEP_STATE_SUCCEEDED)}
	offline := &imsv1.AgentStatus{AgentId: "agt_1", LastSeenTime: timestamppb.New(time.Now().Add(-5 * time.Minute))}
	f.mu.Lock()
	f.workflows = []*imsv1.Workflow{running, running, running, done}
	f.jobs = map[string]*imsv1.Job{"job_s": {Id: "job_s", State: imsv1.JobState_JOB_STATE_QUEUED}}
	f.agentFor = func(calls int) *imsv1.AgentStatus {
		if calls <= 1 {
			return offline
		}
		return &imsv1.AgentStatus{AgentId: "agt_1", Connected: true}
	}
	f.mu.Unlock()
	r := mustRun(t, "workflow", "get", "wf_1", "--wait")
	want := "  queued    sandbox (job job_s): the agent of install acme is offline (last seen 5m ago); it runs when the agent connects\n" +
		"  running   sandbox (job job_s)\n"
	if !strings.Contains(r.stdout, want) || strings.Count(r.stdout, "running   sandbox") != 1 {
		t.Fatalf("following a workflow queued for an offline agent:\n%s\nwant:\n%s", r.stdout, want)
	}

	f.mu.Lock()
	f.agentFor = func(int) *imsv1.AgentStatus { return offline }
	f.mu.Unlock()
	r = mustRun(t, "action", "run", "shop-acme", "--", "echo", "hi")
	if !strings.Contains(r.stderr, "warning: the agent of install shop-acme is offline (last seen 5m ago): the job is queued and runs when the agent connects") {
		t.Fatalf("action run to an offline agent: stderr:\n%s", r.stderr)
	}
	f.mu.Lock()
	f.agentFor = nil
	f.mu.Unlock()
	if r := mustRun(t, "action", "run", "shop-acme", "--", "echo", "hi"); strings.Contains(r.stderr, "warning") {
		t.Fatalf("action run to a connected agent warns: %s", r.stderr)
	}
}

// --wait carries on through a few failed polls (the replica it talked to
// died, or lost its database): it retries through the context's URL and
// reports the end; a poll that fails for good still ends it with the
// error.
func TestWorkflowWaitSurvivesFailedPolls(t *testing.T) {
	f, _ := setup(t)
	defer func(p time.Duration) { followPoll = p }(followPoll)
	followPoll = time.Millisecond
	defer func(b time.Duration) { followRetryMin = b }(followRetryMin)
	followRetryMin = time.Millisecond
	step := func(st imsv1.StepState) []*imsv1.WorkflowStep {
		return []*imsv1.WorkflowStep{{Name: "db", State: st, JobId: "job_s"}}
	}
	running := &imsv1.Workflow{Id: "wf_1", InstallId: "ins_1", InstallName: "acme", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION,
		State: imsv1.WorkflowState_WORKFLOW_STATE_RUNNING, Steps: step(imsv1.StepState_STEP_STATE_RUNNING)}
	done := &imsv1.Workflow{Id: "wf_1", InstallId: "ins_1", InstallName: "acme", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION,
		State: imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED, Steps: step(imsv1.StepState_STEP_STATE_SUCCEEDED)}
	f.mu.Lock()
	f.workflows = []*imsv1.Workflow{running, running, running, running, done}
	f.workflowFail = func(call int) error {
		switch call {
		case 1:
			return connect.NewError(connect.CodeUnavailable, errString("connection reset"))
		case 2:
			return connect.NewError(connect.CodeInternal, errString("internal error (ref x; see the imsd log)"))
		}
		return nil
	}
	f.mu.Unlock()
	r := mustRun(t, "workflow", "get", "wf_1", "--wait")
	if strings.Count(r.stdout, "running   db") != 1 || !strings.Contains(r.stdout, "Workflow wf_1 succeeded") || strings.Count(r.stderr, "retrying") != 2 {
		t.Fatalf("a wait through two failed polls:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}

	f.mu.Lock()
	f.workflowCalls = 0
	f.workflowFail = func(call int) error {
		if call == 0 {
			return nil
		}
		return connect.NewError(connect.CodeUnavailable, errString("connection refused"))
	}
	f.mu.Unlock()
	defer func(d time.Duration) { followRetryFor = d }(followRetryFor)
	followRetryFor = 50 * time.Millisecond
	r = byoc(t, "workflow", "get", "wf_1", "--wait")
	if r.code == 0 || !strings.Contains(r.stderr, "connection refused") {
		t.Fatalf("a wait whose polls keep failing: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

// From an install's name to what failed: byoc logs INSTALL [--component]
// [--since], byoc workflow get INSTALL, and a COMPONENT column in job
// list.
func TestLogsAndWorkflowByInstallName(t *testing.T) {
	f, _ := setup(t)
	now := time.Now()
	f.mu.Lock()
	f.listJobs = []*imsv1.Job{
		{Id: "job_3", InstallId: "ins_1", Component: "web", ComponentType: "helm", Operation: "apply", State: imsv1.JobState_JOB_STATE_SUCCEEDED, Attempt: 1, MaxAttempts: 3, CreateTime: testTime},
		{Id: "job_2", InstallId: "ins_1", Component: "db", ComponentType: "terraform", Operation: "apply", State: imsv1.JobState_JOB_STATE_FAILED, Attempt: 1, MaxAttempts: 3, CreateTime: testTime},
	}
	f.logCalls = [][]*imsv1.StreamJobLogsResponse{{{Lines: []*imsv1.LogLine{
		{Attempt: 1, Seq: 1, Time: timestamppb.New(now.Add(-time.Hour)), Stream: imsv1.LogStream_LOG_STREAM_STDOUT, Text: "an hour ago"},
		{Attempt: 1, Seq: 2, Time: timestamppb.New(now), Stream: imsv1.LogStream_LOG_STREAM_SYSTEM, Text: "[agentd] failed: disk full"},
	}}}}
	f.mu.Unlock()

	r := mustRun(t, "logs", "acme", "--component", "db")
	if got := f.logRequestsCopy(); got[len(got)-1].GetJobId() != "job_2" || !strings.Contains(r.stderr, "job job_2 (db: terraform apply), failed") ||
		r.stdout != "an hour ago\n==> [agentd] failed: disk full\n" {
		t.Fatalf("logs acme --component db: asked for %v\nstdout:\n%s\nstderr:\n%s", got[len(got)-1], r.stdout, r.stderr)
	}
	// --since: every job that ran in the window, oldest first, each
	// named; lines older than the window left out.
	r = mustRun(t, "logs", "acme", "--since", "10m")
	if got := f.logRequestsCopy(); got[len(got)-1].GetJobId() != "job_3" || got[len(got)-2].GetJobId() != "job_2" ||
		r.stdout != "==> [agentd] failed: disk full\n==> [agentd] failed: disk full\n" ||
		!regexp.MustCompile(`(?s)job job_2 .*job job_3 `).MatchString(r.stderr) {
		t.Fatalf("logs acme --since 10m: asked for %v\nstdout:\n%s\nstderr:\n%s", got, r.stdout, r.stderr)
	}
	// A job that ended before the window is left out.
	f.mu.Lock()
	f.listJobs[1].EndTime = timestamppb.New(now.Add(-2 * time.Hour))
	f.mu.Unlock()
	n := len(f.logRequestsCopy())
	r = mustRun(t, "logs", "acme", "--since", "10m")
	if got := f.logRequestsCopy(); len(got) != n+1 || got[n].GetJobId() != "job_3" || strings.Contains(r.stderr, "job_2") {
		t.Fatalf("logs acme --since 10m with job_2 ended 2h ago: asked for %v\nstderr:\n%s", got[n:], r.stderr)
	}
	if r := byoc(t, "logs", "acme", "--component", "cache"); r.code != exitError || !strings.Contains(r.stderr, `install acme has no job of component "cache"`) {
		t.Fatalf("logs of a component with no job: %d %s", r.code, r.stderr)
	}

	r = mustRun(t, "job", "list", "--install", "acme")
	if !regexp.MustCompile(`(?m)^ID +INSTALL +COMPONENT +TYPE`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^job_2 +\S+ +db +terraform +apply +failed`).MatchString(r.stdout) {
		t.Fatalf("job list lacks the COMPONENT column:\n%s", r.stdout)
	}
	f.mu.Lock()
	f.jobs = map[string]*imsv1.Job{"job_2": f.listJobs[1]}
	f.mu.Unlock()
	if r := mustRun(t, "job", "get", "job_2"); !regexp.MustCompile(`(?m)^Component: +db$`).MatchString(r.stdout) {
		t.Fatalf("job get lacks the component:\n%s", r.stdout)
	}

	f.mu.Lock()
	f.workflow = &imsv1.Workflow{Id: "wf_7", InstallName: "acme", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION, State: imsv1.WorkflowState_WORKFLOW_STATE_FAILED}
	f.workflowList = []*imsv1.Workflow{f.workflow}
	f.mu.Unlock()
	r = mustRun(t, "workflow", "get", "acme")
	if !strings.Contains(r.stdout, "wf_7") || !strings.Contains(r.stderr, "the newest workflow of install acme: wf_7") {
		t.Fatalf("workflow get acme:\n%s\n%s", r.stdout, r.stderr)
	}
	if r := byoc(t, "workflow", "get", "nope"); r.code != exitError || !strings.Contains(r.stderr, `no workflow or install named "nope"`) {
		t.Fatalf("workflow get nope: %d %s", r.code, r.stderr)
	}
	f.mu.Lock()
	f.workflowList = nil
	f.mu.Unlock()
	if r := byoc(t, "workflow", "get", "acme"); r.code != exitError || !strings.Contains(r.stderr, "install acme has no workflows yet") {
		t.Fatalf("workflow get of an install without workflows: %d %s", r.code, r.stderr)
	}
}

// People read names: install get shows its app's name and job get its
// install's; the ids are in -o wide (and -o json).
func TestNamesWhereIDsWere(t *testing.T) {
	f, _ := setup(t)
	r := mustRun(t, "install", "get", "shop-acme")
	if !regexp.MustCompile(`(?m)^App: +shop$`).MatchString(r.stdout) || strings.Contains(r.stdout, "app_1") {
		t.Fatalf("install get:\n%s", r.stdout)
	}
	if r := mustRun(t, "install", "get", "shop-acme", "-o", "wide"); !regexp.MustCompile(`(?m)^App ID: +app_1$`).MatchString(r.stdout) {
		t.Fatalf("install get -o wide:\n%s", r.stdout)
	}
	f.mu.Lock()
	f.job = &imsv1.Job{Id: "job_1", InstallId: "ins_1", State: imsv1.JobState_JOB_STATE_SUCCEEDED, MaxAttempts: 3, CreateTime: testTime}
	f.mu.Unlock()
	r = mustRun(t, "job", "get", "job_1")
	if !regexp.MustCompile(`(?m)^Install: +shop-acme$`).MatchString(r.stdout) || strings.Contains(r.stdout, "ins_1") {
		t.Fatalf("job get:\n%s", r.stdout)
	}
	if r := mustRun(t, "job", "get", "job_1", "-o", "wide"); !regexp.MustCompile(`(?m)^Install ID: +ins_1$`).MatchString(r.stdout) {
		t.Fatalf("job get -o wide:\n%s", r.stdout)
	}
}

// job get, logs and cancel take a job id; given something else (an
// install's name, as people type) the "not found" says where to go:
// byoc logs and job list --install (issue 33, item 6).
func TestJobNotFoundPointsToLogs(t *testing.T) {
	setup(t)
	for _, args := range [][]string{{"job", "get", "demo"}} {
		r := byoc(t, args...)
		if r.code != exitError || !strings.Contains(r.stderr, "byoc logs demo") || !strings.Contains(r.stderr, "byoc job list --install demo") {
			t.Errorf("byoc %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	// A job id that is not there is only not found.
	if r := byoc(t, "job", "get", "job_9"); r.code != exitError || strings.Contains(r.stderr, "byoc logs") {
		t.Errorf("job get job_9: exit %d\n%s", r.code, r.stderr)
	}
}
