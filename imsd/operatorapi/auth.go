package operatorapi

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// readOnly lists the procedures a viewer may call. Everything else needs an
// admin: a procedure added later is admin-only until listed here.
var readOnly = map[string]bool{
	imsv1connect.OperatorServiceWhoAmIProcedure:           true,
	imsv1connect.OperatorServiceListAppsProcedure:         true,
	imsv1connect.OperatorServiceGetAppProcedure:           true,
	imsv1connect.OperatorServiceListAppRevisionsProcedure: true,
	imsv1connect.OperatorServiceDiffAppRevisionsProcedure: true,
	imsv1connect.OperatorServiceListInstallsProcedure:     true,
	imsv1connect.OperatorServiceGetInstallProcedure:       true,
	imsv1connect.OperatorServiceListInstallDriftProcedure: true,
	imsv1connect.OperatorServiceWatchInstallsProcedure:    true,
	imsv1connect.OperatorServiceListJobsProcedure:         true,
	imsv1connect.OperatorServiceGetJobProcedure:           true,
	imsv1connect.OperatorServiceStreamJobLogsProcedure:    true,
	imsv1connect.OperatorServicePlanInstallProcedure:      true,
	imsv1connect.OperatorServiceListWorkflowsProcedure:    true,
	imsv1connect.OperatorServiceGetWorkflowProcedure:      true,
	imsv1connect.OperatorServiceListReleasesProcedure:     true,
	imsv1connect.OperatorServiceGetReleaseProcedure:       true,
	imsv1connect.OperatorServiceListPluginTypesProcedure:  true,
	imsv1connect.OperatorServiceGetPluginTypeProcedure:    true,
	imsv1connect.OperatorServiceListActionsProcedure:      true,
	imsv1connect.OperatorServiceListActionRunsProcedure:   true,
	imsv1connect.OperatorServiceGetActionRunProcedure:     true,

	// Break-glass: the requests' states and what a request may ask for.
	imsv1connect.OperatorServiceListBreakGlassGrantsProcedure: true,
	imsv1connect.OperatorServiceGetBreakGlassPolicyProcedure:  true,
	// Server reflection describes the API to any token holder.
	"/" + grpcreflect.ReflectV1ServiceName + "/ServerReflectionInfo":      true,
	"/" + grpcreflect.ReflectV1AlphaServiceName + "/ServerReflectionInfo": true,
	imsv1connect.OperatorServiceListAuditEventsProcedure:                  true,
	// Builds and what installs run, by digest.
	imsv1connect.OperatorServiceListBuildsProcedure:        true,
	imsv1connect.OperatorServiceListInstallImagesProcedure: true,
	// The install's app revision files and the signing key id, which
	// byoc install stack builds the customer's stack from.
	imsv1connect.OperatorServiceGetInstallStackProcedure: true,
}

type callerKey struct{}

// callerFrom returns the token that authenticated the call.
func callerFrom(ctx context.Context) store.APIToken {
	t, _ := ctx.Value(callerKey{}).(store.APIToken)
	return t
}

// tokenCacheTTL bounds how long a looked-up token is trusted without
// asking the database again.
const tokenCacheTTL = 5 * time.Second

// Authenticator is a Connect interceptor that checks the bearer token and
// the caller's role on every operator call, unary and streaming. Tokens are
// cached for a few seconds, so a busy client costs no query per call.
type Authenticator struct {
	store *store.Store
	now   func() time.Time

	mu    sync.Mutex
	cache map[string]cachedToken
}

type cachedToken struct {
	tok     store.APIToken
	expires time.Time
}

// NewAuthenticator returns an Authenticator over st.
func NewAuthenticator(st *store.Store, now func() time.Time) *Authenticator {
	return &Authenticator{store: st, now: now, cache: make(map[string]cachedToken)}
}

func (a *Authenticator) lookup(ctx context.Context, hash string) (store.APIToken, error) {
	now := a.now()
	a.mu.Lock()
	c, ok := a.cache[hash]
	a.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.tok, nil
	}
	tok, err := a.store.APITokenByHash(ctx, hash)
	if err != nil {
		return tok, err
	}
	a.mu.Lock()
	if len(a.cache) > 10000 {
		clear(a.cache) // crude bound; tokens are few
	}
	a.cache[hash] = cachedToken{tok: tok, expires: now.Add(tokenCacheTTL)}
	a.mu.Unlock()
	return tok, nil
}

var _ connect.Interceptor = (*Authenticator)(nil)

func (a *Authenticator) authorize(ctx context.Context, procedure string, header string) (context.Context, error) {
	secret, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || secret == "" {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("missing bearer token: pass --token or add a context with `byoc context add`"))
	}
	tok, err := a.lookup(ctx, auth.Hash(secret))
	if errs.Is(err, errs.NotFound) {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown or revoked API token"))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("cannot check the API token now; try again"))
	}
	if tok.Role != store.RoleAdmin && !readOnly[procedure] {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("token "+tok.Name+" has role "+string(tok.Role)+", which may only read; this call needs an admin token"))
	}
	return context.WithValue(ctx, callerKey{}, tok), nil
}

// WrapUnary implements connect.Interceptor.
func (a *Authenticator) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, err := a.authorize(ctx, req.Spec().Procedure, req.Header().Get("Authorization"))
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient implements connect.Interceptor; it is a no-op.
func (a *Authenticator) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (a *Authenticator) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := a.authorize(ctx, conn.Spec().Procedure, conn.RequestHeader().Get("Authorization"))
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
