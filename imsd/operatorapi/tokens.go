package operatorapi

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// WhoAmI describes the caller's token.
func (s *Service) WhoAmI(ctx context.Context, _ *connect.Request[imsv1.WhoAmIRequest]) (*connect.Response[imsv1.WhoAmIResponse], error) {
	t := callerFrom(ctx)
	return connect.NewResponse(&imsv1.WhoAmIResponse{TokenId: t.ID, Name: t.Name, Role: roleToProto(t.Role)}), nil
}

// CreateApiToken mints an operator token.
func (s *Service) CreateApiToken(ctx context.Context, req *connect.Request[imsv1.CreateApiTokenRequest]) (*connect.Response[imsv1.CreateApiTokenResponse], error) {
	if err := checkName("name", req.Msg.Name); err != nil {
		return nil, s.err(ctx, err)
	}
	role, ok := map[imsv1.Role]store.Role{imsv1.Role_ROLE_ADMIN: store.RoleAdmin, imsv1.Role_ROLE_VIEWER: store.RoleViewer}[req.Msg.Role]
	if !ok {
		return nil, s.err(ctx, errs.Field("role", "must be ROLE_ADMIN or ROLE_VIEWER"))
	}
	secret, tok, err := CreateToken(ctx, s.store, req.Msg.Name, role, s.now())
	if err != nil {
		return nil, s.err(ctx, err)
	}
	s.log.InfoContext(ctx, "api token created", "token", tok.ID, "name", tok.Name, "role", tok.Role, "by", callerFrom(ctx).Name)
	return connect.NewResponse(&imsv1.CreateApiTokenResponse{TokenId: tok.ID, Token: secret}), nil
}

// CreateToken mints and stores an API token and returns its secret.
func CreateToken(ctx context.Context, st *store.Store, name string, role store.Role, now time.Time) (string, store.APIToken, error) {
	secret := auth.NewSecret(auth.APITokenPrefix)
	tok := store.APIToken{ID: auth.NewID("tok_"), Name: name, Role: role, CreatedAt: now}
	if err := st.CreateAPIToken(ctx, tok, auth.Hash(secret)); err != nil {
		return "", store.APIToken{}, fmt.Errorf("create api token: %w", err)
	}
	return secret, tok, nil
}
