package agentapi

// The vendor's copy of a support session's recording, which the agent
// sends after the session's end only when the customer allows it (agentd
// --session-recordings-to-vendor): on the stream the session was opened
// on, or, when that stream broke before imsd confirmed keeping it
// (RecordingKept), whole again on a later stream of the same agent, to
// this replica or another. imsd keeps one copy per session
// (store.KeepSessionRecording) and confirms it, so that the agent stops
// sending it.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// MaxSessionRecording is the largest recording imsd keeps a copy of; a
// larger one is dropped (the customer's copy is whole).
const MaxSessionRecording = agentproto.MaxSessionRecording

// maxShellsPerStream bounds the sessions a stream remembers.
const maxShellsPerStream = 64

// maxResentPerStream bounds the recordings of sessions not opened
// through a stream that the stream may start sending (each costs a
// database read, then memory): the agent sends at most
// agentproto.MaxRecordingsResent of them at a time; the rest wait for
// its next stream.
const maxResentPerStream = 2 * agentproto.MaxRecordingsResent

// maxRecordingBytesPerStream bounds the bytes of recordings a stream
// holds in memory at once, all sessions together: the agent sends one
// recording at a time.
const maxRecordingBytesPerStream = 2 * MaxSessionRecording

// shellCopy is a session opened through this stream, or one whose
// recording the agent sends again on it, and what arrived of its
// recording.
type shellCopy struct {
	buf     bytes.Buffer
	dropped bool
	// resent is set for a session not opened through this stream.
	resent bool
}

// recordings is what a stream holds of support sessions' recordings.
type recordings struct {
	// shells are the sessions opened through this stream and those
	// whose recording the agent is sending again.
	shells map[string]*shellCopy
	// bytes counts the bytes held, all sessions together; resent the
	// sessions not opened here whose recording the agent started sending.
	bytes, resent int
}

// recs returns the stream's recordings state (c.mu held).
func (c *conn) recs() *recordings {
	if c.rec == nil {
		c.rec = &recordings{shells: make(map[string]*shellCopy)}
	}
	return c.rec
}

// openedShell remembers a session opened through this stream (c.mu held).
func (c *conn) openedShell(id string) {
	rs := c.recs()
	if len(rs.shells) >= maxShellsPerStream {
		for k, sc := range rs.shells {
			rs.bytes -= sc.buf.Len()
			delete(rs.shells, k)
			break
		}
	}
	rs.shells[id] = &shellCopy{}
}

// resentShell returns a copy to fill for session id, not opened through
// this stream, whose recording the agent starts sending again (at offset
// 0): only for a session imsd recorded as started on this agent, and at
// most maxResentPerStream per stream (c.mu held). nil: ignored.
func (c *conn) resentShell(ctx context.Context, id string) *shellCopy {
	rs := c.recs()
	if rs.resent >= maxResentPerStream {
		if rs.resent == maxResentPerStream {
			c.logger().WarnContext(ctx, "support session recordings sent again: more than a stream takes; the rest wait for the agent's next stream",
				"limit", maxResentPerStream)
		}
		rs.resent = maxResentPerStream + 1
		return nil
	}
	rs.resent++
	ss, err := c.svc.store.GetSupportSession(ctx, id)
	if err != nil || ss.AgentID != c.agent.ID || ss.InstallID != c.agent.InstallID {
		if err != nil && !errs.Is(err, errs.NotFound) {
			c.logger().ErrorContext(ctx, "read a support session whose recording the agent sends", "session", id, "err", err)
		} else {
			c.logger().WarnContext(ctx, "a recording of a support session not started on this agent was ignored", "session", id)
		}
		return nil
	}
	if len(rs.shells) >= maxShellsPerStream {
		return nil
	}
	sc := &shellCopy{resent: true}
	rs.shells[id] = sc
	return sc
}

// recordingPiece takes a piece of a session's recording (c.mu held): in
// order, for a session opened through this stream or started on this
// agent, and at most MaxSessionRecording in all (and
// maxRecordingBytesPerStream for the stream); the last one is kept, with
// imsd's own hash, and confirmed to the agent. A piece at offset 0
// starts the copy again (the agent sends a recording whole again after
// its stream broke; pieces queued for the old stream may come first).
func (c *conn) recordingPiece(ctx context.Context, ev *agentv1.ShellEvent) error {
	if len(ev.Recording) > agentproto.MaxShellData {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("shell.recording: %d bytes, at most %d", len(ev.Recording), agentproto.MaxShellData))
	}
	rs := c.recs()
	sc := rs.shells[ev.SessionId]
	if sc == nil {
		if ev.RecordingOffset != 0 || agentproto.CheckShellSessionID(ev.SessionId) != nil {
			return nil // the rest of a sending cut short, or nonsense
		}
		if sc = c.resentShell(ctx, ev.SessionId); sc == nil {
			return nil
		}
	}
	if ev.RecordingOffset == 0 {
		rs.bytes -= sc.buf.Len()
		sc.buf.Reset()
		sc.dropped = false
	}
	if ev.RecordingOffset != int64(sc.buf.Len()) || sc.buf.Len()+len(ev.Recording) > MaxSessionRecording ||
		rs.bytes+len(ev.Recording) > maxRecordingBytesPerStream {
		rs.bytes -= sc.buf.Len()
		sc.buf = bytes.Buffer{}
		sc.dropped = true
	}
	if !sc.dropped {
		sc.buf.Write(ev.Recording)
		rs.bytes += len(ev.Recording)
	}
	if !ev.RecordingLast {
		return nil
	}
	delete(rs.shells, ev.SessionId)
	rs.bytes -= sc.buf.Len()
	if sc.dropped {
		c.logger().WarnContext(ctx, "a support session's recording was not kept: out of order or over the limit", "session", ev.SessionId,
			"limit", MaxSessionRecording, "stream_limit", maxRecordingBytesPerStream)
		return nil
	}
	sum := sha256.Sum256(sc.buf.Bytes())
	r := store.SessionRecording{SessionID: ev.SessionId, InstallID: c.agent.InstallID, AgentID: c.agent.ID,
		SHA256: hex.EncodeToString(sum[:]), Data: sc.buf.Bytes(), At: c.svc.now()}
	kept, err := c.svc.store.KeepSessionRecording(ctx, r, !sc.resent)
	switch {
	case errs.Is(err, errs.Conflict) || errs.Is(err, errs.Invalid) || errs.Is(err, errs.NotFound):
		c.logger().ErrorContext(ctx, "a support session's recording was refused", "session", ev.SessionId, "sha256", r.SHA256, "err", err)
		return nil
	case err != nil:
		c.logger().ErrorContext(ctx, "keep a support session's recording", "session", ev.SessionId, "err", err)
		return nil
	case kept:
		c.logger().InfoContext(ctx, "support session's recording kept", "session", ev.SessionId, "sha256", r.SHA256, "bytes", len(r.Data), "resent", sc.resent)
	default:
		c.logger().InfoContext(ctx, "support session's recording sent again, kept already", "session", ev.SessionId, "sha256", r.SHA256)
	}
	return c.send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_RecordingKept{RecordingKept: &agentv1.RecordingKept{
		SessionId: ev.SessionId, Sha256: r.SHA256}}})
}
