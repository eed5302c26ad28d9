package agentapi

import (
	"context"
	"crypto/ed25519"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// signedCallSkew is how far the time an agent signed a call may be from
// imsd's clock.
const signedCallSkew = 5 * time.Minute

// ListBreakGlass lists the break-glass requests of the calling agent's
// install, for the customer's admin. The call is signed by the agent.
func (s *Service) ListBreakGlass(ctx context.Context, req *connect.Request[agentv1.ListBreakGlassRequest]) (*connect.Response[agentv1.ListBreakGlassResponse], error) {
	m := req.Msg
	if m.AgentId == "" || m.Time == nil {
		return nil, s.err(ctx, errs.Field("agent_id", "and time are required"))
	}
	now := s.now()
	at := m.Time.AsTime()
	if d := now.Sub(at); d > signedCallSkew || d < -signedCallSkew {
		return nil, s.err(ctx, errs.E(errs.Unauthenticated, "the call's time is %s from imsd's clock: check the agent's clock", d.Round(time.Second)))
	}
	a, err := s.store.GetAgent(ctx, m.AgentId)
	if err != nil || !verifiesWith(a, func(k ed25519.PublicKey) bool { return agentproto.VerifyListBreakGlass(k, m.AgentId, at, m.Signature) }) {
		return nil, s.err(ctx, errs.E(errs.Unauthenticated, "the call is not signed by agent %s", m.AgentId))
	}
	gs, err := s.store.ListBreakGlassGrants(ctx, a.InstallID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &agentv1.ListBreakGlassResponse{}
	for _, g := range gs {
		out.Grants = append(out.Grants, grantProto(g, now))
	}
	return connect.NewResponse(out), nil
}

// DecideBreakGlass records the customer's signed decision on a request.
func (s *Service) DecideBreakGlass(ctx context.Context, req *connect.Request[agentv1.DecideBreakGlassRequest]) (*connect.Response[agentv1.DecideBreakGlassResponse], error) {
	m := req.Msg
	if m.AgentId == "" {
		return nil, s.err(ctx, errs.Field("agent_id", "is required"))
	}
	a, err := s.store.GetAgent(ctx, m.AgentId)
	if err != nil {
		return nil, s.err(ctx, errs.E(errs.Unauthenticated, "the decision is not signed by agent %s", m.AgentId))
	}
	var d agentproto.BreakGlassDecision
	for _, k := range agentKeys(a) {
		if d, err = agentproto.VerifyBreakGlassDecision(k, m.Statement, m.Signature); err == nil {
			break
		}
	}
	if err != nil {
		return nil, s.err(ctx, errs.E(errs.Unauthenticated, "%v", err))
	}
	now := s.now()
	if d.AgentID != a.ID || d.InstallID != a.InstallID {
		return nil, s.err(ctx, errs.E(errs.PermissionDenied, "agent %s decides for its own install only", a.ID))
	}
	if diff := now.Sub(d.At); diff > signedCallSkew || diff < -signedCallSkew {
		return nil, s.err(ctx, errs.E(errs.Unauthenticated, "the decision's time is %s from imsd's clock: check the agent's clock", diff.Round(time.Second)))
	}
	g, err := s.store.GetBreakGlassGrant(ctx, d.GrantID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if g.InstallID != a.InstallID {
		return nil, s.err(ctx, errs.E(errs.NotFound, "break-glass request %q not found for this install", d.GrantID))
	}
	if d.By == g.RequestedBy {
		return nil, s.err(ctx, errs.E(errs.PermissionDenied, "%s requested break-glass %s and cannot decide it too", d.By, g.ID))
	}
	state := map[string]store.GrantState{agentproto.DecisionApprove: store.GrantApproved,
		agentproto.DecisionDeny: store.GrantDenied, agentproto.DecisionRevoke: store.GrantRevoked}[d.Decision]
	if state == store.GrantApproved && d.ExpiresAt.Sub(d.At) > g.Duration+time.Second {
		return nil, s.err(ctx, errs.E(errs.Invalid, "the approval lasts %s, longer than the %s requested", d.ExpiresAt.Sub(d.At).Round(time.Second), g.Duration))
	}
	g, err = s.store.DecideBreakGlass(ctx, store.BreakGlassDecision{GrantID: d.GrantID, InstallID: a.InstallID, AgentID: a.ID,
		State: state, By: d.By, At: d.At, Reason: d.Reason, ExpiresAt: d.ExpiresAt,
		Statement: string(m.Statement), Signature: m.Signature}, now)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	s.log.InfoContext(ctx, "break-glass decided by the customer", "grant", g.ID, "install", g.InstallID, "decision", d.Decision, "by", d.By)
	return connect.NewResponse(&agentv1.DecideBreakGlassResponse{Grant: grantProto(g, now)}), nil
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func grantProto(g store.BreakGlassGrant, now time.Time) *agentv1.BreakGlassGrant {
	return &agentv1.BreakGlassGrant{Id: g.ID, InstallId: g.InstallID, Role: g.Role, RoleDescription: g.RoleDescription,
		Reason: g.Reason, RequestedBy: g.RequestedBy, RequestTime: ts(g.RequestedAt), DurationSeconds: int64(g.Duration / time.Second),
		RequestExpireTime: ts(g.RequestExpiresAt), State: string(g.StateAt(now)), DecidedBy: g.DecidedBy,
		DecideTime: ts(g.DecidedAt), DecisionReason: g.DecisionReason, ExpireTime: ts(g.ExpiresAt),
		RevokedBy: g.RevokedBy, RevokeTime: ts(g.RevokedAt)}
}
