package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// MaxLineBytes is the longest log line sent to imsd; longer output is split.
const MaxLineBytes = 64 << 10

// Log streams.
const (
	StreamStdout int32 = 1
	StreamStderr int32 = 2
	StreamSystem int32 = 3
)

// Reasons a job's context ends. The runner sees only ctx.Done; the agent
// tells from the cause what to report.
var (
	errTimedOut = errors.New("job timed out")
)

type cancelled struct{ reason string }

func (c cancelled) Error() string { return "cancelled: " + c.reason }

// jobRun is one job the agent holds, from assignment until imsd confirms its
// result. All fields but the immutable ones are guarded by Agent.mu.
type jobRun struct {
	id      string
	token   int64
	attempt int32
	cancel  context.CancelCauseFunc

	lines   []*agentv1.LogLine // unconfirmed lines, in seq order
	sent    int                // lines[:sent] are in flight on the current stream
	nextSeq int64
	dropped int

	ackSent, ackDone bool
	result           *agentv1.JobResult
	resultSent       bool
}

// start registers an assignment and runs it in a goroutine. A duplicate
// assignment (resent after a reconnect) is ignored.
func (a *Agent) start(ctx context.Context, as *agentv1.JobAssignment) {
	a.mu.Lock()
	if _, ok := a.jobs[as.JobId]; ok {
		a.mu.Unlock()
		return
	}
	timeout := time.Duration(as.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Hour
	}
	jctx, cancel := context.WithCancelCause(ctx)
	jctx, cancelTimeout := context.WithTimeoutCause(jctx, timeout, errTimedOut)
	j := &jobRun{id: as.JobId, token: as.FencingToken, attempt: as.Attempt, cancel: cancel}
	a.jobs[j.id] = j
	a.mu.Unlock()
	a.kickNow()

	job := Job{
		ID: as.JobId, InstallID: as.InstallId, Attempt: as.Attempt,
		ComponentType: as.ComponentType, Operation: as.Operation,
		Config: as.Config.AsMap(), Timeout: timeout,
	}
	a.log.Info("job started", "job", j.id, "attempt", j.attempt, "type", job.ComponentType, "operation", job.Operation)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer cancelTimeout()
		out := a.cfg.Runner.Run(jctx, job, func(stream int32, text string) { a.appendLog(j, stream, text) })
		cause := context.Cause(jctx)
		var c cancelled
		switch {
		case errors.Is(cause, errTimedOut):
			out = Outcome{Outcome: agentv1.Outcome_OUTCOME_TIMED_OUT, ExitCode: -1,
				Error: fmt.Sprintf("timed out after %s; the plugin and its processes were killed", timeout)}
		case errors.As(cause, &c):
			out = Outcome{Outcome: agentv1.Outcome_OUTCOME_CANCELLED, ExitCode: -1,
				Error: c.reason + "; the plugin and its processes were killed"}
		case cause != nil:
			// The lease was lost or the agent is stopping: this agent no
			// longer owns the job and must not write a result.
			a.log.Warn("job abandoned", "job", j.id, "cause", cause)
			a.mu.Lock()
			delete(a.jobs, j.id)
			a.mu.Unlock()
			return
		}
		a.finish(j, out)
	}()
}

// appendLog queues one line (split if long) for imsd.
func (a *Agent) appendLog(j *jobRun, stream int32, text string) {
	now := timestamppb.Now()
	a.mu.Lock()
	for first := true; first || len(text) > 0; first = false {
		chunk := text
		if len(chunk) > MaxLineBytes {
			cut := MaxLineBytes
			for cut > 0 && !utf8.RuneStart(text[cut]) {
				cut--
			}
			chunk = text[:cut]
		}
		text = text[len(chunk):]
		if !utf8.ValidString(chunk) {
			chunk = strings.ToValidUTF8(chunk, "\uFFFD")
		}
		j.nextSeq++
		j.lines = append(j.lines, &agentv1.LogLine{Seq: j.nextSeq, Time: now, Stream: stream, Text: chunk})
		if len(j.lines) > a.cfg.MaxBufferedLines && j.sent < len(j.lines)-1 {
			// Drop the oldest line not yet in flight; say so at the end.
			j.lines = append(j.lines[:j.sent], j.lines[j.sent+1:]...)
			j.dropped++
		}
	}
	a.mu.Unlock()
	select {
	case a.logKick <- struct{}{}:
	default:
	}
}

// finish records a job's outcome; the session sends it once every log line
// before it is confirmed.
func (a *Agent) finish(j *jobRun, out Outcome) {
	a.log.Info("job finished", "job", j.id, "outcome", out.Outcome, "exit_code", out.ExitCode)
	a.mu.Lock()
	if j.dropped > 0 {
		j.nextSeq++
		j.lines = append(j.lines, &agentv1.LogLine{Seq: j.nextSeq, Time: timestamppb.Now(), Stream: StreamSystem,
			Text: fmt.Sprintf("[agentd] %d log lines were dropped while imsd could not be reached", j.dropped)})
	}
	j.result = &agentv1.JobResult{
		JobId: j.id, FencingToken: j.token, Outcome: out.Outcome, ExitCode: out.ExitCode,
		Error: out.Error, Outputs: out.Outputs, LastSeq: j.nextSeq,
	}
	a.mu.Unlock()
	a.kickNow()
}

func (a *Agent) kickNow() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}
