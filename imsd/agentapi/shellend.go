package agentapi

// The end of a support session whose relay is gone: the stream that
// carried it broke, or imsd restarted (the operator's call died with
// it). The agent ends such a session itself and reports the end on its
// next stream; imsd audits it then, once per session.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// LateEndNote says, in a support.session.ended record the agent's
// report wrote, why the call that relayed the session did not.
const LateEndNote = "the stream that carried the session ended (imsd restarted, or the connection broke); the agent ended the session and reported it on its next stream"

// lateShellEnd audits the end of a session this agent ran, reported
// when no call here relays it: only a session imsd audited as started
// on this agent, and only if its end is not audited yet (the call that
// relayed it, on this imsd or another replica, may have written it).
func (c *conn) lateShellEnd(ctx context.Context, ev *agentv1.ShellEvent) {
	en := ev.Ended
	ae := store.AuditEvent{Chain: c.agent.InstallID, At: c.svc.now(), Kind: "support.session.ended", Actor: "agent:" + c.agent.ID,
		Subject: ev.SessionId, Data: map[string]string{"session": ev.SessionId, "agent": c.agent.ID, "reason": en.Reason,
			"exit_code": strconv.Itoa(int(en.ExitCode)), "recording_sha256": en.RecordingSha256,
			"recording_bytes": strconv.FormatInt(en.RecordingBytes, 10), "output_bytes": strconv.FormatInt(en.OutputBytes, 10),
			"input_bytes": strconv.FormatInt(en.InputBytes, 10), "reported_late": LateEndNote}}
	ok, err := c.svc.store.EndSupportSession(ctx, ev.SessionId, c.agent.ID, ae)
	if err != nil {
		c.logger().ErrorContext(ctx, "audit a support session's end the agent reported", "session", ev.SessionId, "err", err)
		return
	}
	if ok {
		c.logger().InfoContext(ctx, "support session's end audited from the agent's report", "session", ev.SessionId, "reason", en.Reason)
		return
	}
	// Recorded already: by the call that relayed it, by an earlier
	// report, or by imsd when the agent was lost (the sweep's record
	// has none of the agent's figures; these are in the customer's own
	// record, and a recording sent later is checked against nothing).
	// Logged, not written: one end record per session.
	c.logger().InfoContext(ctx, "support session's end reported by the agent after its end was recorded; not written again", "session", ev.SessionId,
		"reason", en.Reason, "exit_code", en.ExitCode, "recording_sha256", en.RecordingSha256, "recording_bytes", en.RecordingBytes)
}

// LostAgentReason is the reason of a support.session.ended record imsd
// wrote itself, for a session whose agent has had no live stream for
// lostAfter (--support-session-lost-after).
func LostAgentReason(lostAfter time.Duration) string {
	return fmt.Sprintf("ended by imsd: the agent was lost: no stream of it for %s since the session's stream ended, and no report of the session's end; "+
		"the agent ends its sessions when its stream breaks, so the session ended at the latest when the agent was last heard (ended_at)", lostAfter)
}

// maxLostPerSweep bounds the lost sessions one sweep ends; the next
// sweep ends the rest.
const maxLostPerSweep = 100

// CloseLostSupportSessions writes the end record of each support
// session, open in imsd's record, whose agent has not been heard for
// lostAfter: the stream that carried it broke with no end recorded (the
// imsd replica holding it was killed) and the agent never came back to
// report the end. Once per session across replicas, and not when the
// agent's report came first (store.EndLostSupportSession); a report
// coming after is logged, not written (lateShellEnd). ended_at is when
// the agent was last heard (the session's start if never). It returns
// how many it ended.
func (s *Service) CloseLostSupportSessions(ctx context.Context, lostAfter time.Duration) (int, error) {
	now := s.now()
	cutoff := now.Add(-lostAfter)
	lost, err := s.store.LostSupportSessions(ctx, cutoff, maxLostPerSweep)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ls := range lost {
		endedAt := ls.LastSeen
		if endedAt.IsZero() || endedAt.Before(ls.StartedAt) {
			endedAt = ls.StartedAt
		}
		ev := store.AuditEvent{Chain: ls.InstallID, At: now, Kind: store.KindSessionEnded, Actor: "imsd", Subject: ls.ID,
			Data: map[string]string{"session": ls.ID, "agent": ls.AgentID, "reason": LostAgentReason(lostAfter),
				"ended_at": endedAt.UTC().Format(time.RFC3339Nano), "lost_after": lostAfter.String()}}
		ok, err := s.store.EndLostSupportSession(ctx, ls.ID, cutoff, ev)
		if err != nil {
			return n, err
		}
		if ok {
			n++
			s.log.WarnContext(ctx, "support session ended by imsd: its agent was lost", "session", ls.ID, "agent", ls.AgentID,
				"install", ls.InstallID, "agent_last_heard", endedAt, "lost_after", lostAfter)
		}
	}
	return n, nil
}
