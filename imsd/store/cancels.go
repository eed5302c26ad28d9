package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// cancelsChannel carries cancellations between imsd replicas: the
// replica an operator asked passes one on to the replica holding the
// job's agent, which tells the agent at once instead of at its next
// heartbeat. Payload: cancelNote as JSON.
const cancelsChannel = "byoc_cancels"

type cancelNote struct {
	Agent  string `json:"a"`
	Job    string `json:"j,omitempty"`
	Reason string `json:"r,omitempty"`
	// Kick: the agent was revoked (NotifyKick), not a job cancelled.
	Kick bool `json:"k,omitempty"`
}

// NotifyCancel asks every replica to pass the cancellation of job jobID
// (reason) to agent agentID, if it holds that agent's stream. It is a
// wake-up only: the cancel request is already stored, and an agent
// learns of it at its next heartbeat even if this is lost. On SQLite it
// does nothing (one process).
func (s *Store) NotifyCancel(ctx context.Context, agentID, jobID, reason string) error {
	if !s.postgres() {
		return nil
	}
	b, err := json.Marshal(cancelNote{Agent: agentID, Job: jobID, Reason: truncate(reason, 1024)})
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `SELECT pg_notify($1, $2)`, cancelsChannel, string(b))
	return err
}

// NotifyKick asks every replica to end agent agentID's stream, if it
// holds it: the agent was revoked. It is a wake-up only: the revocation
// is already stored, and a replica that misses this learns of it when it
// next records the agent's last-seen time (TouchAgent, once per lease).
// On SQLite it does nothing (one process).
func (s *Store) NotifyKick(ctx context.Context, agentID string) error {
	if !s.postgres() {
		return nil
	}
	b, err := json.Marshal(cancelNote{Agent: agentID, Kick: true})
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `SELECT pg_notify($1, $2)`, cancelsChannel, string(b))
	return err
}

// ListenCancels calls fn for each cancellation another replica passes on
// (NotifyCancel), and kick for each revoked agent's stream to end
// (NotifyKick), on a PostgreSQL connection of its own that it
// reconnects with backoff, until ctx ends; then it returns nil. A
// cancellation sent while the connection was down is lost, and reaches
// its agent at the agent's next heartbeat instead. fn runs on
// ListenCancels' goroutine and should not block. On SQLite it returns
// nil at once.
func (s *Store) ListenCancels(ctx context.Context, fn func(agentID, jobID, reason string), kick func(agentID string)) error {
	if !s.postgres() {
		return nil
	}
	backoff := listenMinBackoff
	for {
		if s.listenCancelsOnce(ctx, fn, kick) {
			backoff = listenMinBackoff
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, listenMaxBackoff)
	}
}

// listenCancelsOnce listens on one connection until it fails or ctx
// ends, and reports whether it got as far as listening.
func (s *Store) listenCancelsOnce(ctx context.Context, fn func(agentID, jobID, reason string), kick func(agentID string)) (listened bool) {
	conn, err := pgx.ConnectConfig(ctx, s.pg.Copy())
	if err != nil {
		return false
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+cancelsChannel); err != nil {
		return false
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		var c cancelNote
		switch {
		case json.Unmarshal([]byte(n.Payload), &c) != nil || c.Agent == "":
		case c.Kick:
			kick(c.Agent)
		case c.Job != "":
			fn(c.Agent, c.Job, c.Reason)
		}
	}
}
