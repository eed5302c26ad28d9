package agentapi

// Handling the agent's messages (heartbeats, acks, logs, results) and the
// answers to its writes.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/rpcerr"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

func (c *conn) handle(ctx context.Context, m *agentv1.ConnectRequest) error {
	s := c.svc
	now := s.now()
	switch msg := m.Msg.(type) {
	case *agentv1.ConnectRequest_Heartbeat:
		if gap := now.Sub(c.lastHeard); !c.lastHeard.IsZero() && gap > 2*s.cfg.HeartbeatInterval+time.Second {
			// Late on a live stream (a congested path, an overloaded
			// agent): the agent counts degraded for a while.
			if err := s.store.RecordLateHeartbeat(ctx, c.agent.ID, now); err != nil {
				c.logger().WarnContext(ctx, "record late heartbeat", "err", err)
			}
		}
		c.touch(ctx, now)
		c.reportPermissions(ctx, msg.Heartbeat.Permissions, now)
		if err := c.reportTelemetry(ctx, msg.Heartbeat.Permissions, now); err != nil {
			return err
		}
		c.reportCondition(ctx, msg.Heartbeat.Condition, now)
		c.reportUpdate(ctx, msg.Heartbeat.Update, now)
		c.reportPlugins(ctx, msg.Heartbeat.Plugins, now)
		if asked, err := c.confirmOffer(ctx, msg.Heartbeat.Update, now); err != nil {
			return err
		} else if !asked {
			if err := c.refreshOffer(ctx, now); err != nil {
				return err
			}
		}
		renewed, lost, err := s.store.RenewLeases(ctx, c.agent.ID, leases(msg.Heartbeat.Running), s.reclaimAfter(now))
		if err != nil {
			return s.err(ctx, err)
		}
		if len(msg.Heartbeat.Running) > 0 {
			// The agent counts its own lease from confirmed renewals.
			if err := c.send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Renewed{Renewed: &agentv1.LeasesRenewed{
				HeartbeatSeq: msg.Heartbeat.Seq, JobIds: renewed,
			}}}); err != nil {
				return err
			}
		}
		for _, id := range lost {
			c.drop(id)
			if err := c.send(rejected(0, id, connect.CodeFailedPrecondition.String(), fmt.Sprintf("lease on job %s was lost; stop it", id))); err != nil {
				return err
			}
		}
		// A cancellation requested through another imsd replica reaches
		// the agent here. A single SQLite imsd delivers every cancellation
		// through the hub, so it skips these reads.
		if s.store.Dialect() == store.DialectSQLite {
			renewed = nil
		}
		for _, id := range renewed {
			j, err := s.store.GetJob(ctx, id)
			if err == nil && j.CancelRequested {
				if err := c.send(cancelMsg(id, j.CancelReason)); err != nil {
					return err
				}
			}
		}
		// The agent's copy of the chain keeps up: at the first heartbeat
		// after a result (one read for every job that ended since), else
		// once a minute, which spares a read per idle agent and heartbeat.
		if c.auditDirty || now.Sub(c.lastAudit) > time.Minute {
			c.lastAudit, c.auditDirty = now, false
			if err := c.sendAudit(ctx); err != nil {
				return err
			}
		}
		// Catch up on a wake-up that was lost, at most once a minute: the
		// hub's mark is exact within one imsd, and PostgreSQL replicas
		// relay enqueues to each other with NOTIFY.
		force := now.Sub(c.lastForced) > time.Minute
		if force {
			c.lastForced = now
		}
		// Jobs held for a maintenance window are claimed at the first
		// heartbeat after the windows open.
		if c.win.holding && !c.holdWindowBound(ctx, now) {
			force = true
		}
		return c.claim(ctx, force)
	case *agentv1.ConnectRequest_Ack:
		a := msg.Ack
		if err := s.store.AckJob(ctx, a.JobId, store.Writer{AgentID: c.agent.ID, FencingToken: a.FencingToken}, s.reclaimAfter(now), now); err != nil {
			return c.reject(ctx, a.WriteId, a.JobId, a.FencingToken, err)
		}
		// The agent starts the job only once it holds the record of this
		// ack in its own copy of the chain: it goes first.
		if err := c.sendAudit(ctx); err != nil {
			return err
		}
		return c.send(accepted(a.WriteId))
	case *agentv1.ConnectRequest_Logs:
		l := msg.Logs
		if len(l.Lines) > MaxLogBatch {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("logs.lines: %d lines exceed the %d-line batch limit", len(l.Lines), MaxLogBatch))
		}
		lines := make([]store.LogLine, len(l.Lines))
		for i, ln := range l.Lines {
			if len(ln.Text) > MaxLogLineBytes {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("logs.lines[%d].text: %d bytes exceed the %d-byte limit; split long lines", i, len(ln.Text), MaxLogLineBytes))
			}
			if ln.Seq < 1 {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("logs.lines[%d].seq: must be 1 or more, got %d", i, ln.Seq))
			}
			if ln.Stream < 1 || ln.Stream > 3 {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("logs.lines[%d].stream: must be 1 (stdout), 2 (stderr) or 3 (system), got %d", i, ln.Stream))
			}
			lines[i] = store.LogLine{Seq: ln.Seq, Time: ln.Time.AsTime(), Stream: int(ln.Stream), Text: ln.Text}
		}
		if err := s.store.AppendLogs(ctx, l.JobId, store.Writer{AgentID: c.agent.ID, FencingToken: l.FencingToken}, lines); err != nil {
			return c.reject(ctx, l.WriteId, l.JobId, l.FencingToken, err)
		}
		s.hub.NotifyLog(l.JobId)
		return c.send(accepted(l.WriteId))
	case *agentv1.ConnectRequest_Result:
		r := msg.Result
		state, ok := outcomes[r.Outcome]
		if !ok {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("result.outcome: must be succeeded, failed, cancelled, timed_out or refused, got %v", r.Outcome))
		}
		r.Error = CutUTF8(r.Error, MaxLogLineBytes)
		plan, err := plannedChanges(r.PlannedChanges)
		if err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		if err := checkPlanDigest(r); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		findings, err := policyFindings(r.PolicyFindings)
		if err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		verified, err := verifications(r.Verifications)
		if err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		res := store.Result{State: state, ExitCode: int(r.ExitCode), Error: r.Error, Outputs: r.Outputs, PlannedChanges: plan,
			PlanDigest: r.PlanDigest, PolicyFindings: findings, Drifted: r.Drifted, Verifications: verified}
		if state == store.JobSucceeded && c.agent.InstallID == store.VendorInstallID && r.Outputs[store.BuildOutDigest] != "" {
			// The build agent's result: the store records the build if
			// the job is a build job.
			b, err := store.BuildFromOutputs(r.JobId, r.Outputs, now)
			if err != nil {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("result.%w", err))
			}
			res.Build = &b
		}
		changed, err := s.store.FinishJob(ctx, r.JobId, store.Writer{AgentID: c.agent.ID, FencingToken: r.FencingToken}, res, now)
		if err != nil {
			return c.reject(ctx, r.WriteId, r.JobId, r.FencingToken, err)
		}
		c.drop(r.JobId)
		if changed { // not a result resent after a lost reply
			if r.Outcome == agentv1.Outcome_OUTCOME_REFUSED && strings.HasPrefix(r.Error, RefusedPrefix) {
				// The agent refused the assignment itself: a signature
				// that did not verify, a replay, or the customer's
				// permission state. Worth an operator's eye either way.
				c.logger().ErrorContext(ctx, "agent refused a job", "job", r.JobId, "error", r.Error)
			}
			s.obs.Finished(state)
			s.hub.NotifyLog(r.JobId)
			s.hub.FleetChanged()
		}
		if err := c.send(accepted(r.WriteId)); err != nil {
			return err
		}
		// The job's end reaches the agent's copy at the next heartbeat
		// (or ack): a read per result cost a third of a job's CPU.
		c.auditDirty = true
		return c.claim(ctx, false)
	case *agentv1.ConnectRequest_Telemetry:
		return c.takeTelemetry(msg.Telemetry, now)
	case *agentv1.ConnectRequest_Shell:
		// A support shell's event, for the operator's call that opened
		// it (operatorapi.SupportShell); one nobody waits for is dropped,
		// but for a session's end, audited if no one did (lateShellEnd).
		if len(msg.Shell.Output) > agentproto.MaxShellData {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("shell.output: %d bytes, at most %d", len(msg.Shell.Output), agentproto.MaxShellData))
		}
		if len(msg.Shell.Recording) > 0 || msg.Shell.RecordingLast {
			return c.recordingPiece(ctx, msg.Shell)
		}
		if !s.hub.ShellEvent(c.agent.ID, msg.Shell.SessionId, msg.Shell) && msg.Shell.Ended != nil && !msg.Shell.Ended.Refused {
			c.lateShellEnd(ctx, msg.Shell)
		}
		return nil
	case *agentv1.ConnectRequest_Hello:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("hello: sent twice on one stream"))
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("message: empty or of an unknown kind"))
	}
}

// RefusedPrefix starts the error of a result by which an agent refuses
// an assignment it would not run (agentd/agent: unsigned, tampered,
// expired, replayed or signed by an unknown key, or a permission mode
// the customer has off); the outcome is REFUSED.
const RefusedPrefix = "refused: "

// reject answers a refused write. Refusals are per job and leave the stream
// open; a stale or foreign writer must stop the job.
func (c *conn) reject(ctx context.Context, writeID uint64, jobID string, token int64, err error) error {
	switch errs.CodeOf(err) {
	case errs.Conflict, errs.NotFound, errs.PermissionDenied, errs.Invalid:
		// Only the attempt written for loses its slot: a write under
		// another token (an agent refusing a forged assignment that names
		// a job it runs) leaves the job it runs counted.
		if t, ok := c.inflight[jobID]; ok && t == token {
			c.drop(jobID)
		}
		c.logger().WarnContext(ctx, "write refused", "job", jobID, "err", err)
		return c.send(rejected(writeID, jobID, rpcerr.CodeName(err), err.Error()))
	}
	return c.svc.err(ctx, err)
}

func leases(running []*agentv1.RunningJob) []store.Lease {
	out := make([]store.Lease, len(running))
	for i, r := range running {
		out[i] = store.Lease{JobID: r.JobId, FencingToken: r.FencingToken}
	}
	return out
}

func accepted(id uint64) *agentv1.ConnectResponse {
	return &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: id}}}
}

func rejected(id uint64, jobID, code, msg string) *agentv1.ConnectResponse {
	return &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Rejected{Rejected: &agentv1.WriteRejected{
		WriteId: id, JobId: jobID, Code: code, Message: msg,
	}}}
}
