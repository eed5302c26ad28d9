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
	// Instance and Host: a process of the agent said hello
	// (NotifyHello), not a job cancelled.
	Instance string `json:"i,omitempty"`
	Host     string `json:"h,omitempty"`
	// From is the sending store's self: a replica skips its own hellos
	// and kicks.
	From string `json:"f,omitempty"`
}

// ReplicaNotes are what ListenCancels delivers: Cancel a job's
// cancellation (NotifyCancel), Kick a revoked agent (NotifyKick), Hello a
// process of an agent taking its stream on another replica (NotifyHello).
type ReplicaNotes struct {
	Cancel func(agentID, jobID, reason string)
	Kick   func(agentID string)
	Hello  func(agentID, instance, host string)
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
	b, err := json.Marshal(cancelNote{Agent: agentID, Kick: true, From: s.self})
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `SELECT pg_notify($1, $2)`, cancelsChannel, string(b))
	return err
}

// NotifyHello tells every replica that the agentd process instance (on
// host) of agent agentID took the agent's stream here, so that a replica
// holding another process's stream of the same identity ends it and
// tells the two apart (agentapi's conflict.go). A wake-up only: lost, a
// second process of one identity is not noticed across replicas. On
// SQLite it does nothing (one process).
func (s *Store) NotifyHello(ctx context.Context, agentID, instance, host string) error {
	if !s.postgres() || instance == "" {
		return nil
	}
	b, err := json.Marshal(cancelNote{Agent: agentID, Instance: instance, Host: truncate(host, 255), From: s.self})
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `SELECT pg_notify($1, $2)`, cancelsChannel, string(b))
	return err
}

// ListenCancels calls h.Cancel for each cancellation another replica
// passes on (NotifyCancel), h.Kick for each revoked agent's stream to end
// (NotifyKick) and h.Hello for each hello on another replica
// (NotifyHello), on a PostgreSQL connection of its own that it
// reconnects with backoff, until ctx ends; then it returns nil. A
// cancellation sent while the connection was down is lost, and reaches
// its agent at the agent's next heartbeat instead. They run on
// ListenCancels' goroutine and should not block. On SQLite it returns
// nil at once.
func (s *Store) ListenCancels(ctx context.Context, h ReplicaNotes) error {
	if !s.postgres() {
		return nil
	}
	backoff := listenMinBackoff
	for {
		if s.listenCancelsOnce(ctx, h) {
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
func (s *Store) listenCancelsOnce(ctx context.Context, h ReplicaNotes) (listened bool) {
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
		case json.Unmarshal([]byte(n.Payload), &c) != nil || c.Agent == "" || c.From == s.self:
		case c.Kick:
			if h.Kick != nil {
				h.Kick(c.Agent)
			}
		case c.Instance != "":
			if h.Hello != nil {
				h.Hello(c.Agent, c.Instance, c.Host)
			}
		case c.Job != "":
			if h.Cancel != nil {
				h.Cancel(c.Agent, c.Job, c.Reason)
			}
		}
	}
}
