package store

import (
	"context"
	"strconv"
	"time"
)

// SessionRecording is the vendor's copy of a support session's recording
// (asciicast v2), which the customer's agent sends only when the customer
// allows it.
type SessionRecording struct {
	SessionID, InstallID, AgentID string
	// SHA256 is the hash of Data (hex).
	SHA256 string
	Data   []byte
	At     time.Time
}

// SaveSessionRecording keeps a session's recording and audits it as
// support.session.recording_kept, in one transaction.
func (s *Store) SaveSessionRecording(ctx context.Context, r SessionRecording) error {
	return s.write(ctx, "save session recording", func(tx *txn) error {
		_, err := tx.ExecContext(ctx, s.bind(`INSERT INTO support_session_recordings (session_id, install_id, agent_id, sha256, size, data, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`), r.SessionID, r.InstallID, r.AgentID, r.SHA256, len(r.Data), r.Data, nanos(r.At))
		if err != nil {
			return err
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: r.InstallID, At: r.At, Kind: "support.session.recording_kept", Actor: "agent:" + r.AgentID,
			Subject: r.SessionID, Data: map[string]string{"recording_sha256": r.SHA256, "recording_bytes": strconv.Itoa(len(r.Data))}})
	})
}
