package agentapi

// The end of a support session whose relay is gone: the stream that
// carried it broke, or imsd restarted (the operator's call died with
// it). The agent ends such a session itself and reports the end on its
// next stream; imsd audits it then, once per session.

import (
	"context"
	"strconv"

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
	}
}
