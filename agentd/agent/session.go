package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// maxBatch is the most log lines sent in one write, and maxBatchBytes
// the most text: 500 lines of MaxLineBytes would be 32 MiB, twice what
// imsd reads in one message.
const (
	maxBatch      = 500
	maxBatchBytes = 4 << 20
)

// batchEnd is the end of the log batch that starts at lines[from]: at
// most maxBatch lines and maxBatchBytes of text, and at least one line.
func batchEnd(lines []*agentv1.LogLine, from int) int {
	end, size := from, 0
	for end < len(lines) && end-from < maxBatch {
		size += len(lines[end].GetText())
		if end > from && size > maxBatchBytes {
			break
		}
		end++
	}
	return end
}

type writeKind int

const (
	writeAck writeKind = iota
	writeLogs
	writeResult
	writeRefusal
)

// writeRef remembers what a write in flight was, to apply imsd's answer.
type writeRef struct {
	job    *jobRun
	ref    *refusal // of a writeRefusal
	kind   writeKind
	upTo   int64     // last seq of a logs write
	sentAt time.Time // when an ack left, for the lease it renews
}

// heartbeatRef remembers a heartbeat in flight: when it left and the
// leases it named, so that imsd's confirmation renews exactly those.
type heartbeatRef struct {
	sentAt time.Time
	tokens map[string]int64
}

type clientStream = connect.BidiStreamForClient[agentv1.ConnectRequest, agentv1.ConnectResponse]

// session holds one stream until it breaks. ctx is the agent's, so jobs
// started here outlive the stream.
func (a *Agent) session(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Support shells live on the stream that opened them: those it
	// started end with it, and one still starting when it ends ends at
	// once (streamGone, closed under shellMu).
	streamGone := make(chan struct{})
	defer a.endShells("ended: the agent's stream to imsd broke", streamGone)
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
	running, held := a.leases()
	helloAt := a.now()
	auditSeq, _ := a.auditCopy.Head()
	sst, err := a.openChannel(st, ch, &agentv1.Hello{
		AgentId:     a.id.AgentID,
		Signature:   agentproto.SignChallenge(a.privateKey(), a.id.AgentID, ch.Nonce),
		Capacity:    int32(a.cfg.Capacity),
		Running:     running,
		Version:     a.cfg.Version,
		Hostname:    host,
		Instance:    a.instance,
		Permissions: a.permissionsProto(),
		AuditCopy:   true,
		AuditSeq:    auditSeq,
		Stack:       a.cfg.Stack,
		Condition:   a.condition(),
		NextKey:     a.nextKeyHello(),
		Update:      a.updateReport(),
		Plugins:     a.pluginReport(),
		// check verifies batch job signatures (agentproto.VerifyJobBatch).
		BatchSignatures: true,
	})
	if err != nil {
		return a.helloRefusal(err, ch)
	}
	m, err = sst.Receive()
	if err != nil {
		return fmt.Errorf("read welcome: %w", err)
	}
	w := m.GetWelcome()
	if w == nil {
		return errors.New("protocol: imsd did not answer hello with a welcome")
	}
	if w.InstallId != a.id.InstallID {
		return fmt.Errorf("%w: the server at %s welcomed this agent as one of install %q, but it belongs to install %q; refusing its jobs: point --ims ($BYOC_IMS_URL) at the imsd this agent enrolled with (%s)",
			errWrongInstall, a.cfg.IMSURL, w.InstallId, a.id.InstallID, a.id.IMSURL)
	}
	if w.LeaseDurationMs <= 0 || w.HeartbeatIntervalMs <= 0 || w.HeartbeatIntervalMs >= w.LeaseDurationMs {
		return fmt.Errorf("protocol: welcome: heartbeat interval %dms and lease %dms: want 0 < heartbeat < lease", w.HeartbeatIntervalMs, w.LeaseDurationMs)
	}
	a.learnKeys(w.KeyChain, nil)
	if r := a.rotation(); r != nil {
		if err := a.commitRotation(r, w.NextKeyId); err != nil {
			return err
		}
	}
	heartbeat := time.Duration(w.HeartbeatIntervalMs) * time.Millisecond
	a.mu.Lock()
	a.lease = time.Duration(w.LeaseDurationMs) * time.Millisecond
	a.heartbeat = heartbeat
	for _, id := range w.Reattached {
		if j := a.jobs[id]; j != nil && j.token == held[id] {
			a.renewLocked(j, helloAt)
		}
	}
	a.mu.Unlock()
	for _, id := range w.Lost {
		a.abandon(id, held[id], "its lease was lost while imsd could not be reached")
	}
	a.resetInFlight()
	a.setConnected(true)
	a.log.Info("connected to imsd", "url", a.cfg.IMSURL, "reattached", len(w.Reattached), "lost", len(w.Lost))

	in := make(chan *agentv1.ConnectResponse)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := sst.Receive()
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

	hb := time.NewTicker(max(heartbeat, 10*time.Millisecond))
	defer hb.Stop()
	ss := &sessionState{writes: make(map[uint64]writeRef), beats: make(map[uint64]heartbeatRef), streamGone: streamGone}
	var flushC <-chan time.Time
	// The recordings imsd has not confirmed keeping go out on this
	// stream, after what shellOut holds already (session ends).
	a.wg.Add(1)
	go a.sendRecordings(streamGone)
	if err := a.flush(sst, ss); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-recvErr:
			return err
		case <-hb.C:
			// A stream whose heartbeats go unanswered while jobs are held
			// is as good as dead: reconnect long before a lease runs out
			// rather than wait for HTTP/2 pings to notice.
			if oldest, ok := ss.oldestBeat(); ok && a.elapsedSince(oldest) > a.deadAfter() {
				return fmt.Errorf("imsd has not answered a heartbeat for %s", a.elapsedSince(oldest).Round(time.Millisecond))
			}
			if err := a.heartbeatNow(sst, ss); err != nil {
				return err
			}
		case <-a.rotKick:
			return errReconnect
		case m := <-a.shellOut:
			if err := sst.Send(m); err != nil {
				if m.GetShell().GetEnded() != nil {
					select {
					case a.shellOut <- m: // for the next stream
					default:
					}
				}
				return err
			}
			if e := m.GetShell().GetEnded(); e != nil && !e.Refused {
				a.shellEndSent(m.GetShell().SessionId)
			}
		case <-a.permKick:
			// The customer changed their permissions: tell imsd now.
			if err := a.heartbeatNow(sst, ss); err != nil {
				return err
			}
		case <-a.kick:
			if err := a.flush(sst, ss); err != nil {
				return err
			}
		case b := <-a.telemetry.Batches():
			// A batch read under a setting imsd has not heard of yet
			// follows the heartbeat that reports it.
			select {
			case <-a.permKick:
				if err := a.heartbeatNow(sst, ss); err != nil {
					return err
				}
			default:
			}
			if err := a.sendTelemetry(sst, b); err != nil {
				return err
			}
		case <-a.logKick:
			if flushC == nil {
				flushC = time.After(a.cfg.FlushInterval)
			}
		case <-flushC:
			flushC = nil
			if err := a.flush(sst, ss); err != nil {
				return err
			}
		case m := <-in:
			if err := a.handle(ctx, m, ss); err != nil {
				return err
			}
			if err := a.flush(sst, ss); err != nil {
				return err
			}
		}
	}
}

// heartbeatNow sends a heartbeat naming the jobs held and the customer's
// permission state.
func (a *Agent) heartbeatNow(st *agentchannel.AgentStream, ss *sessionState) error {
	perms := a.permissionsProto()
	running, tokens := a.leases()
	ss.nextBeat++
	if len(running) > 0 {
		ss.beats[ss.nextBeat] = heartbeatRef{sentAt: a.now(), tokens: tokens}
	}
	return st.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{
		Running: running, Seq: ss.nextBeat, Permissions: perms, Condition: a.condition(), Update: a.updateReport(),
		Plugins: a.pluginReport()}}})
}

// condition is the agent's own condition for imsd's health: how full the
// state directory's file system is, and how many jobs failed in a row.
func (a *Agent) condition() *agentv1.AgentCondition {
	c := &agentv1.AgentCondition{FailedInRow: uint32(max(a.failedInRow.Load(), 0))}
	var st syscall.Statfs_t
	if a.cfg.StateDir != "" && syscall.Statfs(a.cfg.StateDir, &st) == nil {
		// As df counts it: of the blocks an unprivileged user may use.
		used := st.Blocks - st.Bfree
		if total := used + st.Bavail; total > 0 {
			c.DiskUsedPercent = uint32((used*100 + total - 1) / total)
		}
	}
	return c
}

// sessionState is what one stream keeps about its writes and heartbeats
// in flight.
type sessionState struct {
	writes    map[uint64]writeRef
	nextWrite uint64
	beats     map[uint64]heartbeatRef
	nextBeat  uint64
	// auditLogged is set once a failure to keep audit records was logged.
	auditLogged bool
	// streamGone is closed when the stream ended (endShells).
	streamGone chan struct{}
}

// oldestBeat is when the oldest unanswered heartbeat that named jobs left.
func (ss *sessionState) oldestBeat() (time.Time, bool) {
	var oldest time.Time
	found := false
	for _, b := range ss.beats {
		if !found || b.sentAt.Before(oldest) {
			oldest, found = b.sentAt, true
		}
	}
	return oldest, found
}

func (a *Agent) handle(ctx context.Context, m *agentv1.ConnectResponse, ss *sessionState) error {
	switch msg := m.Msg.(type) {
	case *agentv1.ConnectResponse_Audit:
		a.takeAudit(msg.Audit, ss)
	case *agentv1.ConnectResponse_TelemetryConfig:
		a.takeTelemetryConfig(msg.TelemetryConfig)
	case *agentv1.ConnectResponse_Assignment:
		a.assign(ctx, msg.Assignment)
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
	case *agentv1.ConnectResponse_Renewed:
		r := msg.Renewed
		b, ok := ss.beats[r.HeartbeatSeq]
		if !ok {
			return nil
		}
		// Answers come in order: an older heartbeat left unanswered was
		// answered by a rejection or never will be.
		for seq := range ss.beats {
			if seq <= r.HeartbeatSeq {
				delete(ss.beats, seq)
			}
		}
		a.mu.Lock()
		for _, id := range r.JobIds {
			if j := a.jobs[id]; j != nil && j.token == b.tokens[id] && (j.ackDone || j.result != nil) {
				a.renewLocked(j, b.sentAt)
			}
		}
		a.mu.Unlock()
	case *agentv1.ConnectResponse_Accepted:
		ref, ok := ss.writes[msg.Accepted.WriteId]
		if !ok {
			return nil
		}
		delete(ss.writes, msg.Accepted.WriteId)
		a.mu.Lock()
		if ref.kind == writeRefusal {
			delete(a.refusals, ref.ref.key)
			a.mu.Unlock()
			return nil
		}
		j := ref.job
		switch ref.kind {
		case writeAck:
			j.ackDone = true
			if a.jobs[j.id] == j {
				// The ack renewed the lease: only now does the attempt
				// start, so it never runs without imsd's word that this
				// agent holds it; and never without the record of its
				// ack in the agent's copy of the audit chain, which imsd
				// sent just before this answer.
				a.renewLocked(j, ref.sentAt)
				j.auditErr = a.ackRecordedLocked(j)
				a.beginLocked(j)
			}
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
		var token int64
		if ref, ok := ss.writes[r.WriteId]; ok && r.WriteId != 0 {
			delete(ss.writes, r.WriteId)
			if ref.kind == writeRefusal {
				// imsd did not take the report (the token was not one it
				// gave this agent): nothing more to do, and the job of
				// that id this agent may hold is none of its business.
				a.log.Warn("imsd did not take the report of a refused assignment", "job", r.JobId, "code", r.Code, "message", r.Message)
				a.mu.Lock()
				delete(a.refusals, ref.ref.key)
				a.mu.Unlock()
				return nil
			}
			token = ref.job.token
		}
		a.abandon(r.JobId, token, "imsd refused a write ("+r.Code+": "+r.Message+")")
	case *agentv1.ConnectResponse_UpdateOffer:
		a.updateOffer(ctx, msg.UpdateOffer)
	case *agentv1.ConnectResponse_UpdateWithdrawal:
		a.updateWithdrawal(ctx, msg.UpdateWithdrawal)
	case *agentv1.ConnectResponse_ShellOpen:
		// Counted from here, on Run's goroutine, so that Run's Wait
		// also waits for a session still starting (and for the
		// runShell it adds).
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.openShell(ctx, msg.ShellOpen, ss.streamGone)
		}()
	case *agentv1.ConnectResponse_ShellInput:
		a.shellInput(msg.ShellInput)
	case *agentv1.ConnectResponse_RecordingKept:
		a.recordingKept(msg.RecordingKept)
	case *agentv1.ConnectResponse_Challenge, *agentv1.ConnectResponse_Welcome:
		return errors.New("protocol: unexpected challenge or welcome mid-stream")
	}
	return nil
}

// abandon stops a job this agent no longer owns and forgets it, without
// writing anything more for it. With token non-zero, only that attempt.
func (a *Agent) abandon(jobID string, token int64, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if j := a.jobs[jobID]; j != nil && (token == 0 || j.token == token) {
		a.stopLocked(j, why)
	}
}

// leases lists the jobs the agent holds, for hello and heartbeats, with
// the token each was named with.
func (a *Agent) leases() ([]*agentv1.RunningJob, map[string]int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*agentv1.RunningJob, 0, len(a.jobs))
	tokens := make(map[string]int64, len(a.jobs))
	for _, j := range a.jobs {
		out = append(out, &agentv1.RunningJob{JobId: j.id, FencingToken: j.token})
		tokens[j.id] = j.token
	}
	return out, tokens
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
	for _, r := range a.refusals {
		r.sent = false
	}
}

// flush sends every write not yet in flight: acks first, then log batches,
// then results whose lines are all confirmed.
func (a *Agent) flush(st *agentchannel.AgentStream, ss *sessionState) error {
	var out []*agentv1.ConnectRequest
	now := a.now()
	a.mu.Lock()
	for _, j := range a.jobs {
		if !j.ackSent {
			j.ackSent = true
			ss.nextWrite++
			ss.writes[ss.nextWrite] = writeRef{job: j, kind: writeAck, sentAt: now}
			out = append(out, &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Ack{Ack: &agentv1.JobAck{WriteId: ss.nextWrite, JobId: j.id, FencingToken: j.token}}})
		}
		for j.sent < len(j.lines) {
			end := batchEnd(j.lines, j.sent)
			batch := j.lines[j.sent:end:end]
			j.sent = end
			ss.nextWrite++
			ss.writes[ss.nextWrite] = writeRef{job: j, kind: writeLogs, upTo: batch[len(batch)-1].Seq}
			out = append(out, &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Logs{Logs: &agentv1.JobLogs{WriteId: ss.nextWrite, JobId: j.id, FencingToken: j.token, Lines: batch}}})
		}
		if j.result != nil && !j.resultSent && j.ackDone && len(j.lines) == 0 {
			j.resultSent = true
			ss.nextWrite++
			// A copy with this stream's write id; every other field as
			// finish made it.
			r := proto.CloneOf(j.result)
			r.WriteId = ss.nextWrite
			ss.writes[ss.nextWrite] = writeRef{job: j, kind: writeResult}
			out = append(out, &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Result{Result: r}})
		}
	}
	for _, r := range a.refusals {
		if r.sent {
			continue
		}
		r.sent = true
		ss.nextWrite++
		ss.writes[ss.nextWrite] = writeRef{ref: r, kind: writeRefusal}
		out = append(out, &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Result{Result: &agentv1.JobResult{
			WriteId: ss.nextWrite, JobId: r.key.job, FencingToken: r.key.token,
			Outcome: agentv1.Outcome_OUTCOME_REFUSED, ExitCode: -1, Error: r.text,
		}}})
	}
	a.mu.Unlock()
	for _, m := range out {
		if err := st.Send(m); err != nil {
			return err
		}
	}
	return nil
}
