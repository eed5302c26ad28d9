package operatorapi

import (
	"context"

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
		s.log.WarnContext(ctx, "agent revoked", "agent", id, "install", in.Name, "by", callerFrom(ctx).Name, "reason", req.Msg.Reason)
	}
	s.hub.FleetChanged()
	return connect.NewResponse(&imsv1.RevokeAgentResponse{AgentIds: ids}), nil
}
