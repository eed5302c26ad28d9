package agent

// The vendor's copy of a support session's recording, sent only when the
// customer allowed it when the session started (Meta.ToVendor) and still
// does (--session-recordings-to-vendor), until imsd confirms keeping it
// (RecordingKept; Meta.VendorKept): after the session's end on the
// stream it ended on, and whole again on each later stream while
// unconfirmed (the stream broke, imsd restarted, the agent restarted).

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"

	"github.com/byoc-dev/byoc/agentd/sessionrec"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// pendingRecordings returns, oldest first and at most limit, the
// recordings of ms to send imsd: of sessions ended, allowed to the
// vendor when they started, not confirmed kept, not sent on this stream
// yet (sent), and within agentproto.MaxSessionRecording. None while the
// customer does not allow copies now (allowed).
func pendingRecordings(ms []sessionrec.Meta, allowed bool, sent map[string]bool, limit int) []sessionrec.Meta {
	if !allowed {
		return nil
	}
	var out []sessionrec.Meta
	for _, m := range ms {
		if len(out) >= limit {
			break
		}
		if m.Ended.IsZero() || !m.ToVendor || m.VendorKept || sent[m.ID] || m.SHA256 == "" || m.Size > agentproto.MaxSessionRecording {
			continue
		}
		out = append(out, m)
	}
	return out
}

// kickRecordings asks the stream's recording sender to look for
// recordings to send (a session ended).
func (a *Agent) kickRecordings() {
	select {
	case a.recKick <- struct{}{}:
	default:
	}
}

// sendRecordings sends imsd the recordings it has not confirmed keeping,
// at the stream's start and after each session's end, until gone (the
// stream's end): each at most once on one stream, at most
// agentproto.MaxRecordingsResent at a time. recMu makes it the only
// sender: the one of a stream that ended stops before the next
// stream's starts.
func (a *Agent) sendRecordings(gone <-chan struct{}) {
	defer a.wg.Done()
	sent := make(map[string]bool)
	for {
		a.recMu.Lock()
		a.sendPending(sent, gone)
		a.recMu.Unlock()
		select {
		case <-a.recKick:
		case <-gone:
			return
		}
	}
}

// sendPending sends one batch of pending recordings (recMu held).
func (a *Agent) sendPending(sent map[string]bool, gone <-chan struct{}) {
	ms, err := sessionrec.List(sessionrec.Dir(a.cfg.StateDir))
	if err != nil {
		a.log.Warn("read the support sessions' summaries", "err", err)
		return
	}
	for _, m := range pendingRecordings(ms, a.cfg.Shell.RecordingsToVendor, sent, agentproto.MaxRecordingsResent) {
		sent[m.ID] = true
		if !a.sendRecording(m, gone) {
			return
		}
	}
}

// sendRecording sends imsd a copy of session m's recording, whole, in
// pieces, if it still is what the customer's record says (m.SHA256). It
// returns false if the stream is gone.
func (a *Agent) sendRecording(m sessionrec.Meta, gone <-chan struct{}) bool {
	f, err := os.Open(sessionrec.CastPath(sessionrec.Dir(a.cfg.StateDir), m.ID))
	if err != nil {
		a.log.Warn("send a support session's recording", "session", m.ID, "err", err)
		return true
	}
	b, err := io.ReadAll(io.LimitReader(f, agentproto.MaxSessionRecording+1))
	f.Close()
	if err != nil {
		a.log.Warn("send a support session's recording", "session", m.ID, "err", err)
		return true
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != m.SHA256 {
		a.log.Warn("a support session's recording differs from the customer's record of it (its SHA-256); not sent", "session", m.ID, "recorded", m.SHA256)
		return true
	}
	r := bytes.NewReader(b)
	buf := make([]byte, agentproto.MaxShellData)
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		last := err != nil
		ev := &agentv1.ShellEvent{SessionId: m.ID, Recording: append([]byte(nil), buf[:n]...), RecordingOffset: off, RecordingLast: last}
		select {
		case a.shellOut <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Shell{Shell: ev}}:
		case <-gone:
			return false
		}
		off += int64(n)
		if last {
			return true
		}
	}
}

// recordingKept notes imsd's confirmation that it keeps session id's
// recording: the summary's VendorKept, and session.recording_sent in the
// journal, once.
func (a *Agent) recordingKept(k *agentv1.RecordingKept) {
	dir := sessionrec.Dir(a.cfg.StateDir)
	m, err := sessionrec.ReadMeta(dir, k.SessionId)
	if err != nil || m.VendorKept || m.Ended.IsZero() {
		return
	}
	if k.Sha256 != m.SHA256 {
		a.log.Warn("imsd confirmed keeping a recording of a support session that differs from the customer's record", "session", m.ID,
			"imsd_sha256", k.Sha256, "recorded", m.SHA256)
		return
	}
	m.VendorKept = true
	if err := sessionrec.WriteMeta(dir, m); err != nil {
		a.log.Warn("write a support session's summary", "session", m.ID, "err", err)
		return
	}
	a.note("session.recording_sent", "session:"+m.ID, map[string]string{"recording_sha256": m.SHA256, "recording_bytes": itoa(m.Size)})
	a.log.Info("imsd keeps its copy of the support session's recording", "session", m.ID, "recording_sha256", m.SHA256)
}
