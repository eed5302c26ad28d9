package agentapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/store"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// Two agentd processes sharing one identity (a state dir copied to a
// second machine) would replace each other's stream every few seconds,
// forever, each re-attaching and dropping jobs. Every agentd process
// names a random instance id in its hello. A process that restarts comes
// back as a new instance and never as an old one, so a hello from the
// instance the current one replaced means two live processes: imsd keeps
// the stream it has, refuses the other (Aborted, saying why), logs a
// warning and records the conflict on the agent for operators.
//
// With replicas, each hello is told to the others (store.NotifyHello):
// a replica holding another process's stream of the agent ends it, as a
// newer stream replaces an older one on one replica, and every replica
// remembers which process holds the stream and which it replaced, so the
// replaced process is refused wherever it comes back while the holder's
// stream may be open (HelloElsewhere).

// instanceRecord is what imsd remembers of an agent's processes.
type instanceRecord struct {
	instance, host   string // the process holding the stream now
	prev, prevHost   string // the one it replaced
	lastConflictSave time.Time
	// remote: the holder said hello to another replica.
	remote bool
}

// conflictRecordEvery bounds how often a continuing conflict is logged
// and written to the store.
const conflictRecordEvery = time.Minute

// checkInstance refuses a hello from a second process of an agent whose
// stream another process holds.
func (s *Service) checkInstance(ctx context.Context, agent store.Agent, hello *agentv1.Hello) error {
	if hello.Instance == "" {
		return nil // an agent from before instance ids
	}
	now := s.now()
	s.instMu.Lock()
	if s.instances == nil {
		s.instances = make(map[string]*instanceRecord)
	}
	r := s.instances[agent.ID]
	switch {
	case r == nil:
		s.instances[agent.ID] = &instanceRecord{instance: hello.Instance, host: hello.Hostname}
		s.instMu.Unlock()
		return nil
	case r.instance == hello.Instance:
		r.remote = false
		s.instMu.Unlock()
		return nil // the same process reconnecting
	case r.prev != hello.Instance || !s.hub.Connected(agent.ID) &&
		(!r.remote || !agent.StreamMayBeOpen(now, s.cfg.LeaseDuration+3*s.cfg.HeartbeatInterval)):
		// A new process (a restart), or an old one while nobody holds
		// the stream (here or, as far as the store tells, elsewhere): it
		// takes the stream.
		r.prev, r.prevHost = r.instance, r.host
		r.instance, r.host, r.remote = hello.Instance, hello.Hostname, false
		s.instMu.Unlock()
		return nil
	}
	detail := fmt.Sprintf("two agentd processes share this agent's identity: instance %s on host %q holds the stream, instance %s on host %q was refused",
		r.instance, r.host, hello.Instance, hello.Hostname)
	save := now.Sub(r.lastConflictSave) >= conflictRecordEvery
	if save {
		r.lastConflictSave = now
	}
	s.instMu.Unlock()
	if save {
		s.log.WarnContext(ctx, "agent identity shared by two processes; refusing the second",
			"agent", agent.ID, "install", agent.InstallID, "holder_instance", r.instance, "holder_host", r.host,
			"refused_instance", hello.Instance, "refused_host", hello.Hostname)
		if err := s.store.RecordAgentConflict(ctx, agent.ID, detail, now); err != nil {
			s.log.WarnContext(ctx, "record agent conflict", "agent", agent.ID, "err", err)
		}
		s.hub.FleetChanged()
		s.obs.IdentityConflict()
	}
	return connect.NewError(connect.CodeAborted, errors.New(detail+
		"; give this one its own identity: stop it, move its state dir away and enrol it with a new token (byoc install token INSTALL)"))
}

// HelloElsewhere is told that process instance (on host) of agent
// agentID took the agent's stream on another replica (store.NotifyHello):
// a stream of the agent here is replaced by it, and its process, should
// it come back while that one's stream may be open, is refused here as
// it would be there.
func (s *Service) HelloElsewhere(agentID, instance, host string) {
	s.instMu.Lock()
	if s.instances == nil {
		s.instances = make(map[string]*instanceRecord)
	}
	switch r := s.instances[agentID]; {
	case r == nil:
		s.instances[agentID] = &instanceRecord{instance: instance, host: host, remote: true}
	case r.instance == instance:
		r.host, r.remote = host, true
	default:
		r.prev, r.prevHost = r.instance, r.host
		r.instance, r.host, r.remote = instance, host, true
	}
	s.instMu.Unlock()
	s.hub.Kick(agentID)
}

// helloElsewhere tells the other replicas that hello took the agent's
// stream here (store.NotifyHello); nothing on SQLite.
func (s *Service) helloElsewhere(ctx context.Context, agentID string, hello *agentv1.Hello) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.store.NotifyHello(ctx, agentID, hello.Instance, hello.Hostname); err != nil {
		s.log.WarnContext(ctx, "tell the other replicas of an agent's hello", "agent", agentID, "err", err)
	}
}
