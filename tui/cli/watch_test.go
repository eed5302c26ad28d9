package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// watchFake is the fake server with jobs a test changes and a
// WatchInstalls stream a test feeds.
type watchFake struct {
	*fakeOperator
	jobsMu  sync.Mutex
	jobList []*imsv1.Job
	updates chan *imsv1.WatchInstallsResponse
}

func (w *watchFake) setJobs(jobs ...*imsv1.Job) {
	w.jobsMu.Lock()
	defer w.jobsMu.Unlock()
	w.jobList = jobs
}

func (w *watchFake) ListJobs(ctx context.Context, req *connect.Request[imsv1.ListJobsRequest]) (*connect.Response[imsv1.ListJobsResponse], error) {
	w.jobsMu.Lock()
	defer w.jobsMu.Unlock()
	res := &imsv1.ListJobsResponse{}
	for _, j := range w.jobList {
		res.Jobs = append(res.Jobs, proto.Clone(j).(*imsv1.Job))
	}
	return connect.NewResponse(res), nil
}

func (w *watchFake) WatchInstalls(ctx context.Context, req *connect.Request[imsv1.WatchInstallsRequest], stream *connect.ServerStream[imsv1.WatchInstallsResponse]) error {
	if err := w.auth(req.Header()); err != nil {
		return err
	}
	snap := &imsv1.WatchInstallsResponse{Snapshot: true}
	for _, ins := range w.installs() {
		snap.Installs = append(snap.Installs, &imsv1.InstallStatus{Install: ins})
	}
	if err := stream.Send(snap); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case u := <-w.updates:
			if err := stream.Send(u); err != nil {
				return err
			}
		}
	}
}

// installs are the fake's installs.
func (w *watchFake) installs() []*imsv1.Install {
	req := connect.NewRequest(&imsv1.ListInstallsRequest{})
	req.Header().Set("Authorization", "Bearer "+testToken)
	list, err := w.ListInstalls(context.Background(), req)
	if err != nil {
		panic(err)
	}
	return list.Msg.GetInstalls()
}

// notifyBuffer is a buffer safe for one writer and one reader that says
// when it was written to.
type notifyBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{}
}

func (b *notifyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	select {
	case b.written <- struct{}{}:
	default:
	}
	return n, err
}

func (b *notifyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the output satisfies ok, failing the test after 10s.
func (b *notifyBuffer) waitFor(t *testing.T, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !ok(b.String()) {
		select {
		case <-b.written:
		case <-deadline:
			t.Fatalf("no %s in:\n%s", what, b.String())
		}
	}
}

// serveFake serves h on loopback in a fresh config whose current context
// is it, and returns its URL.
func serveFake(t *testing.T, h imsv1connect.OperatorServiceHandler) string {
	t.Helper()
	useConfig(t)
	mux := http.NewServeMux()
	mux.Handle(imsv1connect.NewOperatorServiceHandler(h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	mustRun(t, "context", "add", "test", "--server", srv.URL, "--token", testToken, "--use")
	return srv.URL
}

// startWatch runs byoc args against a fake server until the returned stop
// is called (as Ctrl-C would), and returns its output and exit code.
func startWatch(t *testing.T, h imsv1connect.OperatorServiceHandler, args ...string) (out *notifyBuffer, stop func() int) {
	t.Helper()
	serveFake(t, h)
	out = &notifyBuffer{written: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	stderr := &notifyBuffer{written: make(chan struct{}, 1)}
	go func() { code <- Main(ctx, args, strings.NewReader(""), out, stderr) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stderr: %s", stderr.String())
		}
	})
	return out, func() int {
		cancel()
		select {
		case c := <-code:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("the watch did not end on Ctrl-C")
			return -1
		}
	}
}

// job list --watch prints the table, then each job that changes or
// appears, in the table's columns; Ctrl-C ends it with exit 0.
func TestJobListWatch(t *testing.T) {
	defer func(lo, hi time.Duration) { watchPollMin, watchPollMax = lo, hi }(watchPollMin, watchPollMax)
	watchPollMin, watchPollMax = time.Millisecond, 5*time.Millisecond

	w := &watchFake{fakeOperator: &fakeOperator{}}
	running := &imsv1.Job{Id: "job_2", InstallId: "ins_1", ComponentType: "action", Operation: "apply", State: imsv1.JobState_JOB_STATE_RUNNING, Attempt: 1, MaxAttempts: 3, CreateTime: testTime}
	failed := &imsv1.Job{Id: "job_1", InstallId: "ins_1", ComponentType: "action", Operation: "apply", State: imsv1.JobState_JOB_STATE_FAILED, Attempt: 1, MaxAttempts: 3, ExitCode: 4, CreateTime: testTime}
	w.setJobs(running, failed)
	out, stop := startWatch(t, w, "job", "list", "--watch")
	out.waitFor(t, "table", func(s string) bool { return lineHas(s, "job_1", "failed") && lineHas(s, "job_2", "running") })

	done := proto.Clone(running).(*imsv1.Job)
	done.State = imsv1.JobState_JOB_STATE_SUCCEEDED
	queued := &imsv1.Job{Id: "job_3", InstallId: "ins_1", ComponentType: "helm", Operation: "apply", State: imsv1.JobState_JOB_STATE_QUEUED, MaxAttempts: 3, CreateTime: testTime}
	w.setJobs(queued, done, failed)
	out.waitFor(t, "changed rows", func(s string) bool { return lineHas(s, "job_2", "succeeded") && lineHas(s, "job_3", "queued") })
	if code := stop(); code != 0 {
		t.Errorf("Ctrl-C ended the watch with exit %d, want 0", code)
	}
	s := out.String()
	if n := strings.Count(s, "job_1 "); n != 1 {
		t.Errorf("an unchanged job was printed %d times:\n%s", n, s)
	}
	if n := strings.Count(s, "STATE"); n != 1 {
		t.Errorf("the header was printed %d times:\n%s", n, s)
	}
	lines := strings.Split(s, "\n")
	col := strings.Index(lines[0], "STATE")
	for _, l := range lines[1:] {
		if l != "" && !strings.HasPrefix(l[col:], "running") && !strings.HasPrefix(l[col:], "failed") && !strings.HasPrefix(l[col:], "succeeded") && !strings.HasPrefix(l[col:], "queued") {
			t.Errorf("row %q leaves the STATE column (at %d)", l, col)
		}
	}

	// Under -o name each change is one more line.
	w.setJobs(running)
	out, stop = startWatch(t, w, "job", "list", "-w", "-o", "name")
	out.waitFor(t, "job/job_2", func(s string) bool { return s == "job/job_2\n" })
	w.setJobs(done)
	out.waitFor(t, "job/job_2 again", func(s string) bool { return s == "job/job_2\njob/job_2\n" })
	if code := stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// install list --watch prints the installs WatchInstalls sends, then each
// one whose row changes, and a removed one as removed.
func TestInstallListWatch(t *testing.T) {
	w := &watchFake{fakeOperator: &fakeOperator{}, updates: make(chan *imsv1.WatchInstallsResponse)}
	out, stop := startWatch(t, w, "install", "list", "--watch")
	out.waitFor(t, "table", func(s string) bool {
		return lineHas(s, "shop-acme", "connected") && lineHas(s, "shop-beta", "disconnected")
	})
	installs := w.installs()
	acme, beta := installs[0], installs[1]
	beta.Agent.Connected = true
	// acme unchanged: not printed again; beta now connected.
	w.updates <- &imsv1.WatchInstallsResponse{Installs: []*imsv1.InstallStatus{{Install: acme}, {Install: beta}}}
	out.waitFor(t, "beta connected", func(s string) bool { return lineHas(s, "shop-beta", " connected", "now") })
	w.updates <- &imsv1.WatchInstallsResponse{RemovedInstallIds: []string{"ins_1"}}
	out.waitFor(t, "acme removed", func(s string) bool { return lineHas(s, "shop-acme", "removed") })
	// A new snapshot replaces the old: beta, missing from it, is gone.
	w.updates <- &imsv1.WatchInstallsResponse{Snapshot: true}
	out.waitFor(t, "beta removed", func(s string) bool { return lineHas(s, "shop-beta", "removed") })
	if code := stop(); code != 0 {
		t.Errorf("Ctrl-C ended the watch with exit %d, want 0", code)
	}
	if s := out.String(); strings.Count(s, "shop-acme ") != 2 || strings.Count(s, "shop-beta ") != 3 {
		t.Errorf("want acme printed twice (first, removed), beta three times (first, connected, removed):\n%s", s)
	}
}

// listFake serves lists a test changes while a watch polls them.
type listFake struct {
	*fakeOperator
	rowsMu    sync.Mutex
	workflows []*imsv1.Workflow
	releases  []*imsv1.Release
	grants    []*imsv1.BreakGlassGrant
	tokens    []*imsv1.ApiToken
	apps      []*imsv1.App
	builds    []*imsv1.Build
	runs      []*imsv1.ActionRun
	audit     []*imsv1.AuditEvent
	jobs      []*imsv1.Job
}

// set changes the fake's rows under its lock.
func (f *listFake) set(change func()) {
	f.rowsMu.Lock()
	defer f.rowsMu.Unlock()
	change()
}

// rows is a copy of the fake's rows *ms, read under its lock.
func rows[M proto.Message](f *listFake, ms *[]M) []M {
	f.rowsMu.Lock()
	defer f.rowsMu.Unlock()
	return clones(*ms)
}

func clones[M proto.Message](ms []M) []M {
	out := make([]M, len(ms))
	for i, m := range ms {
		out[i] = proto.Clone(m).(M)
	}
	return out
}

func (f *listFake) ListWorkflows(ctx context.Context, req *connect.Request[imsv1.ListWorkflowsRequest]) (*connect.Response[imsv1.ListWorkflowsResponse], error) {
	f.rowsMu.Lock()
	defer f.rowsMu.Unlock()
	var out []*imsv1.Workflow
	for _, wf := range clones(f.workflows) {
		if !req.Msg.GetActive() || !workflowEnded(wf.GetState()) {
			out = append(out, wf)
		}
	}
	return connect.NewResponse(&imsv1.ListWorkflowsResponse{Workflows: out}), nil
}

// GetWorkflow reads one of the fake's workflows, as a watch reads one
// that left its list.
func (f *listFake) GetWorkflow(ctx context.Context, req *connect.Request[imsv1.GetWorkflowRequest]) (*connect.Response[imsv1.GetWorkflowResponse], error) {
	for _, wf := range rows(f, &f.workflows) {
		if wf.GetId() == req.Msg.GetId() {
			return connect.NewResponse(&imsv1.GetWorkflowResponse{Workflow: wf}), nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, errString("no workflow "+req.Msg.GetId()))
}

func (f *listFake) ListJobs(ctx context.Context, req *connect.Request[imsv1.ListJobsRequest]) (*connect.Response[imsv1.ListJobsResponse], error) {
	var out []*imsv1.Job
	for _, j := range rows(f, &f.jobs) {
		if len(req.Msg.GetStates()) == 0 || slices.Contains(req.Msg.GetStates(), j.GetState()) {
			out = append(out, j)
		}
	}
	return connect.NewResponse(&imsv1.ListJobsResponse{Jobs: out}), nil
}

func (f *listFake) GetJob(ctx context.Context, req *connect.Request[imsv1.GetJobRequest]) (*connect.Response[imsv1.GetJobResponse], error) {
	for _, j := range rows(f, &f.jobs) {
		if j.GetId() == req.Msg.GetId() {
			return connect.NewResponse(&imsv1.GetJobResponse{Job: j}), nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, errString("no job "+req.Msg.GetId()))
}

func (f *listFake) ListReleases(ctx context.Context, req *connect.Request[imsv1.ListReleasesRequest]) (*connect.Response[imsv1.ListReleasesResponse], error) {
	return connect.NewResponse(&imsv1.ListReleasesResponse{Releases: rows(f, &f.releases)}), nil
}

func (f *listFake) ListBreakGlassGrants(ctx context.Context, req *connect.Request[imsv1.ListBreakGlassGrantsRequest]) (*connect.Response[imsv1.ListBreakGlassGrantsResponse], error) {
	return connect.NewResponse(&imsv1.ListBreakGlassGrantsResponse{Grants: rows(f, &f.grants)}), nil
}

func (f *listFake) ListApiTokens(ctx context.Context, req *connect.Request[imsv1.ListApiTokensRequest]) (*connect.Response[imsv1.ListApiTokensResponse], error) {
	return connect.NewResponse(&imsv1.ListApiTokensResponse{Tokens: rows(f, &f.tokens)}), nil
}

func (f *listFake) ListApps(ctx context.Context, req *connect.Request[imsv1.ListAppsRequest]) (*connect.Response[imsv1.ListAppsResponse], error) {
	return connect.NewResponse(&imsv1.ListAppsResponse{Apps: rows(f, &f.apps)}), nil
}

func (f *listFake) ListBuilds(ctx context.Context, req *connect.Request[imsv1.ListBuildsRequest]) (*connect.Response[imsv1.ListBuildsResponse], error) {
	return connect.NewResponse(&imsv1.ListBuildsResponse{Builds: rows(f, &f.builds)}), nil
}

func (f *listFake) ListActionRuns(ctx context.Context, req *connect.Request[imsv1.ListActionRunsRequest]) (*connect.Response[imsv1.ListActionRunsResponse], error) {
	return connect.NewResponse(&imsv1.ListActionRunsResponse{Runs: rows(f, &f.runs)}), nil
}

func (f *listFake) ListAuditEvents(ctx context.Context, req *connect.Request[imsv1.ListAuditEventsRequest]) (*connect.Response[imsv1.ListAuditEventsResponse], error) {
	f.rowsMu.Lock()
	defer f.rowsMu.Unlock()
	var out []*imsv1.AuditEvent
	for _, e := range clones(f.audit) {
		if e.GetAtUnixNano() >= req.Msg.GetSinceUnixNano() {
			out = append(out, e)
		}
	}
	return connect.NewResponse(&imsv1.ListAuditEventsResponse{Events: out}), nil
}

// Every list that can change under an operator takes --watch (-w), as
// job list does: the table, then each row that changes or appears, in
// the same columns; one that leaves an --active list (it ended), or a
// revoked token, printed once more as such; Ctrl-C ends it with exit 0.
func TestListWatch(t *testing.T) {
	defer func(lo, hi time.Duration) { watchPollMin, watchPollMax = lo, hi }(watchPollMin, watchPollMax)
	watchPollMin, watchPollMax = time.Millisecond, 5*time.Millisecond
	const (
		running   = imsv1.WorkflowState_WORKFLOW_STATE_RUNNING
		succeeded = imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED
	)
	for _, c := range []struct {
		args          []string
		start, change func(f *listFake)
		first, then   []string // a line of the first table, a line printed after the change
		also          []string // another line printed after the change, if set
		unchanged     string   // a row that must be printed once only
	}{
		{
			args: []string{"workflow", "list", "--active", "--watch"},
			start: func(f *listFake) {
				f.workflows = []*imsv1.Workflow{{Id: "wf_1", InstallName: "shop-acme", State: running}, {Id: "wf_2", InstallName: "shop-beta", State: running}}
			},
			// wf_1 ends, leaving the --active list: read again, it shows
			// how it ended; wf_2 is deleted: removed.
			change: func(f *listFake) {
				f.workflows[0].State = succeeded
				f.workflows = f.workflows[:1]
			},
			first:     []string{"wf_1", "shop-acme", "running"},
			then:      []string{"wf_1", "shop-acme", "succeeded"},
			also:      []string{"wf_2", "shop-beta", "removed"},
			unchanged: "wf_2   shop-beta   unspecified   running",
		},
		{
			// A job that leaves --state shows its new state.
			args: []string{"job", "list", "--state", "running", "--watch"},
			start: func(f *listFake) {
				f.jobs = []*imsv1.Job{{Id: "job_1", InstallId: "ins_1", ComponentType: "helm", Operation: "apply", State: imsv1.JobState_JOB_STATE_RUNNING},
					{Id: "job_2", InstallId: "ins_1", ComponentType: "helm", Operation: "apply", State: imsv1.JobState_JOB_STATE_RUNNING}}
			},
			change:    func(f *listFake) { f.jobs[0].State, f.jobs[0].ExitCode = imsv1.JobState_JOB_STATE_FAILED, 3 },
			first:     []string{"job_1", "shop-acme", "running"},
			then:      []string{"job_1", "shop-acme", "failed", "3"},
			unchanged: "job_2 ",
		},
		{
			args: []string{"workflow", "list", "-w"},
			start: func(f *listFake) {
				f.workflows = []*imsv1.Workflow{{Id: "wf_1", InstallName: "shop-acme", State: running}, {Id: "wf_2", InstallName: "shop-beta", State: running}}
			},
			change:    func(f *listFake) { f.workflows[0].State = succeeded },
			first:     []string{"wf_1", "running"},
			then:      []string{"wf_1", "succeeded"},
			unchanged: "wf_2 ",
		},
		{
			args: []string{"release", "list", "--watch"},
			start: func(f *listFake) {
				f.releases = []*imsv1.Release{{Id: "rel_1", AppName: "shop", AppRevision: 3, State: imsv1.ReleaseState_RELEASE_STATE_RUNNING}, {Id: "rel_0", AppName: "shop", State: imsv1.ReleaseState_RELEASE_STATE_SUCCEEDED}}
			},
			change:    func(f *listFake) { f.releases[0].State = imsv1.ReleaseState_RELEASE_STATE_HALTED },
			first:     []string{"rel_1", "shop", "running"},
			then:      []string{"rel_1", "shop", "halted"},
			unchanged: "rel_0 ",
		},
		{
			args: []string{"breakglass", "list", "--watch"},
			start: func(f *listFake) {
				f.grants = []*imsv1.BreakGlassGrant{{Id: "bg_1", InstallName: "shop-acme", Role: "admin", State: "pending", RequestExpireTime: timestamppb.New(time.Now().Add(time.Hour))},
					{Id: "bg_0", InstallName: "shop-acme", Role: "admin", State: "denied"}}
			},
			change: func(f *listFake) {
				f.grants[0].State, f.grants[0].DecidedBy, f.grants[0].ExpireTime = "approved", "alice", timestamppb.New(time.Now().Add(time.Hour))
			},
			first:     []string{"bg_1", "pending", "request expires in"},
			then:      []string{"bg_1", "approved", "alice"},
			unchanged: "bg_0 ",
		},
		{
			args: []string{"token", "list", "--watch"},
			start: func(f *listFake) {
				f.tokens = []*imsv1.ApiToken{{Id: "tok_1", Name: "ci"}, {Id: "tok_2", Name: "ops"}}
			},
			change:    func(f *listFake) { f.tokens = f.tokens[1:] },
			first:     []string{"ci", "tok_1", "never"},
			then:      []string{"ci", "tok_1", "revoked"},
			unchanged: "ops ",
		},
		{
			args:      []string{"app", "list", "--watch"},
			start:     func(f *listFake) { f.apps = []*imsv1.App{{Id: "app_1", Name: "shop"}} },
			change:    func(f *listFake) { f.apps = append(f.apps, &imsv1.App{Id: "app_2", Name: "blog"}) },
			first:     []string{"shop", "app_1"},
			then:      []string{"blog", "app_2"},
			unchanged: "shop ",
		},
		{
			args: []string{"build", "list", "--watch"},
			start: func(f *listFake) {
				f.builds = []*imsv1.Build{{Id: "b_1", Repository: "api", Digest: "sha256:aa", Kind: "image"}}
			},
			change: func(f *listFake) {
				f.builds = append(f.builds, &imsv1.Build{Id: "b_2", Repository: "web", Digest: "sha256:bb", Kind: "image"})
			},
			first:     []string{"api@sha256:aa", "image"},
			then:      []string{"web@sha256:bb", "image"},
			unchanged: "api@sha256:aa ",
		},
		{
			// Events are only appended; one recorded late, with a time
			// before the newest seen (another replica's clock), shows too.
			args: []string{"audit", "list", "--watch"},
			start: func(f *listFake) {
				f.audit = []*imsv1.AuditEvent{{Chain: "ins_1", Seq: 1, AtUnixNano: testTime.AsTime().UnixNano(), Kind: "install.created", Actor: "alice"}}
			},
			change: func(f *listFake) {
				f.audit = append(f.audit, &imsv1.AuditEvent{Chain: "", Seq: 7, AtUnixNano: testTime.AsTime().Add(-30 * time.Second).UnixNano(), Kind: "token.created", Actor: "bob"})
			},
			first:     []string{"shop-acme", "1", "install.created", "alice"},
			then:      []string{"vendor", "7", "token.created", "bob"},
			unchanged: "install.created",
		},
		{
			args: []string{"action", "runs", "shop-acme", "--watch"},
			start: func(f *listFake) {
				f.runs = []*imsv1.ActionRun{{Id: "run_1", Action: "migrate", State: running}, {Id: "run_0", Action: "migrate", State: succeeded}}
			},
			change:    func(f *listFake) { f.runs[0].State = succeeded },
			first:     []string{"run_1", "migrate", "running"},
			then:      []string{"run_1", "migrate", "succeeded"},
			unchanged: "run_0 ",
		},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			f := &listFake{fakeOperator: &fakeOperator{}}
			f.set(func() { c.start(f) })
			out, stop := startWatch(t, f, c.args...)
			out.waitFor(t, "the first table", func(s string) bool { return lineHas(s, c.first...) })
			f.set(func() { c.change(f) })
			out.waitFor(t, "the change", func(s string) bool { return lineHas(s, c.then...) && (c.also == nil || lineHas(s, c.also...)) })
			if code := stop(); code != 0 {
				t.Errorf("Ctrl-C ended the watch with exit %d, want 0", code)
			}
			s := out.String()
			if n := strings.Count(s, c.unchanged); n != 1 {
				t.Errorf("an unchanged row (%q) was printed %d times:\n%s", c.unchanged, n, s)
			}
			if lines := strings.Split(s, "\n"); len(lines) < 3 || strings.ToUpper(lines[0]) != lines[0] || strings.Count(s, lines[0]) != 1 {
				t.Errorf("want the header once, first:\n%s", s)
			}
		})
	}
}

// audit list's CHAIN names the install (item 12 of issue 33: ids where
// names belong); -o wide adds its id; the vendor's chain says vendor.
func TestAuditListNamesTheChain(t *testing.T) {
	f := &listFake{fakeOperator: &fakeOperator{}}
	at := testTime.AsTime().UnixNano()
	f.audit = []*imsv1.AuditEvent{{Chain: "ins_1", Seq: 1, AtUnixNano: at, Kind: "install.created"}, {Chain: "", Seq: 1, AtUnixNano: at, Kind: "token.created"}}
	serveFake(t, f)
	out := mustRun(t, "audit", "list").stdout
	if !lineHas(out, "shop-acme", "install.created") || lineHas(out, "ins_1") || !lineHas(out, "vendor", "token.created") {
		t.Errorf("audit list:\n%s", out)
	}
	out = mustRun(t, "audit", "list", "-o", "wide").stdout
	if !lineHas(out, "CHAIN", "CHAIN ID") || !lineHas(out, "shop-acme", "ins_1", "install.created") {
		t.Errorf("audit list -o wide:\n%s", out)
	}
	// verify names it too (the fake's records are not hashed: not verified).
	if r := byoc(t, "audit", "verify"); !strings.Contains(r.stdout, "chain shop-acme (ins_1): NOT VERIFIED") || !strings.Contains(r.stdout, "chain vendor: NOT VERIFIED") {
		t.Errorf("audit verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Under -o json a row that leaves the list is printed once more, as it
// was last seen, as kubectl get -w -o json does (a table says "removed").
func TestListWatchJSONPrintsRemovedRows(t *testing.T) {
	defer func(lo, hi time.Duration) { watchPollMin, watchPollMax = lo, hi }(watchPollMin, watchPollMax)
	watchPollMin, watchPollMax = time.Millisecond, 5*time.Millisecond
	f := &listFake{fakeOperator: &fakeOperator{}}
	f.set(func() { f.tokens = []*imsv1.ApiToken{{Id: "tok_1", Name: "ci"}, {Id: "tok_2", Name: "ops"}} })
	out, stop := startWatch(t, f, "token", "list", "--watch", "-o", "json")
	out.waitFor(t, "the first objects", func(s string) bool { return strings.Count(s, `"tok_2"`) == 1 && strings.Count(s, `"tok_1"`) == 1 })
	f.set(func() { f.tokens = f.tokens[1:] })
	out.waitFor(t, "the removed row again", func(s string) bool { return strings.Count(s, `"tok_1"`) == 2 })
	if code := stop(); code != 0 {
		t.Errorf("Ctrl-C ended the watch with exit %d, want 0", code)
	}
	if n := strings.Count(out.String(), `"tok_2"`); n != 1 {
		t.Errorf("the unchanged row was printed %d times:\n%s", n, out.String())
	}
}
