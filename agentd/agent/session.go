package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// maxBatch is the most log lines sent in one write.
const maxBatch = 500

type writeKind int

const (
	writeAck writeKind = iota
	writeLogs
	writeResult
)

// writeRef remembers what a write in flight was, to apply imsd's answer.
type writeRef struct {
	job  *jobRun
	kind writeKind
	upTo int64 // last seq of a logs write
}

type clientStream = connect.BidiStreamForClient[agentv1.ConnectRequest, agentv1.ConnectResponse]

// session holds one stream until it breaks. ctx is the agent's, so jobs
// started here outlive the stream.
func (a *Agent) session(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := a.client.Connect(sctx)
	defer st.CloseRequest()
	if err := st.Send(nil); err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	m, err := st.Receive()
	if err != nil {
		return fmt.Errorf("read challenge: %w", err)
	}
	ch := m.GetChallenge()
	if ch == nil {
		return errors.New("protocol: imsd did not open with a challenge")
	}
	host, _ := os.Hostname()
	if err := st.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Hello{Hello: &agentv1.Hello{
		AgentId:   a.id.AgentID,
		Signature: agentproto.SignChallenge(a.id.PrivateKey, a.id.AgentID, ch.Nonce),
		Capacity:  int32(a.cfg.Capacity),
		Running:   a.leases(),
		Version:   a.cfg.Version,
		Hostname:  host,
	}}}); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	m, err = st.Receive()
	if err != nil {
		return fmt.Errorf("read welcome: %w", err)
	}
	w := m.GetWelcome()
	if w == nil {
		return errors.New("protocol: imsd did not answer hello with a welcome")
	}
	for _, id := range w.Lost {
		a.abandon(id, "its lease was lost while imsd could not be reached")
	}
	a.resetInFlight()
	a.setConnected(true)
	a.log.Info("connected to imsd", "url", a.cfg.IMSURL, "reattached", len(w.Reattached), "lost", len(w.Lost))

	in := make(chan *agentv1.ConnectResponse)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := st.Receive()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case in <- m:
			case <-sctx.Done():
				return
			}
		}
	}()

	hb := time.NewTicker(time.Duration(max(w.HeartbeatIntervalMs, 10)) * time.Millisecond)
	defer hb.Stop()
	writes := make(map[uint64]writeRef)
	var nextWrite uint64
	var flushC <-chan time.Time
	if err := a.flush(st, writes, &nextWrite); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-recvErr:
			return err
		case <-hb.C:
			if err := st.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Running: a.leases()}}}); err != nil {
				return err
			}
		case <-a.kick:
			if err := a.flush(st, writes, &nextWrite); err != nil {
				return err
			}
		case <-a.logKick:
			if flushC == nil {
				flushC = time.After(a.cfg.FlushInterval)
			}
		case <-flushC:
			flushC = nil
			if err := a.flush(st, writes, &nextWrite); err != nil {
				return err
			}
		case m := <-in:
			if err := a.handle(ctx, m, writes); err != nil {
				return err
			}
			if err := a.flush(st, writes, &nextWrite); err != nil {
				return err
			}
		}
	}
}

func (a *Agent) handle(ctx context.Context, m *agentv1.ConnectResponse, writes map[uint64]writeRef) error {
	switch msg := m.Msg.(type) {
	case *agentv1.ConnectResponse_Assignment:
		a.start(ctx, msg.Assignment)
	case *agentv1.ConnectResponse_Cancel:
		a.mu.Lock()
		j := a.jobs[msg.Cancel.JobId]
		a.mu.Unlock()
		if j != nil {
			reason := msg.Cancel.Reason
			if reason == "" {
				reason = "cancelled by an operator"
			}
			a.log.Info("job cancel requested", "job", j.id, "reason", reason)
			j.cancel(cancelled{reason: reason})
		}
	case *agentv1.ConnectResponse_Accepted:
		ref, ok := writes[msg.Accepted.WriteId]
		if !ok {
			return nil
		}
		delete(writes, msg.Accepted.WriteId)
		a.mu.Lock()
		j := ref.job
		switch ref.kind {
		case writeAck:
			j.ackDone = true
		case writeLogs:
			k := 0
			for k < len(j.lines) && j.lines[k].Seq <= ref.upTo {
				k++
			}
			j.lines = j.lines[k:]
			j.sent = max(j.sent-k, 0)
		case writeResult:
			if a.jobs[j.id] == j {
				delete(a.jobs, j.id)
			}
		}
		a.mu.Unlock()
	case *agentv1.ConnectResponse_Rejected:
		r := msg.Rejected
		delete(writes, r.WriteId)
		a.abandon(r.JobId, "imsd refused a write ("+r.Code+": "+r.Message+")")
	case *agentv1.ConnectResponse_Challenge, *agentv1.ConnectResponse_Welcome:
		return errors.New("protocol: unexpected challenge or welcome mid-stream")
	}
	return nil
}

// abandon stops a job this agent no longer owns and forgets it, without
// writing anything more for it.
func (a *Agent) abandon(jobID, why string) {
	a.mu.Lock()
	j := a.jobs[jobID]
	delete(a.jobs, jobID)
	a.mu.Unlock()
	if j != nil {
		a.log.Warn("stopping job", "job", jobID, "attempt", j.attempt, "why", why)
		j.cancel(errors.New(why))
	}
}

// leases lists the jobs the agent holds, for hello and heartbeats.
func (a *Agent) leases() []*agentv1.RunningJob {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*agentv1.RunningJob, 0, len(a.jobs))
	for _, j := range a.jobs {
		out = append(out, &agentv1.RunningJob{JobId: j.id, FencingToken: j.token})
	}
	return out
}

// resetInFlight marks every unconfirmed write as unsent, for a new stream.
func (a *Agent) resetInFlight() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, j := range a.jobs {
		j.sent = 0
		j.ackSent = j.ackDone
		j.resultSent = false
	}
}

// flush sends every write not yet in flight: acks first, then log batches,
// then results whose lines are all confirmed.
func (a *Agent) flush(st *clientStream, writes map[uint64]writeRef, next *uint64) error {
	var out []*agentv1.ConnectRequest
	a.mu.Lock()
	for _, j := range a.jobs {
		if !j.ackSent {
			j.ackSent = true
			*next++
			writes[*next] = writeRef{job: j, kind: writeAck}
			out = append(out, &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Ack{Ack: &agentv1.JobAck{WriteId: *next, JobId: j.id, FencingToken: j.token}}})
		}
		for j.sent < len(j.lines) {
			end := min(j.sent+maxBatch, len(j.lines))
			batch := j.lines[j.sent:end:end]
			j.sent = end
			*next++
			writes[*next] = writeRef{job: j, kind: writeLogs, upTo: batch[len(batch)-1].Seq}
			out = append(out, &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Logs{Logs: &agentv1.JobLogs{WriteId: *next, JobId: j.id, FencingToken: j.token, Lines: batch}}})
		}
		if j.result != nil && !j.resultSent && j.ackDone && len(j.lines) == 0 {
			j.resultSent = true
			*next++
			r := j.result
			writes[*next] = writeRef{job: j, kind: writeResult}
			out = append(out, &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Result{Result: &agentv1.JobResult{
				WriteId: *next, JobId: r.JobId, FencingToken: r.FencingToken, Outcome: r.Outcome,
				ExitCode: r.ExitCode, Error: r.Error, Outputs: r.Outputs, LastSeq: r.LastSeq,
			}}})
		}
	}
	a.mu.Unlock()
	for _, m := range out {
		if err := st.Send(m); err != nil {
			return err
		}
	}
	return nil
}
