package console

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

func TestMain(m *testing.M) {
	time.Local = time.UTC // timestamps in goldens
	os.Exit(m.Run())
}

// clock is the fixed "now" of the fixtures.
var clock = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// newTestModel returns a console whose client points at a closed port: the
// tests drive Update with messages and never run the commands it returns.
func newTestModel(t testing.TB, opts Options) *Model {
	t.Helper()
	opts.NoWatch = true
	if opts.Conn == nil {
		opts.Conn = &Conn{Context: "prod", Server: "https://ims.example.com",
			Client: imsv1connect.NewOperatorServiceClient(http.DefaultClient, "http://127.0.0.1:1")}
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return clock }
	}
	m, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	m.Update(tea.WindowSizeMsg{Width: 100, Height: 24})
	return m
}

func status(name, app string, agent string, seenAgo time.Duration, running, queued int32, inputs map[string]string) *imsv1.InstallStatus {
	in := &imsv1.Install{Id: "ins_" + name, Name: name, AppId: "app_" + app, Inputs: inputs, CreateTime: timestamppb.New(clock.Add(-time.Hour))}
	switch agent {
	case "online", "offline":
		in.Agent = &imsv1.AgentStatus{AgentId: "agt_" + name, Connected: agent == "online", Hostname: "host-" + name, Version: "1.0.0",
			LastSeenTime: timestamppb.New(clock.Add(-seenAgo)), EnrollTime: timestamppb.New(clock.Add(-time.Hour))}
	}
	return &imsv1.InstallStatus{Install: in, AppName: app, RunningJobs: running, QueuedJobs: queued}
}

func snapshot() *imsv1.WatchInstallsResponse {
	acme := status("acme", "shop", "online", 3*time.Second, 1, 2, map[string]string{"region": "eu-west-1", "tier": "gold", "db_password": "hunter2"})
	globex := status("globex", "shop", "offline", 5*time.Minute, 0, 0, map[string]string{"region": "us-east-1", "tier": "silver"})
	umbrella := status("umbrella-corporation-eu-central-production", "billing", "online", 8*time.Second, 0, 0, map[string]string{"region": "eu-central-1"})
	// The defaults; maintenance turned off; the kill switch.
	acme.Install.Agent.Permissions = &imsv1.Permissions{Provision: true, Maintenance: true, Deprovision: true}
	globex.Install.Agent.Permissions = &imsv1.Permissions{Provision: true, Deprovision: true}
	umbrella.Install.Agent.Permissions = &imsv1.Permissions{Provision: true, Maintenance: true, Deprovision: true, DisabledAll: true}
	// Lifecycle, revision and health: one of each kind.
	acme.Install.State, acme.Install.AppRevision = "active", 3
	acme.Install.Health = &imsv1.InstallHealth{State: "healthy", CheckTime: timestamppb.New(clock.Add(-time.Minute))}
	globex.Install.State, globex.Install.AppRevision = "failed", 2
	globex.Install.Health = &imsv1.InstallHealth{State: "unhealthy", Error: "probe: exit status 3", CheckTime: timestamppb.New(clock.Add(-time.Minute))}
	umbrella.Install.State, umbrella.Install.AppRevision = "deprovisioned", 1
	initech := status("initech", "billing", "none", 0, 0, 1, nil)
	initech.Install.State = "new"
	// Labels: selectors in the / filter match them.
	acme.Install.Labels = map[string]string{"ring": "canary", "example.com/team": "a"}
	globex.Install.Labels = map[string]string{"ring": "prod"}
	umbrella.Install.Labels = map[string]string{"ring": "prod", "legacy": ""}
	return &imsv1.WatchInstallsResponse{Snapshot: true, Installs: []*imsv1.InstallStatus{
		acme, globex, initech, umbrella,
	}}
}

// feed delivers a fleet snapshot under the model's current watch generation.
func feed(m *Model, resps ...*imsv1.WatchInstallsResponse) tea.Cmd {
	var ev []fleetEvent
	for _, r := range resps {
		ev = append(ev, fleetEvent{resp: r})
	}
	_, cmd := m.Update(fleetMsg{gen: m.fleetGen, events: ev})
	return cmd
}

func job(id, install string, st imsv1.JobState, ago time.Duration) *imsv1.Job {
	return &imsv1.Job{Id: id, InstallId: "ins_" + install, ComponentType: "action", Operation: "apply", State: st,
		Attempt: 1, MaxAttempts: 3, CreateTime: timestamppb.New(clock.Add(-ago)), CreatedBy: "admin"}
}

func jobs() []*imsv1.Job {
	return []*imsv1.Job{
		job("job_run", "acme", imsv1.JobState_JOB_STATE_RUNNING, 10*time.Second),
		job("job_ok", "acme", imsv1.JobState_JOB_STATE_SUCCEEDED, 2*time.Hour),
		withComponent(job("job_bad", "acme", imsv1.JobState_JOB_STATE_FAILED, 26*time.Hour), "db"),
	}
}

func withComponent(j *imsv1.Job, c string) *imsv1.Job {
	j.Component = c
	return j
}

func logLines(from, to int, text func(i int) string) []*imsv1.LogLine {
	var out []*imsv1.LogLine
	for i := from; i <= to; i++ {
		out = append(out, &imsv1.LogLine{Attempt: 1, Seq: int64(i), Time: timestamppb.New(clock.Add(time.Duration(i) * time.Millisecond * 37)),
			Stream: imsv1.LogStream_LOG_STREAM_STDOUT, Text: text(i)})
	}
	return out
}

// press sends key presses, one per string ("enter", "esc", "j", ...); a
// string longer than one rune that is not a key name is typed.
func press(m *Model, keys ...string) tea.Cmd {
	var cmds []tea.Cmd
	for _, k := range keys {
		for _, msg := range keyMsgs(k) {
			_, cmd := m.Update(msg)
			cmds = append(cmds, cmd)
		}
	}
	return tea.Batch(cmds...)
}

var named = map[string]tea.Key{
	"enter": {Code: tea.KeyEnter}, "esc": {Code: tea.KeyEscape}, "up": {Code: tea.KeyUp}, "down": {Code: tea.KeyDown},
	"pgup": {Code: tea.KeyPgUp}, "pgdown": {Code: tea.KeyPgDown}, "home": {Code: tea.KeyHome}, "end": {Code: tea.KeyEnd},
	"backspace": {Code: tea.KeyBackspace}, "ctrl+c": {Code: 'c', Mod: tea.ModCtrl},
	"ctrl+s": {Code: 's', Mod: tea.ModCtrl},
}

func keyMsgs(k string) []tea.Msg {
	if key, ok := named[k]; ok {
		return []tea.Msg{tea.KeyPressMsg(key)}
	}
	var out []tea.Msg
	for _, r := range k {
		out = append(out, tea.KeyPressMsg(tea.Key{Code: r, Text: string(r)}))
	}
	return out
}

// screen renders the model without colour.
func screen(m *Model) string { return stripANSI(m.Render()) }

func mustContain(t *testing.T, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Fatalf("screen lacks %q:\n%s", w, s)
		}
	}
}

func mustNotContain(t *testing.T, s string, nots ...string) {
	t.Helper()
	for _, w := range nots {
		if strings.Contains(s, w) {
			t.Fatalf("screen has %q but must not:\n%s", w, s)
		}
	}
}

var _ = fmt.Sprint

type contextT = context.Context

func teaSize(w, h int) tea.WindowSizeMsg { return tea.WindowSizeMsg{Width: w, Height: h} }

// installParts feeds an open install view its workflows (a provision that
// deployed db and api, then a running action) and its app's actions.
func feedInstallParts(m *Model) {
	v := m.top().(*installView)
	deploy := &imsv1.Workflow{Id: "wf_1", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION, State: imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED,
		AppRevision: 3, CreateTime: timestamppb.New(clock.Add(-time.Hour)), EndTime: timestamppb.New(clock.Add(-50 * time.Minute)),
		Steps: []*imsv1.WorkflowStep{
			{Name: "db", Component: "db", Operation: "apply", State: imsv1.StepState_STEP_STATE_SUCCEEDED, JobId: "job_db"},
			{Name: "api", Component: "api", Operation: "apply", State: imsv1.StepState_STEP_STATE_SUCCEEDED, JobId: "job_api"},
		}}
	newest := &imsv1.Workflow{Id: "wf_2", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_ACTION, State: imsv1.WorkflowState_WORKFLOW_STATE_RUNNING,
		AppRevision: 3, CreateTime: timestamppb.New(clock.Add(-time.Minute)),
		Steps: []*imsv1.WorkflowStep{
			{Name: "backup", Action: "migrate", Operation: "run", State: imsv1.StepState_STEP_STATE_SUCCEEDED},
			{Name: "migrate", Action: "migrate", Operation: "run", State: imsv1.StepState_STEP_STATE_RUNNING},
		}}
	m.Update(workflowsMsg{gen: v.wfGen, newest: newest, deploy: deploy})
	m.Update(actionsMsg{gen: v.actGen, revision: 3, actions: []*imsv1.Action{
		{Name: "migrate", Mode: "maintenance", Description: "run the migrations"},
	}})
	m.Update(auditMsg{gen: v.auGen, events: []*imsv1.AuditEvent{
		{Chain: "ins_acme", Seq: 12, AtUnixNano: clock.Add(-time.Minute).UnixNano(), Kind: "step.started", Actor: "imsd", Subject: "workflow:wf_2/migrate"},
		{Chain: "ins_acme", Seq: 11, AtUnixNano: clock.Add(-2 * time.Minute).UnixNano(), Kind: "job.finished", Actor: "agent:agt_1", Subject: "job:job_ok"},
	}})
}
