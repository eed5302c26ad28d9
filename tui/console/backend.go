package console

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"time"

	tea "charm.land/bubbletea/v2"
	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/internal/backoff"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// Conn is one imsd the console talks to.
type Conn struct {
	// Context is the CLI context's name; empty when --server chose the server.
	Context string
	Server  string
	Client  imsv1connect.OperatorServiceClient
	// Streams is a client that carries bidirectional streams (HTTP/2),
	// for support shells; nil: Client.
	Streams imsv1connect.OperatorServiceClient
	// Identity says who the console is signed in as and with which
	// roles (the header shows it); empty: not shown.
	Identity string
	// Access is where the caller's grants allow the dangerous actions:
	// their keys are shown and bound on the rows of those installs only
	// (nil: everywhere, imsd refusing what it must).
	Access *Access
}

// The async results. Every one carries the generation of the request that
// produced it; Update drops a result whose generation is no longer current,
// so a slow answer to an old question never overwrites a newer one.

// fleetMsg is a batch of events from the fleet watch.
type fleetMsg struct {
	gen    int
	events []fleetEvent
}

// fleetEvent is one watch response, or a failure and when the retry is.
type fleetEvent struct {
	resp    *imsv1.WatchInstallsResponse
	err     error
	retryIn time.Duration
}

// logMsg is a batch of log chunks from a followed log stream.
type logMsg struct {
	gen    int
	chunks []logChunk
	closed bool
}

type logChunk struct {
	lines []*imsv1.LogLine
	job   *imsv1.Job // the ended job, on the last chunk of a followed stream
	err   error
}

// olderLogsMsg answers a page-back request; newerLogsMsg a page forward.
type olderLogsMsg struct {
	gen   int
	lines []*imsv1.LogLine
	err   error
}

type newerLogsMsg struct {
	gen   int
	lines []*imsv1.LogLine
	err   error
}

// jobsMsg answers a job listing.
type jobsMsg struct {
	gen  int
	jobs []*imsv1.Job
	err  error
}

// installNameMsg answers an install's look-up by id on conn
// (nameInstalls); name is "" when it failed.
type installNameMsg struct {
	conn     *Conn
	id, name string
}

// jobMsg answers a job read.
type jobMsg struct {
	gen int
	job *imsv1.Job
	err error
}

// enqueuedMsg answers an action run.
type enqueuedMsg struct {
	gen int
	job *imsv1.Job
	err error
}

// cancelledMsg answers a job cancel.
type cancelledMsg struct {
	gen int
	job *imsv1.Job
	err error
}

// ctxMsg answers a context switch.
type ctxMsg struct {
	conn *Conn
	err  error
}

// tickMsg refreshes relative times once a second.
type tickMsg struct{}

func tick() tea.Cmd { return tea.Tick(time.Second, func(time.Time) tea.Msg { return tickMsg{} }) }

// send delivers v on ch unless ctx ends first.
func send[T any](ctx context.Context, ch chan<- T, v T) bool {
	select {
	case ch <- v:
		return true
	case <-ctx.Done():
		return false
	}
}

// nextBatch returns a command that waits for the next item on ch and takes
// whatever else is already waiting (up to max): a burst of log lines or
// fleet changes costs one Update and one render, not one per item.
func nextBatch[T any](ch <-chan T, max int, wrap func(items []T, closed bool) tea.Msg) tea.Cmd {
	return func() tea.Msg {
		first, ok := <-ch
		if !ok {
			return wrap(nil, true)
		}
		items := []T{first}
		for len(items) < max {
			select {
			case x, ok := <-ch:
				if !ok {
					return wrap(items, true)
				}
				items = append(items, x)
			default:
				return wrap(items, false)
			}
		}
		return wrap(items, false)
	}
}

// watchFleet holds a WatchInstalls stream open until ctx ends, reopening it
// with jittered exponential backoff (up to 500 ms at first, doubling to
// 15 s; reset by each message received) when it fails.
func watchFleet(ctx context.Context, c imsv1connect.OperatorServiceClient, out chan<- fleetEvent) {
	defer close(out)
	retry := backoff.New(500*time.Millisecond, 15*time.Second)
	for ctx.Err() == nil {
		st, err := c.WatchInstalls(ctx, connect.NewRequest(&imsv1.WatchInstallsRequest{}))
		if err == nil {
			for st.Receive() {
				retry.Reset()
				if !send(ctx, out, fleetEvent{resp: st.Msg()}) {
					st.Close()
					return
				}
			}
			err = st.Err()
			st.Close()
			if err == nil {
				err = connect.NewError(connect.CodeUnavailable, errStreamEnded)
			}
		}
		if ctx.Err() != nil {
			return
		}
		wait := retry.Next()
		if !send(ctx, out, fleetEvent{err: err, retryIn: wait}) {
			return
		}
		if !backoff.Wait(ctx, wait) {
			return
		}
	}
}

type constError string

func (e constError) Error() string { return string(e) }

const errStreamEnded = constError("the server ended the watch")

// followLogs streams a job's last tail lines (or, with tail 0, the lines
// after (attempt, seq)), then follows it until it ends.
func followLogs(ctx context.Context, c imsv1connect.OperatorServiceClient, jobID string, tail int, attempt int32, seq int64, out chan<- logChunk) {
	defer close(out)
	st, err := c.StreamJobLogs(ctx, connect.NewRequest(&imsv1.StreamJobLogsRequest{
		JobId: jobID, Follow: true, Tail: int32(tail), AfterAttempt: attempt, AfterSeq: seq}))
	if err != nil {
		send(ctx, out, logChunk{err: err})
		return
	}
	defer st.Close()
	for st.Receive() {
		if !send(ctx, out, logChunk{lines: st.Msg().Lines, job: st.Msg().Job}) {
			return
		}
	}
	if err := st.Err(); err != nil && ctx.Err() == nil {
		send(ctx, out, logChunk{err: err})
	}
}

// olderLogs fetches the page of lines just before (attempt, seq).
func olderLogs(ctx context.Context, c imsv1connect.OperatorServiceClient, gen int, jobID string, attempt int32, seq int64, limit int) tea.Cmd {
	return func() tea.Msg {
		st, err := c.StreamJobLogs(ctx, connect.NewRequest(&imsv1.StreamJobLogsRequest{
			JobId: jobID, BeforeAttempt: attempt, BeforeSeq: seq, Limit: int32(limit)}))
		if err != nil {
			return olderLogsMsg{gen: gen, err: err}
		}
		defer st.Close()
		var lines []*imsv1.LogLine
		for st.Receive() {
			lines = append(lines, st.Msg().Lines...)
		}
		return olderLogsMsg{gen: gen, lines: lines, err: st.Err()}
	}
}

// newerLogs fetches up to limit lines after (attempt, seq).
func newerLogs(ctx context.Context, c imsv1connect.OperatorServiceClient, gen int, jobID string, attempt int32, seq int64, limit int) tea.Cmd {
	return func() tea.Msg {
		st, err := c.StreamJobLogs(ctx, connect.NewRequest(&imsv1.StreamJobLogsRequest{
			JobId: jobID, AfterAttempt: attempt, AfterSeq: seq, Limit: int32(limit)}))
		if err != nil {
			return newerLogsMsg{gen: gen, err: err}
		}
		defer st.Close()
		var lines []*imsv1.LogLine
		for st.Receive() {
			lines = append(lines, st.Msg().Lines...)
		}
		return newerLogsMsg{gen: gen, lines: lines, err: st.Err()}
	}
}

func listJobs(ctx context.Context, c imsv1connect.OperatorServiceClient, gen int, install string) tea.Cmd {
	return func() tea.Msg {
		r, err := c.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{Install: install, PageSize: 200}))
		if err != nil {
			return jobsMsg{gen: gen, err: err}
		}
		return jobsMsg{gen: gen, jobs: r.Msg.Jobs}
	}
}

func installName(ctx context.Context, conn *Conn, id string) tea.Cmd {
	return func() tea.Msg {
		r, err := conn.Client.GetInstall(ctx, connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: id}))
		if err != nil {
			return installNameMsg{conn: conn, id: id}
		}
		return installNameMsg{conn: conn, id: id, name: r.Msg.GetInstall().GetName()}
	}
}

func getJob(ctx context.Context, c imsv1connect.OperatorServiceClient, gen int, id string) tea.Cmd {
	return func() tea.Msg {
		r, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: id}))
		if err != nil {
			return jobMsg{gen: gen, err: err}
		}
		return jobMsg{gen: gen, job: r.Msg.Job}
	}
}

// runAction enqueues script as an action job on install; mode "" needs
// maintenance.
func runAction(ctx context.Context, c imsv1connect.OperatorServiceClient, gen int, install, script, mode string) tea.Cmd {
	return func() tea.Msg {
		cfg, err := structpb.NewStruct(map[string]any{"steps": []any{map[string]any{"name": "run", "script": script}}})
		if err != nil {
			return enqueuedMsg{gen: gen, err: err}
		}
		r, err := c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{
			Install: install, ComponentType: "action", Operation: "apply", Config: cfg, Mode: mode}))
		if err != nil {
			return enqueuedMsg{gen: gen, err: err}
		}
		return enqueuedMsg{gen: gen, job: r.Msg.Job}
	}
}

func cancelJob(ctx context.Context, c imsv1connect.OperatorServiceClient, gen int, id string) tea.Cmd {
	return func() tea.Msg {
		r, err := c.CancelJob(ctx, connect.NewRequest(&imsv1.CancelJobRequest{Id: id, Reason: "cancelled from the byoc console"}))
		if err != nil {
			return cancelledMsg{gen: gen, err: err}
		}
		return cancelledMsg{gen: gen, job: r.Msg.Job}
	}
}

// listAudit reads the newest audit events, up to limit, at or after since
// (Unix nanoseconds; 0 for all), of one install's chain (install, a name
// or id) or, with install empty, of every chain.
func listAudit(ctx context.Context, c imsv1connect.OperatorServiceClient, gen int, install string, since int64, limit int32) tea.Cmd {
	return func() tea.Msg {
		r, err := c.ListAuditEvents(ctx, connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: install, SinceUnixNano: since, Limit: limit, NewestFirst: true}))
		if err != nil {
			return auditMsg{gen: gen, err: err}
		}
		return auditMsg{gen: gen, events: r.Msg.Events}
	}
}

// The `:` lists (resources.go). Each returns the call, which a tableView
// runs in its command.

func fetchWorkflows(ctx context.Context, c imsv1connect.OperatorServiceClient, install string) func() ([]*imsv1.Workflow, error) {
	return func() ([]*imsv1.Workflow, error) {
		r, err := c.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{Install: install, PageSize: 200}))
		if err != nil {
			return nil, err
		}
		return r.Msg.Workflows, nil
	}
}

func getWorkflow(ctx context.Context, c imsv1connect.OperatorServiceClient, id string) func() (*imsv1.Workflow, error) {
	return func() (*imsv1.Workflow, error) {
		r, err := c.GetWorkflow(ctx, connect.NewRequest(&imsv1.GetWorkflowRequest{Id: id}))
		if err != nil {
			return nil, err
		}
		return r.Msg.Workflow, nil
	}
}

func listApps(ctx context.Context, c imsv1connect.OperatorServiceClient) func() ([]*imsv1.App, error) {
	return func() ([]*imsv1.App, error) {
		r, err := c.ListApps(ctx, connect.NewRequest(&imsv1.ListAppsRequest{}))
		if err != nil {
			return nil, err
		}
		return r.Msg.Apps, nil
	}
}

func listRevisions(ctx context.Context, c imsv1connect.OperatorServiceClient, app string) func() ([]*imsv1.AppRevision, error) {
	return func() ([]*imsv1.AppRevision, error) {
		r, err := c.ListAppRevisions(ctx, connect.NewRequest(&imsv1.ListAppRevisionsRequest{App: app}))
		if err != nil {
			return nil, err
		}
		return r.Msg.Revisions, nil
	}
}

func listGrants(ctx context.Context, c imsv1connect.OperatorServiceClient) func() ([]*imsv1.BreakGlassGrant, error) {
	return func() ([]*imsv1.BreakGlassGrant, error) {
		r, err := c.ListBreakGlassGrants(ctx, connect.NewRequest(&imsv1.ListBreakGlassGrantsRequest{}))
		if err != nil {
			return nil, err
		}
		return r.Msg.Grants, nil
	}
}

// saveLog writes lines to dir/name (dir "" is the working directory)
// through a temporary file renamed over it, so a failed save leaves no
// half-written file, and returns the file's absolute path.
func saveLog(dir, name string, lines []string) (string, error) {
	if dir == "" {
		dir = "."
	}
	path, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+name+".*")
	if err != nil {
		return path, err
	}
	w := bufio.NewWriter(f)
	for _, l := range lines {
		w.WriteString(l)
		w.WriteByte('\n')
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return path, err
}

func listReleases(ctx context.Context, c imsv1connect.OperatorServiceClient) func() ([]*imsv1.Release, error) {
	return func() ([]*imsv1.Release, error) {
		r, err := c.ListReleases(ctx, connect.NewRequest(&imsv1.ListReleasesRequest{PageSize: 200}))
		if err != nil {
			return nil, err
		}
		return r.Msg.Releases, nil
	}
}

func getRelease(ctx context.Context, c imsv1connect.OperatorServiceClient, id string) func() (*imsv1.Release, error) {
	return func() (*imsv1.Release, error) {
		r, err := c.GetRelease(ctx, connect.NewRequest(&imsv1.GetReleaseRequest{Id: id}))
		if err != nil {
			return nil, err
		}
		return r.Msg.Release, nil
	}
}

// changeRelease pauses, resumes or cancels release id.
func changeRelease(ctx context.Context, c imsv1connect.OperatorServiceClient, verb, id string) func() (*imsv1.Release, error) {
	reason := "from the console"
	return func() (*imsv1.Release, error) {
		switch verb {
		case "pause":
			r, err := c.PauseRelease(ctx, connect.NewRequest(&imsv1.PauseReleaseRequest{Id: id, Reason: reason}))
			if err != nil {
				return nil, err
			}
			return r.Msg.Release, nil
		case "resume":
			r, err := c.ResumeRelease(ctx, connect.NewRequest(&imsv1.ResumeReleaseRequest{Id: id, Reason: reason}))
			if err != nil {
				return nil, err
			}
			return r.Msg.Release, nil
		}
		r, err := c.CancelRelease(ctx, connect.NewRequest(&imsv1.CancelReleaseRequest{Id: id, Reason: reason}))
		if err != nil {
			return nil, err
		}
		return r.Msg.Release, nil
	}
}
