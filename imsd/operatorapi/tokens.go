package operatorapi

import (
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// MaxTokenTTL is the longest life a token may be given (a token without
// a ttl lives until revoked).
const MaxTokenTTL = 5 * 365 * 24 * time.Hour

// WhoAmI describes the caller and its grants.
func (s *Service) WhoAmI(ctx context.Context, _ *connect.Request[imsv1.WhoAmIRequest]) (*connect.Response[imsv1.WhoAmIResponse], error) {
	p := callerFrom(ctx)
	out := &imsv1.WhoAmIResponse{Name: p.Name, Kind: p.Kind, ExpireTime: ts(p.Expires)}
	if p.Kind == "token" {
		out.TokenId = p.ID
	}
	for _, g := range p.Grants {
		out.Grants = append(out.Grants, grantToProto(g))
	}
	if len(p.Grants) == 1 && p.Grants[0].Scope.Kind == access.All {
		out.Role = roleToProto(p.Grants[0].Role)
	}
	return connect.NewResponse(out), nil
}

// CheckAccess says whether the caller may do a verb on a target.
func (s *Service) CheckAccess(ctx context.Context, req *connect.Request[imsv1.CheckAccessRequest]) (*connect.Response[imsv1.CheckAccessResponse], error) {
	m := req.Msg
	perm, ok := verbs[m.Verb]
	if !ok {
		return nil, s.err(ctx, errs.Field("verb", "unknown verb %q: use one of %s", m.Verb, verbNames()))
	}
	if m.Install != "" && m.App != "" {
		return nil, s.err(ctx, errs.Field("app", "give install or app, not both"))
	}
	p := callerFrom(ctx)
	t := access.Target{}
	switch {
	case m.Install != "":
		in, err := s.store.GetInstall(ctx, m.Install)
		if errs.Is(err, errs.NotFound) && !p.Everywhere(access.Read) {
			// Do not tell a scoped caller which installs exist.
			t = access.Target{Install: m.Install}
			break
		}
		if err != nil {
			return nil, s.err(ctx, err)
		}
		if t, err = installTarget(ctx, s.store, in); err != nil {
			return nil, s.err(ctx, err)
		}
	case m.App != "":
		t = access.Target{App: m.App}
	}
	out := &imsv1.CheckAccessResponse{Permission: string(perm)}
	if g, ok := p.Can(perm, t); ok {
		out.Allowed, out.Grant = true, grantToProto(g)
	} else {
		out.Reason = strings.TrimPrefix(p.Refusal(m.Verb, perm, t), "permission denied: ")
	}
	return connect.NewResponse(out), nil
}

// CreateApiToken mints an operator token.
func (s *Service) CreateApiToken(ctx context.Context, req *connect.Request[imsv1.CreateApiTokenRequest]) (*connect.Response[imsv1.CreateApiTokenResponse], error) {
	m := req.Msg
	if err := checkName("name", m.Name); err != nil {
		return nil, s.err(ctx, err)
	}
	role, ok := roleFromProto(m.Role)
	if !ok {
		return nil, s.err(ctx, errs.Field("role", "must be ROLE_VIEWER, ROLE_OPERATOR, ROLE_SUPPORT or ROLE_ADMIN"))
	}
	scope, err := requestScope(m.Install, m.App, m.Selector)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if m.TtlSeconds < 0 || m.TtlSeconds > int64(MaxTokenTTL/time.Second) {
		return nil, s.err(ctx, errs.Field("ttl_seconds", "must be 0 (until revoked) or at most %d (5 years), got %d", int64(MaxTokenTTL/time.Second), m.TtlSeconds))
	}
	now := s.now()
	var exp time.Time
	if m.TtlSeconds > 0 {
		exp = now.Add(time.Duration(m.TtlSeconds) * time.Second)
	}
	by := callerFrom(ctx).Actor()
	secret, tok, err := CreateToken(ctx, s.store, store.APIToken{Name: m.Name, Role: store.Role(role), Scope: scope.String(), ExpiresAt: exp, CreatedBy: by}, now)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	s.log.InfoContext(ctx, "api token created", "token", tok.ID, "name", tok.Name, "role", tok.Role, "scope", tok.Scope, "by", by)
	return connect.NewResponse(&imsv1.CreateApiTokenResponse{TokenId: tok.ID, Token: secret, Info: apiTokenToProto(tok)}), nil
}

// requestScope is the scope of at most one of install, app and selector.
func requestScope(install, app, selector string) (access.Scope, error) {
	n := 0
	for _, v := range []string{install, app, selector} {
		if v != "" {
			n++
		}
	}
	if n > 1 {
		return access.Scope{}, errs.Field("install", "give at most one of install, app and selector")
	}
	switch {
	case install != "":
		if err := checkName("install", install); err != nil {
			return access.Scope{}, err
		}
		return access.NewScope(access.Install, install)
	case app != "":
		if err := checkName("app", app); err != nil {
			return access.Scope{}, err
		}
		return access.NewScope(access.App, app)
	case selector != "":
		sc, err := access.NewScope(access.Selector, selector)
		if err != nil {
			return sc, errs.Field("selector", "%v", err)
		}
		return sc, nil
	}
	return access.Scope{}, nil
}

// CreateToken mints and stores an API token from t (its name, role,
// scope, expiry and creator) and returns its secret. The store audits it.
func CreateToken(ctx context.Context, st *store.Store, t store.APIToken, now time.Time) (string, store.APIToken, error) {
	secret := auth.NewSecret(auth.APITokenPrefix)
	t.ID = auth.NewID("tok_")
	t.CreatedAt = now
	if err := st.CreateAPIToken(ctx, t, auth.Hash(secret)); err != nil {
		return "", store.APIToken{}, fmt.Errorf("create api token: %w", err)
	}
	return secret, t, nil
}

// ListApiTokens lists the unrevoked tokens.
func (s *Service) ListApiTokens(ctx context.Context, _ *connect.Request[imsv1.ListApiTokensRequest]) (*connect.Response[imsv1.ListApiTokensResponse], error) {
	toks, err := s.store.ListAPITokens(ctx)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListApiTokensResponse{}
	for _, t := range toks {
		out.Tokens = append(out.Tokens, apiTokenToProto(t))
	}
	return connect.NewResponse(out), nil
}

// RevokeApiToken revokes a token by id or name.
func (s *Service) RevokeApiToken(ctx context.Context, req *connect.Request[imsv1.RevokeApiTokenRequest]) (*connect.Response[imsv1.RevokeApiTokenResponse], error) {
	if req.Msg.IdOrName == "" {
		return nil, s.err(ctx, errs.Field("id_or_name", "is required"))
	}
	by := callerFrom(ctx).Actor()
	tok, err := s.store.RevokeAPIToken(ctx, req.Msg.IdOrName, by, s.now())
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if s.tokenRevoked != nil {
		s.tokenRevoked()
	}
	// Wake the fleet views, so one the token opened ends now
	// (stillAllowed); log follows and support shells end at their next
	// check, within FollowPoll.
	s.hub.FleetChanged()
	s.log.InfoContext(ctx, "api token revoked", "token", tok.ID, "name", tok.Name, "by", by)
	return connect.NewResponse(&imsv1.RevokeApiTokenResponse{Token: apiTokenToProto(tok)}), nil
}

// LoginConfig is what GetLoginConfig answers.
type LoginConfig struct {
	Issuer, ClientID string
	Scopes           []string
}

// GetLoginConfig returns the single sign-on settings for byoc login.
func (s *Service) GetLoginConfig(ctx context.Context, _ *connect.Request[imsv1.GetLoginConfigRequest]) (*connect.Response[imsv1.GetLoginConfigResponse], error) {
	c := s.cfg.Login
	return connect.NewResponse(&imsv1.GetLoginConfigResponse{Issuer: c.Issuer, ClientId: c.ClientID, Scopes: c.Scopes}), nil
}
