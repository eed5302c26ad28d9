package agent

import (
	"context"
	"github.com/byoc-dev/byoc/internal/syncbuf"
	"strings"
	"sync"
	"testing"
	"time"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// failRunner fails every job with an error, recording the job it saw.
type failRunner struct {
	mu   sync.Mutex
	jobs []Job
}

func (r *failRunner) Run(_ context.Context, job Job, _ func(int32, string)) Outcome {
	r.mu.Lock()
	r.jobs = append(r.jobs, job)
	r.mu.Unlock()
	return Outcome{Outcome: agentv1.Outcome_OUTCOME_FAILED, ExitCode: -1, Error: "apply exploded: disk full",
		PlannedChanges: []*agentv1.PlannedChange{{Address: "disk.d1", Action: "replace", Summary: "grow"}}}
}

// The runner gets the assignment's component name; the agent's own log
// of a failed job carries the error text, as does its result, with the
// planned changes; the job's own log ends with the error.
func TestFailedJobIsLoggedWithItsError(t *testing.T) {
	var logBuf syncbuf.Buffer
	r := &failRunner{}
	f := &fakeIMS{}
	startFakeIn(t, f, r, t.TempDir(), &logBuf)
	fs := <-f.streams
	as := f.assign("job_a", 7, "ins_1")
	as.GetAssignment().Component = "db"
	f.sign(as.GetAssignment(), f.key, time.Now().Add(time.Minute))
	fs.down <- as
	ack := fs.next(t).GetAck()
	fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: ack.WriteId}}}
	var res *agentv1.JobResult
	var jobLog []string
	for res == nil {
		m := fs.next(t)
		if lines := m.GetLogs(); lines != nil {
			for _, l := range lines.Lines {
				jobLog = append(jobLog, l.Text)
			}
			fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: lines.WriteId}}}
		}
		res = m.GetResult()
	}
	if res.Error != "apply exploded: disk full" || len(res.PlannedChanges) != 1 || res.PlannedChanges[0].Address != "disk.d1" {
		t.Errorf("result %v", res)
	}
	if len(jobLog) == 0 || jobLog[len(jobLog)-1] != "[agentd] failed: apply exploded: disk full" {
		t.Errorf("the job's log %q does not end with its error", jobLog)
	}
	r.mu.Lock()
	if len(r.jobs) != 1 || r.jobs[0].Component != "db" {
		t.Errorf("runner saw %+v, want one job of component db", r.jobs)
	}
	r.mu.Unlock()
	eventually(t, "the job's end in the agent's log", func() bool { return strings.Contains(logBuf.String(), "job finished") })
	if line := logBuf.String(); !strings.Contains(line, "outcome=OUTCOME_FAILED") || !strings.Contains(line, `error="apply exploded: disk full"`) {
		t.Errorf("agent log:\n%s", line)
	}
}
