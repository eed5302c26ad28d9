package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
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
		return s.Audit(ctx, tx, AuditEvent{Chain: r.InstallID, At: r.At, Kind: KindRecordingKept, Actor: "agent:" + r.AgentID,
			Subject: r.SessionID, Data: map[string]string{"recording_sha256": r.SHA256, "recording_bytes": strconv.Itoa(len(r.Data))}})
	})
}

type sessionRecordingRow struct {
	SessionID string `db:"session_id"`
	InstallID string `db:"install_id"`
	AgentID   string `db:"agent_id"`
	SHA256    string `db:"sha256"`
	Data      []byte `db:"data"`
	CreatedAt int64  `db:"created_at"`
}

func (r sessionRecordingRow) recording() SessionRecording {
	return SessionRecording{SessionID: r.SessionID, InstallID: r.InstallID, AgentID: r.AgentID, SHA256: r.SHA256, Data: r.Data, At: fromNanos(r.CreatedAt)}
}

// ListSessionRecordings returns the recordings kept of install
// installID's support sessions, oldest first.
func (s *Store) ListSessionRecordings(ctx context.Context, installID string) ([]SessionRecording, error) {
	var rows []sessionRecordingRow
	if err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT session_id, install_id, agent_id, sha256, data, created_at
		FROM support_session_recordings WHERE install_id = ? ORDER BY created_at, session_id`), installID); err != nil {
		return nil, err
	}
	out := make([]SessionRecording, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.recording())
	}
	return out, nil
}

// GetSessionRecording returns the recording kept of support session id.
func (s *Store) GetSessionRecording(ctx context.Context, id string) (SessionRecording, error) {
	var r sessionRecordingRow
	err := s.r.GetContext(ctx, &r, s.bind(`SELECT session_id, install_id, agent_id, sha256, data, created_at
		FROM support_session_recordings WHERE session_id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		return SessionRecording{}, errs.E(errs.NotFound, "no recording of support session %q is kept (byoc support recordings INSTALL)", id)
	}
	if err != nil {
		return SessionRecording{}, err
	}
	return r.recording(), nil
}

// KindRecordingKept is the audit kind of a kept session recording.
const KindRecordingKept = "support.session.recording_kept"

// SessionRecordingKeptSHA256 returns the SHA-256 the audit chain of
// install installID recorded when imsd kept support session id's
// recording (its support.session.recording_kept record): the fingerprint
// that an alteration of the kept row (its bytes and its sha256 column
// together) cannot change without breaking the chain. NotFound if the
// chain has none.
func (s *Store) SessionRecordingKeptSHA256(ctx context.Context, installID, id string) (string, error) {
	var data string
	err := s.r.GetContext(ctx, &data, s.bind(`SELECT data FROM audit_events WHERE chain = ? AND kind = ? AND subject = ? ORDER BY seq LIMIT 1`),
		installID, KindRecordingKept, id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errs.E(errs.NotFound, "the audit chain has no %s record of support session %q", KindRecordingKept, id)
	}
	if err != nil {
		return "", err
	}
	m, err := decodeMap(data)
	if err != nil {
		return "", fmt.Errorf("the %s record of support session %q: %w", KindRecordingKept, id, err)
	}
	return m["recording_sha256"], nil
}

// SupportSession is a support session imsd audited as started: opened
// through agent AgentID's stream, on install InstallID.
type SupportSession struct {
	ID, InstallID, AgentID string
	StartedAt              time.Time
}

// StartSupportSession records session ss as started, with ev (its
// support.session.started record), in one transaction.
func (s *Store) StartSupportSession(ctx context.Context, ss SupportSession, ev AuditEvent) error {
	return s.write(ctx, "start support session", func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, s.bind(`INSERT INTO support_sessions (id, install_id, agent_id, started_at) VALUES (?, ?, ?, ?)`),
			ss.ID, ss.InstallID, ss.AgentID, nanos(ss.StartedAt)); err != nil {
			return err
		}
		return s.Audit(ctx, tx, ev)
	})
}

// EndSupportSession records the end of session id, started on install
// ev.Chain, with ev (its support.session.ended record), unless its end
// is recorded already: whoever comes first of the call that relayed it
// and the agent reporting it later writes the one end record. agentID,
// when not empty, must be the agent the session was opened on (an
// agent reports only its own sessions' ends). It reports whether ev was
// written.
func (s *Store) EndSupportSession(ctx context.Context, id, agentID string, ev AuditEvent) (bool, error) {
	var ended bool
	err := s.write(ctx, "end support session", func(tx *txn) error {
		ended = false
		q := `UPDATE support_sessions SET ended_at = ? WHERE id = ? AND install_id = ? AND ended_at = 0`
		args := []any{max(nanos(ev.At), 1), id, ev.Chain}
		if agentID != "" {
			q += ` AND agent_id = ?`
			args = append(args, agentID)
		}
		res, err := tx.ExecContext(ctx, s.bind(q), args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		ended = true
		return s.Audit(ctx, tx, ev)
	})
	return ended && err == nil, err
}
