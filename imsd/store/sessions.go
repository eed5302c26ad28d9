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

// KeepSessionRecording keeps r, the vendor's copy of a support session's
// recording that agent r.AgentID sent, and audits it as
// support.session.recording_kept, once per session whoever sends it and
// however often (imsd replicas racing included). It reports whether r
// was kept now; false with no error: the same copy (same SHA-256) was
// kept before, which the agent may be told. It refuses, with nothing
// written:
//   - a session imsd recorded as started on another agent or install,
//     or as started nowhere unless openedHere (the session was opened
//     through the sending stream, whose start record may have failed):
//     errs.NotFound;
//   - a copy whose SHA-256 differs from the recording_sha256 of the
//     session's support.session.ended record, when it has one:
//     errs.Invalid;
//   - a copy whose SHA-256 differs from the one kept before: errs.Conflict.
func (s *Store) KeepSessionRecording(ctx context.Context, r SessionRecording, openedHere bool) (bool, error) {
	var kept bool
	err := s.write(ctx, "keep session recording", func(tx *txn) error {
		kept = false
		var ss struct {
			InstallID string `db:"install_id"`
			AgentID   string `db:"agent_id"`
		}
		err := tx.GetContext(ctx, &ss, s.bind(`SELECT install_id, agent_id FROM support_sessions WHERE id = ?`), r.SessionID)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if !openedHere {
				return errs.E(errs.NotFound, "support session %q: no start recorded on agent %q", r.SessionID, r.AgentID)
			}
		case err != nil:
			return err
		case ss.InstallID != r.InstallID || ss.AgentID != r.AgentID:
			return errs.E(errs.NotFound, "support session %q: no start recorded on agent %q", r.SessionID, r.AgentID)
		}
		var endData string
		err = tx.GetContext(ctx, &endData, s.bind(`SELECT data FROM audit_events WHERE chain = ? AND kind = ? AND subject = ? ORDER BY seq LIMIT 1`),
			r.InstallID, KindSessionEnded, r.SessionID)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err == nil {
			m, err := decodeMap(endData)
			if err != nil {
				return fmt.Errorf("the %s record of support session %q: %w", KindSessionEnded, r.SessionID, err)
			}
			if want := m["recording_sha256"]; want != "" && want != r.SHA256 {
				return errs.E(errs.Invalid, "support session %q: the recording sent has SHA-256 %s, its end record says %s", r.SessionID, r.SHA256, want)
			}
		}
		res, err := tx.ExecContext(ctx, s.bind(`INSERT INTO support_session_recordings (session_id, install_id, agent_id, sha256, size, data, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO NOTHING`), r.SessionID, r.InstallID, r.AgentID, r.SHA256, len(r.Data), r.Data, nanos(r.At))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			// Kept already (by this replica or another, racing or not).
			var sum string
			if err := tx.GetContext(ctx, &sum, s.bind(`SELECT sha256 FROM support_session_recordings WHERE session_id = ?`), r.SessionID); err != nil {
				return err
			}
			if sum != r.SHA256 {
				return errs.E(errs.Conflict, "support session %q: a recording with SHA-256 %s is kept already; the one sent has %s", r.SessionID, sum, r.SHA256)
			}
			return nil
		}
		kept = true
		return s.Audit(ctx, tx, AuditEvent{Chain: r.InstallID, At: r.At, Kind: KindRecordingKept, Actor: "agent:" + r.AgentID,
			Subject: r.SessionID, Data: map[string]string{"recording_sha256": r.SHA256, "recording_bytes": strconv.Itoa(len(r.Data))}})
	})
	return kept && err == nil, err
}

// KindSessionEnded is the audit kind of a support session's end.
const KindSessionEnded = "support.session.ended"

// LostSupportSession is a support session whose end is not recorded and
// whose agent imsd last heard at LastSeen (zero: never, or the agent
// is gone).
type LostSupportSession struct {
	SupportSession
	LastSeen time.Time
}

// LostSupportSessions returns at most limit support sessions, oldest
// first, started before cutoff whose end is not recorded and whose
// agent has not been heard since before cutoff (or is gone): no live
// stream of the agent carries them, nor has one since cutoff.
func (s *Store) LostSupportSessions(ctx context.Context, cutoff time.Time, limit int) ([]LostSupportSession, error) {
	var rows []struct {
		ID        string `db:"id"`
		InstallID string `db:"install_id"`
		AgentID   string `db:"agent_id"`
		StartedAt int64  `db:"started_at"`
		LastSeen  int64  `db:"last_seen_at"`
	}
	if err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT s.id, s.install_id, s.agent_id, s.started_at, COALESCE(a.last_seen_at, 0) AS last_seen_at
		FROM support_sessions s LEFT JOIN agents a ON a.id = s.agent_id
		WHERE s.ended_at = 0 AND s.started_at < ? AND COALESCE(a.last_seen_at, 0) < ?
		ORDER BY s.started_at, s.id LIMIT ?`), nanos(cutoff), nanos(cutoff), limit); err != nil {
		return nil, err
	}
	out := make([]LostSupportSession, 0, len(rows))
	for _, r := range rows {
		ls := LostSupportSession{SupportSession: SupportSession{ID: r.ID, InstallID: r.InstallID, AgentID: r.AgentID, StartedAt: fromNanos(r.StartedAt)}}
		if r.LastSeen > 0 {
			ls.LastSeen = fromNanos(r.LastSeen)
		}
		out = append(out, ls)
	}
	return out, nil
}

// EndLostSupportSession records the end of session id with ev (its
// support.session.ended record, written by imsd), in one transaction,
// only if its end is still unrecorded and its agent still has not been
// heard since cutoff: across replicas, and against the agent's own
// report of the end, one end record is written. It reports whether ev
// was written.
func (s *Store) EndLostSupportSession(ctx context.Context, id string, cutoff time.Time, ev AuditEvent) (bool, error) {
	var ended bool
	err := s.write(ctx, "end lost support session", func(tx *txn) error {
		ended = false
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE support_sessions SET ended_at = ? WHERE id = ? AND install_id = ? AND ended_at = 0
			AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.id = support_sessions.agent_id AND a.last_seen_at >= ?)`),
			max(nanos(ev.At), 1), id, ev.Chain, nanos(cutoff))
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

// GetSupportSession returns support session id as imsd recorded its
// start (NotFound if it did not).
func (s *Store) GetSupportSession(ctx context.Context, id string) (SupportSession, error) {
	var r struct {
		ID        string `db:"id"`
		InstallID string `db:"install_id"`
		AgentID   string `db:"agent_id"`
		StartedAt int64  `db:"started_at"`
	}
	err := s.r.GetContext(ctx, &r, s.bind(`SELECT id, install_id, agent_id, started_at FROM support_sessions WHERE id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		return SupportSession{}, errs.E(errs.NotFound, "support session %q: no start recorded", id)
	}
	if err != nil {
		return SupportSession{}, err
	}
	return SupportSession{ID: r.ID, InstallID: r.InstallID, AgentID: r.AgentID, StartedAt: fromNanos(r.StartedAt)}, nil
}
