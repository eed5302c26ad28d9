package e2e

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// clock is a settable clock for imsd.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func wantCode(t *testing.T, err error, code connect.Code, contains string) {
	t.Helper()
	if err == nil {
		t.Fatalf("call succeeded; want %v", code)
	}
	if connect.CodeOf(err) != code {
		t.Fatalf("error %v; want code %v", err, code)
	}
	if !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %q does not mention %q", err.Error(), contains)
	}
}

// These tests play agents by hand against imsd in-process; they are fast.
func TestAgentSeesOnlyItsOwnInstall(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	_, tokA := cluster.NewInstall(t, c, "shop", "alpha")
	_, tokB := cluster.NewInstall(t, c, "shop", "beta")
	a := cluster.EnrollRaw(t, ims.URL(), tokA)
	b := cluster.EnrollRaw(t, ims.URL(), tokB)
	a.Connect(t, 1)

	jobB := enqueue(t, c, "beta", "echo b", 60)
	jobA := enqueue(t, c, "alpha", "echo a", 60)
	// Install A's agent is handed A's job only, although B's is older.
	if as := a.Assignment(t); as.JobId != jobA.Id {
		t.Fatalf("agent of alpha was assigned %s; want %s", as.JobId, jobA.Id)
	}
	if j := cluster.WaitJob(t, c, jobB.Id, time.Second, imsv1.JobState_JOB_STATE_QUEUED); j.AgentId != "" {
		t.Fatalf("beta's job was touched: %v", j)
	}
	// B's agent claims B's job and A tries to write to it with B's token.
	b.Connect(t, 1)
	asB := b.Assignment(t)
	for name, m := range map[string]*agentv1.ConnectRequest{
		"ack":    cluster.Ack(asB.JobId, asB.FencingToken),
		"logs":   cluster.Logs1(asB.JobId, asB.FencingToken, 1, "from alpha"),
		"result": cluster.Result(asB.JobId, asB.FencingToken, agentv1.Outcome_OUTCOME_SUCCEEDED, 0),
	} {
		r := a.Answer(t, a.Send(t, m)).GetRejected()
		if r == nil || r.Code != connect.CodePermissionDenied.String() {
			t.Fatalf("alpha's %s to beta's job: %v; want permission_denied", name, r)
		}
	}
	if j := cluster.WaitJob(t, c, jobB.Id, time.Second, imsv1.JobState_JOB_STATE_ASSIGNED); j.AgentId != b.ID {
		t.Fatalf("beta's job changed: %v", j)
	}
	if n := len(cluster.Logs(t, c, jobB.Id)); n != 0 {
		t.Fatalf("beta's job has %d log lines from alpha", n)
	}
	// An agent holds no operator credential: it cannot read jobs.
	anon := imsv1connect.NewOperatorServiceClient(agent.DefaultHTTPClient(), ims.URL())
	_, err := anon.GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: jobB.Id}))
	wantCode(t, err, connect.CodeUnauthenticated, "bearer token")
}

func TestForgedAgentSignatureIsRefused(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	_, tok := cluster.NewInstall(t, ims.Admin(), "shop", "alpha")
	a := cluster.EnrollRaw(t, ims.URL(), tok)
	other, _ := identity.NewKey()
	st := a.Client.Connect(context.Background())
	defer st.CloseRequest()
	st.Send(nil)
	m, err := st.Receive()
	if err != nil {
		t.Fatal(err)
	}
	// Someone without the agent's key opens a channel in its name.
	forged := ed25519.Sign(other, m.GetChallenge().Nonce)
	_, err = agentchannel.Dial(st, m.GetChallenge(), other, a.ID, nil, &agentv1.Hello{AgentId: a.ID, Signature: forged, Capacity: 1})
	wantCode(t, err, connect.CodeUnauthenticated, "bad signature")

	// A hello in the clear (an agent from before the channel, or a proxy
	// replaying one) is refused, saying what to do.
	st2 := a.Client.Connect(context.Background())
	defer st2.CloseRequest()
	st2.Send(nil)
	if _, err := st2.Receive(); err != nil {
		t.Fatal(err)
	}
	st2.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Hello{Hello: &agentv1.Hello{AgentId: a.ID, Capacity: 1}}})
	_, err = st2.Receive()
	wantCode(t, err, connect.CodeFailedPrecondition, "encrypted channel")

	// An agent id imsd does not know: refused, and the refusal is signed
	// by imsd for this stream and that id (the one answer that stops an
	// agent for good, so a path attacker cannot forge it).
	st3 := a.Client.Connect(context.Background())
	defer st3.CloseRequest()
	st3.Send(nil)
	m3, err := st3.Receive()
	if err != nil {
		t.Fatal(err)
	}
	ch := m3.GetChallenge()
	_, err = agentchannel.Dial(st3, ch, a.Key, "agt_nobody", nil, &agentv1.Hello{AgentId: "agt_nobody", Capacity: 1})
	wantCode(t, err, connect.CodeUnauthenticated, "unknown agent")
	var ce *connect.Error
	if !errors.As(err, &ce) || !agentproto.VerifyHelloRefusal(ch.PublicKey, ch.Nonce, "agt_nobody", ce.Meta().Get(agentproto.HelloRefusalHeader)) {
		t.Fatalf("the refusal of an unknown agent is not signed by imsd for this stream: %v (meta %v)", err, ce.Meta())
	}
}

func TestViewerCannotChangeAnything(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	cluster.NewInstall(t, c, "shop", "alpha")
	r, err := c.CreateApiToken(context.Background(), connect.NewRequest(&imsv1.CreateApiTokenRequest{Name: "support", Role: imsv1.Role_ROLE_VIEWER}))
	if err != nil {
		t.Fatal(err)
	}
	v := ims.Client(r.Msg.Token)
	if _, err := v.ListInstalls(context.Background(), connect.NewRequest(&imsv1.ListInstallsRequest{})); err != nil {
		t.Fatalf("viewer cannot list: %v", err)
	}
	_, err = v.EnqueueJob(context.Background(), connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "alpha", ComponentType: "action", Operation: "apply", Config: actionConfig(t, "true")}))
	wantCode(t, err, connect.CodePermissionDenied, "viewer")
	_, err = v.CreateApp(context.Background(), connect.NewRequest(&imsv1.CreateAppRequest{Name: "evil"}))
	wantCode(t, err, connect.CodePermissionDenied, "admin")
	_, err = v.CancelJob(context.Background(), connect.NewRequest(&imsv1.CancelJobRequest{Id: "job_x"}))
	wantCode(t, err, connect.CodePermissionDenied, "admin")
	jobs, err := c.ListJobs(context.Background(), connect.NewRequest(&imsv1.ListJobsRequest{}))
	if err != nil || len(jobs.Msg.Jobs) != 0 {
		t.Fatalf("jobs after a refused enqueue: %v %v", jobs, err)
	}
	_, err = ims.Client("byoc_op_wrong").ListApps(context.Background(), connect.NewRequest(&imsv1.ListAppsRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated, "unknown")
}

func TestEnrollmentTokenSingleUseAndExpiring(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
	opts := fast
	opts.Now = clk.Now
	ims := cluster.StartIMS(t, opts)
	c := ims.Admin()
	_, tok := cluster.NewInstall(t, c, "shop", "alpha")
	cluster.EnrollRaw(t, ims.URL(), tok)

	enroll := func(token string) error {
		key, _ := identity.NewKey()
		_, err := agentv1connect.NewAgentServiceClient(agent.DefaultHTTPClient(), ims.URL()).Enroll(context.Background(),
			connect.NewRequest(&agentv1.EnrollRequest{EnrollmentToken: token, PublicKey: key.Public().(ed25519.PublicKey)}))
		return err
	}
	wantCode(t, enroll(tok), connect.CodePermissionDenied, "already used")

	r, err := c.CreateEnrollmentToken(context.Background(), connect.NewRequest(&imsv1.CreateEnrollmentTokenRequest{Install: "alpha", TtlSeconds: 60}))
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(61 * time.Second)
	wantCode(t, enroll(r.Msg.EnrollmentToken.Token), connect.CodePermissionDenied, "expired")
	wantCode(t, enroll("byoc_enr_made_up"), connect.CodePermissionDenied, "unknown")
	wantCode(t, enroll(""), connect.CodeInvalidArgument, "enrollment_token")
}

func TestBadInputNamesTheFieldAndChangesNothing(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	ctx := context.Background()
	inst, tok := cluster.NewInstall(t, c, "shop", "alpha")
	cfg := actionConfig(t, "true")

	cases := []struct {
		name     string
		call     func() error
		code     connect.Code
		contains string
	}{
		{"app without name", func() error {
			_, err := c.CreateApp(ctx, connect.NewRequest(&imsv1.CreateAppRequest{}))
			return err
		}, connect.CodeInvalidArgument, "name: is required"},
		{"app with bad name", func() error {
			_, err := c.CreateApp(ctx, connect.NewRequest(&imsv1.CreateAppRequest{Name: "Not Valid"}))
			return err
		}, connect.CodeInvalidArgument, "name:"},
		{"duplicate app", func() error {
			_, err := c.CreateApp(ctx, connect.NewRequest(&imsv1.CreateAppRequest{Name: "shop"}))
			return err
		}, connect.CodeAlreadyExists, "shop"},
		{"install of unknown app", func() error {
			_, err := c.CreateInstall(ctx, connect.NewRequest(&imsv1.CreateInstallRequest{App: "nope", Name: "x"}))
			return err
		}, connect.CodeInvalidArgument, "app:"},
		{"install with bad input name", func() error {
			_, err := c.CreateInstall(ctx, connect.NewRequest(&imsv1.CreateInstallRequest{App: "shop", Name: "x", Inputs: map[string]string{"1bad": "v"}}))
			return err
		}, connect.CodeInvalidArgument, "inputs[1bad]"},
		{"job without install", func() error {
			_, err := c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{ComponentType: "action", Operation: "apply", Config: cfg}))
			return err
		}, connect.CodeInvalidArgument, "install: is required"},
		{"job for unknown install", func() error {
			_, err := c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "ghost", ComponentType: "action", Operation: "apply", Config: cfg}))
			return err
		}, connect.CodeInvalidArgument, "install:"},
		{"job without type", func() error {
			_, err := c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "alpha", Operation: "apply", Config: cfg}))
			return err
		}, connect.CodeInvalidArgument, "component_type: is required"},
		{"job with bad operation", func() error {
			_, err := c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "alpha", ComponentType: "action", Operation: "explode", Config: cfg}))
			return err
		}, connect.CodeInvalidArgument, "operation:"},
		{"job with huge timeout", func() error {
			_, err := c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "alpha", ComponentType: "action", Operation: "apply", Config: cfg, TimeoutSeconds: 1 << 40}))
			return err
		}, connect.CodeInvalidArgument, "timeout_seconds:"},
		{"unknown job", func() error {
			_, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: "job_nope"}))
			return err
		}, connect.CodeNotFound, "job_nope"},
		{"cancel unknown job", func() error {
			_, err := c.CancelJob(ctx, connect.NewRequest(&imsv1.CancelJobRequest{Id: "job_nope"}))
			return err
		}, connect.CodeNotFound, "job_nope"},
		{"logs of unknown job", func() error {
			st, err := c.StreamJobLogs(ctx, connect.NewRequest(&imsv1.StreamJobLogsRequest{JobId: "job_nope"}))
			if err != nil {
				return err
			}
			for st.Receive() {
			}
			return st.Err()
		}, connect.CodeNotFound, "job_nope"},
		{"unknown install", func() error {
			_, err := c.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "ghost"}))
			return err
		}, connect.CodeNotFound, "ghost"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantCode(t, tc.call(), tc.code, tc.contains) })
	}

	apps, _ := c.ListApps(ctx, connect.NewRequest(&imsv1.ListAppsRequest{}))
	installs, _ := c.ListInstalls(ctx, connect.NewRequest(&imsv1.ListInstallsRequest{}))
	jobs, _ := c.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{}))
	if len(apps.Msg.Apps) != 1 || len(installs.Msg.Installs) != 1 || len(jobs.Msg.Jobs) != 0 {
		t.Fatalf("bad input changed the database: %d apps, %d installs, %d jobs", len(apps.Msg.Apps), len(installs.Msg.Installs), len(jobs.Msg.Jobs))
	}

	// An oversized log line from an agent ends its stream with an error
	// naming the field, and nothing is stored.
	a := cluster.EnrollRaw(t, ims.URL(), tok)
	a.Connect(t, 1)
	job := enqueue(t, c, inst.Name, "true", 60)
	as := a.Assignment(t)
	a.Send(t, cluster.Logs1(as.JobId, as.FencingToken, 1, strings.Repeat("x", 70000)))
	for {
		_, err := a.Next(t, 10*time.Second)
		if err != nil {
			wantCode(t, err, connect.CodeInvalidArgument, "logs.lines[0].text")
			break
		}
	}
	if n := len(cluster.Logs(t, c, job.Id)); n != 0 {
		t.Fatalf("%d lines stored from a refused batch", n)
	}
}
