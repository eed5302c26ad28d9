package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// testToken is the only token the fake server accepts.
const testToken = "byoc_op_testtoken"

// fakeOperator is an in-process OperatorService with canned data that
// records what it was asked.
type fakeOperator struct {
	imsv1connect.UnimplementedOperatorServiceHandler

	mu          sync.Mutex
	authHeaders []string
	protos      []string
	created     []*imsv1.CreateInstallRequest
	enqueued    []*imsv1.EnqueueJobRequest
	listed      []*imsv1.ListJobsRequest
	logRequests []*imsv1.StreamJobLogsRequest
	// logCalls[i] is what the i-th StreamJobLogs call sends; the last entry
	// repeats.
	logCalls [][]*imsv1.StreamJobLogsResponse
	job      *imsv1.Job // returned by GetJob
	// jobs are more jobs GetJob returns, by id.
	jobs map[string]*imsv1.Job
	// started are the StartWorkflow requests received.
	started []*imsv1.StartWorkflowRequest
	// changes are what DiffAppRevisions returns.
	changes []*imsv1.ConfigChange
	// grants are what ListBreakGlassGrants returns.
	grants   []*imsv1.BreakGlassGrant
	workflow *imsv1.Workflow // returned by GetWorkflow
	// retried are the RetryWorkflowStep calls, as WORKFLOW/STEP.
	retried []string
	plan    *imsv1.PlanInstallResponse // returned by PlanInstall
	// listJobs, if set, is what ListJobs returns instead of two jobs.
	listJobs []*imsv1.Job
	// workflowList is what ListWorkflows returns (install "nope": not found).
	workflowList []*imsv1.Workflow
	// workflows, if set, are what the n-th GetWorkflow call returns (the
	// last one repeats), before workflow.
	workflows     []*imsv1.Workflow
	workflowCalls int
	// workflowFail, if set, is the error the n-th GetWorkflow call
	// (from 0) fails with instead (nil: it answers).
	workflowFail func(call int) error
	// agentFor, if set, is the agent GetInstall reports, given how many
	// GetWorkflow calls were made.
	agentFor func(workflowCalls int) *imsv1.AgentStatus
	// enqueueFail is how many enqueue calls fail with enqueueCode (all of
	// them when negative) before one succeeds; enqueueCalls counts calls
	// and enqueueKeys records each call's idempotency key.
	enqueueFail  int
	enqueueCode  connect.Code
	enqueueCalls int
	enqueueKeys  []string
}

// failEnqueue answers an enqueue call with its planned failure, if any.
func (f *fakeOperator) failEnqueue(key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.enqueueCalls++
	f.enqueueKeys = append(f.enqueueKeys, key)
	if f.enqueueFail == 0 {
		return nil
	}
	f.enqueueFail--
	return connect.NewError(f.enqueueCode, errString("planned failure"))
}

var testTime = timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))

func (f *fakeOperator) auth(h http.Header) error {
	f.mu.Lock()
	f.authHeaders = append(f.authHeaders, h.Get("Authorization"))
	f.mu.Unlock()
	if h.Get("Authorization") != "Bearer "+testToken {
		return connect.NewError(connect.CodeUnauthenticated, errString("invalid API token"))
	}
	return nil
}

type errString string

func (e errString) Error() string { return string(e) }

func (f *fakeOperator) WhoAmI(ctx context.Context, req *connect.Request[imsv1.WhoAmIRequest]) (*connect.Response[imsv1.WhoAmIResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&imsv1.WhoAmIResponse{TokenId: "tok_1", Name: "ci", Role: imsv1.Role_ROLE_ADMIN}), nil
}

var testApps = []*imsv1.App{
	{Id: "app_1", Name: "shop", Description: "the shop", CreateTime: testTime},
	{Id: "app_2", Name: "blog", CreateTime: testTime},
}

func (f *fakeOperator) CreateApp(ctx context.Context, req *connect.Request[imsv1.CreateAppRequest]) (*connect.Response[imsv1.CreateAppResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	if req.Msg.GetName() == "" || req.Msg.GetName() == "Bad Name" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errString("name: must be lowercase letters, digits and dashes"))
	}
	return connect.NewResponse(&imsv1.CreateAppResponse{App: &imsv1.App{Id: "app_9", Name: req.Msg.GetName(), Description: req.Msg.GetDescription(), CreateTime: testTime}}), nil
}

func (f *fakeOperator) ListApps(ctx context.Context, req *connect.Request[imsv1.ListAppsRequest]) (*connect.Response[imsv1.ListAppsResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&imsv1.ListAppsResponse{Apps: testApps}), nil
}

func (f *fakeOperator) GetApp(ctx context.Context, req *connect.Request[imsv1.GetAppRequest]) (*connect.Response[imsv1.GetAppResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	for _, a := range testApps {
		if a.GetName() == req.Msg.GetIdOrName() || a.GetId() == req.Msg.GetIdOrName() {
			return connect.NewResponse(&imsv1.GetAppResponse{App: a}), nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, errString(`app "`+req.Msg.GetIdOrName()+`" not found`))
}

func (f *fakeOperator) CreateInstall(ctx context.Context, req *connect.Request[imsv1.CreateInstallRequest]) (*connect.Response[imsv1.CreateInstallResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.created = append(f.created, req.Msg)
	f.mu.Unlock()
	return connect.NewResponse(&imsv1.CreateInstallResponse{
		Install: &imsv1.Install{Id: "ins_1", AppId: "app_1", Name: req.Msg.GetName(), Inputs: req.Msg.GetInputs(), CreateTime: testTime},
		EnrollmentToken: &imsv1.EnrollmentToken{
			Token:      "byoc_enr_secret",
			ExpireTime: timestamppb.New(time.Now().Add(24 * time.Hour)),
		},
	}), nil
}

func (f *fakeOperator) GetInstall(ctx context.Context, req *connect.Request[imsv1.GetInstallRequest]) (*connect.Response[imsv1.GetInstallResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	name := req.Msg.GetIdOrName()
	if name == "ins_1" {
		name = "shop-acme" // asked by id
	}
	in := &imsv1.Install{
		Id: "ins_1", AppId: "app_1", Name: name, CreateTime: testTime,
		Inputs: map[string]string{"region": "eu-west-1", "size": "m"},
		Agent: &imsv1.AgentStatus{
			AgentId: "agt_1", Connected: true, Version: "v0.1.0", Hostname: "ip-10-0-0-1",
			LastSeenTime: timestamppb.New(time.Now().Add(-3 * time.Second)), EnrollTime: testTime,
			Health: "degraded", HealthTime: timestamppb.New(time.Now().Add(-10 * time.Minute)), HealthReason: "disk 93% full",
		},
	}
	f.mu.Lock()
	if f.agentFor != nil {
		in.Agent = f.agentFor(f.workflowCalls)
	}
	f.mu.Unlock()
	return connect.NewResponse(&imsv1.GetInstallResponse{Install: in}), nil
}

func (f *fakeOperator) EnqueueJob(ctx context.Context, req *connect.Request[imsv1.EnqueueJobRequest]) (*connect.Response[imsv1.EnqueueJobResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	if err := f.failEnqueue(req.Msg.GetIdempotencyKey()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.enqueued = append(f.enqueued, req.Msg)
	f.mu.Unlock()
	return connect.NewResponse(&imsv1.EnqueueJobResponse{Job: &imsv1.Job{
		Id: "job_1", InstallId: "ins_1", ComponentType: req.Msg.GetComponentType(), Operation: req.Msg.GetOperation(),
		Config: req.Msg.GetConfig(), State: imsv1.JobState_JOB_STATE_QUEUED, MaxAttempts: 3, CreateTime: testTime,
	}}), nil
}

func (f *fakeOperator) EnqueueJobs(ctx context.Context, req *connect.Request[imsv1.EnqueueJobsRequest]) (*connect.Response[imsv1.EnqueueJobsResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	if err := f.failEnqueue(req.Msg.GetIdempotencyKey()); err != nil {
		return nil, err
	}
	out := &imsv1.EnqueueJobsResponse{}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, m := range req.Msg.GetJobs() {
		f.enqueued = append(f.enqueued, m)
		out.Jobs = append(out.Jobs, &imsv1.Job{
			Id: fmt.Sprintf("job_%d", i+1), InstallId: "ins_" + m.GetInstall(), ComponentType: m.GetComponentType(), Operation: m.GetOperation(),
			Config: m.GetConfig(), State: imsv1.JobState_JOB_STATE_QUEUED, MaxAttempts: 3, CreateTime: testTime,
		})
	}
	return connect.NewResponse(out), nil
}

func (f *fakeOperator) ListJobs(ctx context.Context, req *connect.Request[imsv1.ListJobsRequest]) (*connect.Response[imsv1.ListJobsResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.listed = append(f.listed, req.Msg)
	list := f.listJobs
	f.mu.Unlock()
	if list != nil {
		return connect.NewResponse(&imsv1.ListJobsResponse{Jobs: list}), nil
	}
	return connect.NewResponse(&imsv1.ListJobsResponse{Jobs: []*imsv1.Job{
		{Id: "job_2", InstallId: "ins_1", ComponentType: "action", Operation: "apply", State: imsv1.JobState_JOB_STATE_RUNNING, Attempt: 1, MaxAttempts: 3, CreateTime: testTime},
		{Id: "job_1", InstallId: "ins_1", ComponentType: "action", Operation: "apply", State: imsv1.JobState_JOB_STATE_FAILED, Attempt: 1, MaxAttempts: 3, ExitCode: 4, CreateTime: testTime},
	}}), nil
}

func (f *fakeOperator) GetJob(ctx context.Context, req *connect.Request[imsv1.GetJobRequest]) (*connect.Response[imsv1.GetJobResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if j, ok := f.jobs[req.Msg.GetId()]; ok {
		return connect.NewResponse(&imsv1.GetJobResponse{Job: j}), nil
	}
	if f.job == nil || f.job.GetId() != req.Msg.GetId() {
		return nil, connect.NewError(connect.CodeNotFound, errString(`job "`+req.Msg.GetId()+`" not found`))
	}
	return connect.NewResponse(&imsv1.GetJobResponse{Job: f.job}), nil
}

func (f *fakeOperator) StreamJobLogs(ctx context.Context, req *connect.Request[imsv1.StreamJobLogsRequest], stream *connect.ServerStream[imsv1.StreamJobLogsResponse]) error {
	if err := f.auth(req.Header()); err != nil {
		return err
	}
	f.mu.Lock()
	f.protos = append(f.protos, req.Peer().Protocol)
	n := len(f.logRequests)
	f.logRequests = append(f.logRequests, req.Msg)
	msgs := f.logCalls[min(n, len(f.logCalls)-1)]
	f.mu.Unlock()
	for _, m := range msgs {
		if m.GetJob() != nil && !req.Msg.GetFollow() {
			continue // only a followed stream ends with the job
		}
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeOperator) ListBreakGlassGrants(ctx context.Context, req *connect.Request[imsv1.ListBreakGlassGrantsRequest]) (*connect.Response[imsv1.ListBreakGlassGrantsResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(&imsv1.ListBreakGlassGrantsResponse{Grants: f.grants}), nil
}

func (f *fakeOperator) DiffAppRevisions(ctx context.Context, req *connect.Request[imsv1.DiffAppRevisionsRequest]) (*connect.Response[imsv1.DiffAppRevisionsResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(&imsv1.DiffAppRevisionsResponse{Changes: f.changes}), nil
}

func (f *fakeOperator) StartWorkflow(ctx context.Context, req *connect.Request[imsv1.StartWorkflowRequest]) (*connect.Response[imsv1.StartWorkflowResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, req.Msg)
	return connect.NewResponse(&imsv1.StartWorkflowResponse{Workflow: &imsv1.Workflow{Id: "wf_1", Kind: req.Msg.GetKind(), InstallName: req.Msg.GetInstall()}}), nil
}

func (f *fakeOperator) startedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.started)
}

func (f *fakeOperator) CancelJob(ctx context.Context, req *connect.Request[imsv1.CancelJobRequest]) (*connect.Response[imsv1.CancelJobResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&imsv1.CancelJobResponse{Job: &imsv1.Job{Id: req.Msg.GetId(), State: imsv1.JobState_JOB_STATE_RUNNING, CancelRequested: true}}), nil
}

// newFakeServer serves f over HTTP/1.1 and unencrypted HTTP/2, as imsd
// does on loopback, and returns its URL.
func newFakeServer(tb testing.TB, f *fakeOperator) string {
	tb.Helper()
	mux := http.NewServeMux()
	mux.Handle(imsv1connect.NewOperatorServiceHandler(f))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv.URL
}

func (f *fakeOperator) lastAuth() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.authHeaders) == 0 {
		return ""
	}
	return f.authHeaders[len(f.authHeaders)-1]
}

func (f *fakeOperator) logRequestsCopy() []*imsv1.StreamJobLogsRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.logRequests)
}

func (f *fakeOperator) ListInstalls(ctx context.Context, req *connect.Request[imsv1.ListInstallsRequest]) (*connect.Response[imsv1.ListInstallsResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&imsv1.ListInstallsResponse{Installs: []*imsv1.Install{
		{Id: "ins_1", AppId: "app_1", Name: "shop-acme", State: "active", AppRevision: 3, CreateTime: testTime,
			Agent: &imsv1.AgentStatus{AgentId: "agt_1", Connected: true, LastSeenTime: timestamppb.New(time.Now().Add(-38 * time.Second))}},
		{Id: "ins_2", AppId: "app_1", Name: "shop-beta", State: "active", AppRevision: 3, CreateTime: testTime,
			Agent: &imsv1.AgentStatus{AgentId: "agt_2", LastSeenTime: timestamppb.New(time.Now().Add(-5 * time.Minute)),
				Health: "offline", HealthTime: timestamppb.New(time.Now().Add(-3 * time.Minute)), HealthReason: "no heartbeat for more than 2m0s"}},
	}}), nil
}

func (f *fakeOperator) ListActions(ctx context.Context, req *connect.Request[imsv1.ListActionsRequest]) (*connect.Response[imsv1.ListActionsResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	if req.Msg.GetInstall() != "shop-acme" {
		return nil, connect.NewError(connect.CodeNotFound, errString(`install "`+req.Msg.GetInstall()+`" not found`))
	}
	return connect.NewResponse(&imsv1.ListActionsResponse{AppRevision: 3, Actions: []*imsv1.Action{
		{Name: "migrate", Description: "run the migrations", Mode: "maintenance"},
		{Name: "health", Description: "probe the api", Mode: "maintenance", HealthCheck: true},
	}}), nil
}

func (f *fakeOperator) GetWorkflow(ctx context.Context, req *connect.Request[imsv1.GetWorkflowRequest]) (*connect.Response[imsv1.GetWorkflowResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.workflowFail != nil {
		if err := f.workflowFail(f.workflowCalls); err != nil {
			f.workflowCalls++
			return nil, err
		}
	}
	if len(f.workflows) > 0 {
		wf := f.workflows[min(f.workflowCalls, len(f.workflows)-1)]
		f.workflowCalls++
		return connect.NewResponse(&imsv1.GetWorkflowResponse{Workflow: wf}), nil
	}
	if f.workflow == nil || f.workflow.GetId() != req.Msg.GetId() {
		return nil, connect.NewError(connect.CodeNotFound, errString(`workflow "`+req.Msg.GetId()+`" not found`))
	}
	return connect.NewResponse(&imsv1.GetWorkflowResponse{Workflow: f.workflow}), nil
}

func (f *fakeOperator) PlanInstall(ctx context.Context, req *connect.Request[imsv1.PlanInstallRequest]) (*connect.Response[imsv1.PlanInstallResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.plan == nil {
		// A deprovision of two components.
		return connect.NewResponse(&imsv1.PlanInstallResponse{Kind: req.Msg.GetKind(), AppRevision: 2, Steps: []*imsv1.WorkflowStep{
			{Name: "api", ComponentType: "helm", Operation: "destroy", Reason: "deprovision"},
			{Name: "db", ComponentType: "terraform", Operation: "destroy", Reason: "deprovision", Needs: []string{"api"}},
		}}), nil
	}
	return connect.NewResponse(f.plan), nil
}

func (f *fakeOperator) ListWorkflows(ctx context.Context, req *connect.Request[imsv1.ListWorkflowsRequest]) (*connect.Response[imsv1.ListWorkflowsResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	if req.Msg.GetInstall() == "nope" {
		return nil, connect.NewError(connect.CodeNotFound, errString(`install "nope" not found`))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(&imsv1.ListWorkflowsResponse{Workflows: f.workflowList}), nil
}

func (f *fakeOperator) RetryWorkflowStep(ctx context.Context, req *connect.Request[imsv1.RetryWorkflowStepRequest]) (*connect.Response[imsv1.RetryWorkflowStepResponse], error) {
	if err := f.auth(req.Header()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retried = append(f.retried, req.Msg.GetId()+"/"+req.Msg.GetStep())
	return connect.NewResponse(&imsv1.RetryWorkflowStepResponse{Workflow: f.workflow}), nil
}
