package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

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

// startWatch runs byoc args against a watchFake until the returned stop
// is called (as Ctrl-C would), and returns its output and exit code.
func startWatch(t *testing.T, w *watchFake, args ...string) (out *notifyBuffer, stop func() int) {
	t.Helper()
	serveFake(t, w)
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
