package server

import (
	"context"
	"time"

	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/store"
)

// forwardCancels passes a cancellation for an agent connected to another
// replica on through PostgreSQL (store.NotifyCancel), so that it reaches
// the agent in milliseconds rather than at its next heartbeat. On SQLite
// there is one imsd, and nothing to forward.
func (s *Server) forwardCancels() {
	if s.store.Dialect() != "postgres" {
		return
	}
	s.hub.SetElsewhere(func(agentID string, req dispatch.CancelRequest) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.store.NotifyCancel(ctx, agentID, req.JobID, req.Reason); err != nil {
			// The agent still learns of it at its next heartbeat.
			s.log.Warn("pass a cancellation to the other replicas", "agent", agentID, "job", req.JobID, "err", err)
		}
	})
}

// listenCancels delivers the cancellations other replicas pass on to the
// agents connected here, ends the streams here of agents revoked
// through another replica, and tells the agent service of hellos there,
// until ctx ends.
func (s *Server) listenCancels(ctx context.Context) {
	err := s.store.ListenCancels(ctx, store.ReplicaNotes{
		Cancel: func(agentID, jobID, reason string) {
			s.hub.CancelHere(agentID, dispatch.CancelRequest{JobID: jobID, Reason: reason})
		},
		Kick: func(agentID string) {
			if s.hub.Kick(agentID) {
				s.log.Warn("revoked agent's stream ended (revoked through another replica)", "agent", agentID)
			}
		},
		Hello: s.agents.HelloElsewhere,
	})
	if err != nil && ctx.Err() == nil {
		s.log.Error("listen for cancellations", "err", err)
	}
}
