package agentapi

import (
	"context"
	"crypto/ed25519"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// RevokeSelf is the customer's revocation of their agent (agentd identity
// revoke), signed with the agent's key: imsd refuses the agent from then
// on, as after byoc agent revoke, and ends its stream. A second call
// changes nothing.
func (s *Service) RevokeSelf(ctx context.Context, req *connect.Request[agentv1.RevokeSelfRequest]) (*connect.Response[agentv1.RevokeSelfResponse], error) {
	m := req.Msg
	if m.AgentId == "" || m.Time == nil {
		return nil, s.err(ctx, errs.Field("agent_id", "and time are required"))
	}
	if len(m.Reason) > 512 || len(m.By) > 128 {
		return nil, s.err(ctx, errs.Field("reason", "is longer than 512 bytes (or by than 128)"))
	}
	at := m.Time.AsTime()
	// No bound in the past: the customer may revoke while imsd is
	// unreachable and send the call signed then once it is reachable
	// (agentd identity revoke, again). A replay can only revoke the
	// agent, which its customer decided.
	if d := s.now().Sub(at); d < -signedCallSkew {
		return nil, s.err(ctx, errs.E(errs.Unauthenticated, "the call's time is %s from imsd's clock: check the agent's clock", d.Round(time.Second)))
	}
	a, err := s.store.GetAgent(ctx, m.AgentId)
	if err != nil || !verifiesWith(a, func(k ed25519.PublicKey) bool {
		return agentproto.VerifyRevokeSelf(k, m.AgentId, m.By, m.Reason, at, m.Signature)
	}) {
		return nil, s.err(ctx, errs.E(errs.Unauthenticated, "the call is not signed by agent %s", m.AgentId))
	}
	if !a.RevokedAt.IsZero() {
		return connect.NewResponse(&agentv1.RevokeSelfResponse{}), nil
	}
	reason := "revoked by the customer"
	if m.Reason != "" {
		reason += ": " + m.Reason
	}
	actor := "customer"
	if m.By != "" {
		actor += ":" + m.By
	}
	if _, err := s.store.RevokeAgents(ctx, a.InstallID, a.ID, reason, actor, s.now()); err != nil && !errs.Is(err, errs.NotFound) {
		return nil, s.err(ctx, err)
	}
	s.hub.Kick(a.ID)
	if err := s.store.NotifyKick(ctx, a.ID); err != nil {
		// The replica holding its stream ends it within a lease.
		s.log.WarnContext(ctx, "pass a revocation to the other replicas", "agent", a.ID, "err", err)
	}
	s.hub.FleetChanged()
	s.log.WarnContext(ctx, "agent revoked by the customer", "agent", a.ID, "install", a.InstallID, "by", m.By, "reason", m.Reason)
	return connect.NewResponse(&agentv1.RevokeSelfResponse{}), nil
}
