package operatorapi

import (
	"context"
	"crypto/rand"
	"regexp"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// CreateEnrollmentToken issues a new enrolment token for an install.
func (s *Service) CreateEnrollmentToken(ctx context.Context, req *connect.Request[imsv1.CreateEnrollmentTokenRequest]) (*connect.Response[imsv1.CreateEnrollmentTokenResponse], error) {
	if req.Msg.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	life, err := ttl("ttl_seconds", req.Msg.TtlSeconds)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	in, err := s.store.GetInstall(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	now := s.now()
	secret, hash := auth.NewEnrollToken(s.cfg.SigningKeyID)
	et := store.EnrollmentToken{Hash: hash, InstallID: in.ID, ExpiresAt: now.Add(life), CreatedAt: now}
	if err := s.store.CreateEnrollmentToken(ctx, et); err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.CreateEnrollmentTokenResponse{
		EnrollmentToken: &imsv1.EnrollmentToken{Token: secret, ExpireTime: timestamppb.New(et.ExpiresAt)},
	}), nil
}

// RevokeAgent revokes an install's agent (or all its agents): imsd
// refuses it from now on, and ends its stream here.
func (s *Service) RevokeAgent(ctx context.Context, req *connect.Request[imsv1.RevokeAgentRequest]) (*connect.Response[imsv1.RevokeAgentResponse], error) {
	if req.Msg.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	if len(req.Msg.Reason) > 512 {
		return nil, s.err(ctx, errs.Field("reason", "is longer than 512 bytes"))
	}
	in, err := s.store.GetInstall(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	ids, err := s.store.RevokeAgents(ctx, in.ID, req.Msg.AgentId, req.Msg.Reason, callerFrom(ctx).Name, s.now())
	if err != nil {
		return nil, s.err(ctx, err)
	}
	for _, id := range ids {
		s.hub.Kick(id)
		if err := s.store.NotifyKick(ctx, id); err != nil {
			// The replica holding its stream ends it once a lease at most.
			s.log.WarnContext(ctx, "pass a revocation to the other replicas", "agent", id, "err", err)
		}
		s.log.WarnContext(ctx, "agent revoked", "agent", id, "install", in.Name, "by", callerFrom(ctx).Name, "reason", req.Msg.Reason)
	}
	s.hub.FleetChanged()
	return connect.NewResponse(&imsv1.RevokeAgentResponse{AgentIds: ids}), nil
}

// releaseRef is an agent release's reference, by digest.
var releaseRef = regexp.MustCompile(`^oci://[A-Za-z0-9.\-]+(:[0-9]+)?/[a-z0-9._/\-]+@sha256:[0-9a-f]{64}$`)

// OfferAgentUpdate records an agent release offer for an install's
// agents; their streams send it to them, signed (agentapi/update.go).
func (s *Service) OfferAgentUpdate(ctx context.Context, req *connect.Request[imsv1.OfferAgentUpdateRequest]) (*connect.Response[imsv1.OfferAgentUpdateResponse], error) {
	if req.Msg.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	if req.Msg.Withdraw {
		return s.withdrawAgentUpdate(ctx, req.Msg)
	}
	if req.Msg.OfferId != "" || req.Msg.Reason != "" {
		return nil, s.err(ctx, errs.Field("offer_id", "and reason go with withdraw only"))
	}
	if !releaseRef.MatchString(req.Msg.Release) {
		return nil, s.err(ctx, errs.Field("release", "%q is not an agent release: want oci://HOST/REPOSITORY@sha256:<64 hex digits> (byoc agent publish prints it)", req.Msg.Release))
	}
	in, err := s.store.GetInstall(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	o := store.UpdateOffer{ID: "uo_" + rand.Text()[:16], Release: req.Msg.Release, OfferedAt: s.now()}
	ids, err := s.store.OfferAgentUpdate(ctx, in.ID, o, callerFrom(ctx).Name)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	s.hub.OfferChanged()
	s.hub.FleetChanged()
	s.log.InfoContext(ctx, "agent update offered", "install", in.Name, "release", o.Release, "offer", o.ID, "by", callerFrom(ctx).Name)
	return connect.NewResponse(&imsv1.OfferAgentUpdateResponse{AgentIds: ids, OfferId: o.ID}), nil
}

// withdrawAgentUpdate takes back the offer standing for an install's
// agents (OfferAgentUpdateRequest.withdraw): their streams send the
// signed withdrawal (agentapi/update.go).
func (s *Service) withdrawAgentUpdate(ctx context.Context, m *imsv1.OfferAgentUpdateRequest) (*connect.Response[imsv1.OfferAgentUpdateResponse], error) {
	if m.Release != "" {
		return nil, s.err(ctx, errs.Field("release", "is not taken with withdraw"))
	}
	if len(m.OfferId) > 64 {
		return nil, s.err(ctx, errs.Field("offer_id", "is longer than 64 bytes"))
	}
	if len(m.Reason) > 1024 {
		return nil, s.err(ctx, errs.Field("reason", "is longer than 1024 bytes"))
	}
	in, err := s.store.GetInstall(ctx, m.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	by := callerFrom(ctx).Name
	id, ids, err := s.store.WithdrawAgentUpdate(ctx, in.ID, m.OfferId, by, m.Reason, s.now())
	if err != nil {
		return nil, s.err(ctx, err)
	}
	s.hub.OfferChanged()
	s.hub.FleetChanged()
	s.log.InfoContext(ctx, "agent update offer withdrawn", "install", in.Name, "offer", id, "by", by, "reason", m.Reason)
	return connect.NewResponse(&imsv1.OfferAgentUpdateResponse{AgentIds: ids, OfferId: id}), nil
}
