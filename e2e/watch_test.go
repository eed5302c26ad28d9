package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// watcher receives a WatchInstalls stream in the background and keeps the
// latest status of every install it was told about.
type watcher struct {
	msgs chan *imsv1.WatchInstallsResponse
	errc chan error
}

func watch(t *testing.T, ims *cluster.IMS) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := ims.Admin().WatchInstalls(ctx, connect.NewRequest(&imsv1.WatchInstallsRequest{}))
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	w := &watcher{msgs: make(chan *imsv1.WatchInstallsResponse, 100), errc: make(chan error, 1)}
	go func() {
		for st.Receive() {
			w.msgs <- st.Msg()
		}
		w.errc <- st.Err()
	}()
	return w
}

// until waits for a message whose status of install name satisfies cond.
func (w *watcher) until(t *testing.T, what, name string, cond func(*imsv1.InstallStatus) bool) *imsv1.InstallStatus {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-w.msgs:
			for _, s := range m.Installs {
				if s.Install.Name == name && cond(s) {
					return s
				}
			}
		case err := <-w.errc:
			t.Fatalf("watch ended waiting for %s: %v", what, err)
		case <-deadline:
			t.Fatalf("no watch update within 10s: %s", what)
		}
	}
}

func TestWatchInstallsPushesChanges(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	cluster.NewInstall(t, c, "shop", "acme")

	w := watch(t, ims)
	first := <-w.msgs
	if !first.Snapshot || len(first.Installs) != 1 || first.Installs[0].Install.Name != "acme" || first.Installs[0].AppName != "shop" {
		t.Fatalf("first message is not a snapshot of acme: %v", first)
	}
	if first.Installs[0].Install.Agent != nil {
		t.Fatalf("no agent enrolled yet, got %v", first.Installs[0].Install.Agent)
	}

	// A new install, an agent coming online, a job queued, running and done:
	// each is pushed without the watcher asking again.
	_, tok := cluster.NewInstall(t, c, "shop", "globex")
	w.until(t, "globex appears", "globex", func(*imsv1.InstallStatus) bool { return true })

	a := cluster.EnrollRaw(t, ims.URL(), tok)
	a.Connect(t, 1)
	w.until(t, "globex's agent connected", "globex", func(s *imsv1.InstallStatus) bool {
		return s.Install.Agent != nil && s.Install.Agent.Connected
	})
	job := enqueue(t, c, "globex", "true", 0)
	w.until(t, "globex running a job", "globex", func(s *imsv1.InstallStatus) bool { return s.RunningJobs == 1 })
	as := a.Assignment(t)
	if as.JobId != job.Id {
		t.Fatalf("assigned %s, want %s", as.JobId, job.Id)
	}
	a.Answer(t, a.Send(t, cluster.Result(job.Id, as.FencingToken, agentv1.Outcome_OUTCOME_SUCCEEDED, 0)))
	w.until(t, "globex idle again", "globex", func(s *imsv1.InstallStatus) bool { return s.RunningJobs == 0 && s.QueuedJobs == 0 })
	a.Close()
	w.until(t, "globex's agent disconnected", "globex", func(s *imsv1.InstallStatus) bool {
		return s.Install.Agent != nil && !s.Install.Agent.Connected
	})
}

func TestJobLogsTailAndPageBack(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	_, tok := cluster.NewInstall(t, c, "shop", "acme")
	a := cluster.EnrollRaw(t, ims.URL(), tok)
	a.Connect(t, 1)
	job := enqueue(t, c, "acme", "true", 0)
	as := a.Assignment(t)
	a.Answer(t, a.Send(t, cluster.Ack(job.Id, as.FencingToken)))
	for i := 1; i <= 30; i++ {
		a.Answer(t, a.Send(t, cluster.Logs1(job.Id, as.FencingToken, int64(i), fmt.Sprintf("line %d", i))))
	}

	read := func(req *imsv1.StreamJobLogsRequest) ([]string, error) {
		req.JobId = job.Id
		st, err := c.StreamJobLogs(context.Background(), connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		var out []string
		for st.Receive() {
			out = append(out, cluster.Texts(st.Msg().Lines)...)
		}
		return out, st.Err()
	}
	got, err := read(&imsv1.StreamJobLogsRequest{Tail: 3})
	if err != nil || strings.Join(got, ",") != "line 28,line 29,line 30" {
		t.Fatalf("tail 3 = %q, %v", got, err)
	}
	got, err = read(&imsv1.StreamJobLogsRequest{BeforeAttempt: 1, BeforeSeq: 28, Limit: 2})
	if err != nil || strings.Join(got, ",") != "line 26,line 27" {
		t.Fatalf("2 before 28 = %q, %v", got, err)
	}
	got, err = read(&imsv1.StreamJobLogsRequest{BeforeAttempt: 1, BeforeSeq: 2, Limit: 10})
	if err != nil || strings.Join(got, ",") != "line 1" {
		t.Fatalf("before the second line = %q, %v", got, err)
	}
	got, err = read(&imsv1.StreamJobLogsRequest{AfterAttempt: 1, AfterSeq: 10, Limit: 3})
	if err != nil || strings.Join(got, ",") != "line 11,line 12,line 13" {
		t.Fatalf("3 after 10 = %q, %v", got, err)
	}
	got, err = read(&imsv1.StreamJobLogsRequest{Limit: 1000})
	if err != nil || len(got) != 30 {
		t.Fatalf("a page larger than the log = %d lines, %v", len(got), err)
	}
	for _, tc := range []struct {
		req   *imsv1.StreamJobLogsRequest
		field string
	}{
		{&imsv1.StreamJobLogsRequest{BeforeAttempt: 1, BeforeSeq: 5, Follow: true}, "follow"},
		{&imsv1.StreamJobLogsRequest{BeforeAttempt: 1}, "before_seq"},
		{&imsv1.StreamJobLogsRequest{Tail: 5, AfterSeq: 2, AfterAttempt: 1}, "tail"},
		{&imsv1.StreamJobLogsRequest{Tail: -1}, "tail"},
		{&imsv1.StreamJobLogsRequest{BeforeSeq: 5, BeforeAttempt: 1, Limit: 20000}, "limit"},
		{&imsv1.StreamJobLogsRequest{Limit: 5, Follow: true}, "limit"},
	} {
		_, err := read(tc.req)
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%v: got %v, want invalid_argument naming %s", tc.req, err, tc.field)
		}
	}
}
