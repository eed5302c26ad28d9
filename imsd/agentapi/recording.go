package agentapi

// The vendor's copy of a support session's recording, which the agent
// sends after the session's end only when the customer allows it (agentd
// --session-recordings-to-vendor).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// MaxSessionRecording is the largest recording imsd keeps a copy of; a
// larger one is dropped (the customer's copy is whole).
const MaxSessionRecording = 16 << 20

// maxShellsPerStream bounds the sessions a stream remembers.
const maxShellsPerStream = 64

// shellCopy is a session opened through this stream, and what arrived of
// its recording.
type shellCopy struct {
	buf     bytes.Buffer
	dropped bool
}

// openedShell remembers a session opened through this stream (c.mu held).
func (c *conn) openedShell(id string) {
	if c.shells == nil {
		c.shells = make(map[string]*shellCopy)
	}
	if len(c.shells) >= maxShellsPerStream {
		for k := range c.shells {
			delete(c.shells, k)
			break
		}
	}
	c.shells[id] = &shellCopy{}
}

// recordingPiece takes a piece of a session's recording (c.mu held): in
// order, for a session opened through this stream, and at most
// MaxSessionRecording in all; the last one is kept, with imsd's own hash.
func (c *conn) recordingPiece(ctx context.Context, ev *agentv1.ShellEvent) error {
	if len(ev.Recording) > agentproto.MaxShellData {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("shell.recording: %d bytes, at most %d", len(ev.Recording), agentproto.MaxShellData))
	}
	sc := c.shells[ev.SessionId]
	if sc == nil {
		return nil // not opened here (or forgotten): nothing to keep
	}
	if ev.RecordingOffset != int64(sc.buf.Len()) || sc.buf.Len()+len(ev.Recording) > MaxSessionRecording {
		sc.dropped = true
	}
	if !sc.dropped {
		sc.buf.Write(ev.Recording)
	}
	if !ev.RecordingLast {
		return nil
	}
	delete(c.shells, ev.SessionId)
	if sc.dropped {
		c.logger().WarnContext(ctx, "a support session's recording was not kept: out of order or over the limit", "session", ev.SessionId, "limit", MaxSessionRecording)
		return nil
	}
	sum := sha256.Sum256(sc.buf.Bytes())
	r := store.SessionRecording{SessionID: ev.SessionId, InstallID: c.agent.InstallID, AgentID: c.agent.ID,
		SHA256: hex.EncodeToString(sum[:]), Data: sc.buf.Bytes(), At: c.svc.now()}
	if err := c.svc.store.SaveSessionRecording(ctx, r); err != nil {
		c.logger().ErrorContext(ctx, "keep a support session's recording", "session", ev.SessionId, "err", err)
	}
	return nil
}
