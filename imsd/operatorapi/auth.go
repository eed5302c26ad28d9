package operatorapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/rpcerr"
	"github.com/byoc-dev/byoc/imsd/store"
)

type callerKey struct{}

// callerFrom returns who made the call.
func callerFrom(ctx context.Context) access.Principal {
	p, _ := ctx.Value(callerKey{}).(access.Principal)
	return p
}

// WithCaller returns ctx carrying p as the caller, for tests and for
// code that calls the service directly.
func WithCaller(ctx context.Context, p access.Principal) context.Context {
	return context.WithValue(ctx, callerKey{}, p)
}

// TokenPrincipal is the principal of an API token: its one grant.
func TokenPrincipal(t store.APIToken) (access.Principal, error) {
	sc, err := access.ParseScope(t.Scope)
	if err != nil {
		return access.Principal{}, fmt.Errorf("token %s: %w", t.Name, err)
	}
	return access.Principal{Kind: "token", ID: t.ID, Name: t.Name, Expires: t.ExpiresAt,
		Grants: []access.Grant{{Role: access.Role(t.Role), Scope: sc, Source: "token " + t.Name}}}, nil
}

// IDTokenVerifier turns a single sign-on ID token into a principal with
// the grants imsd's config maps its groups to.
type IDTokenVerifier interface {
	Principal(ctx context.Context, rawIDToken string) (access.Principal, error)
}

// tokenCacheTTL bounds how long a looked-up token is trusted without
// asking the database again.
const tokenCacheTTL = 5 * time.Second

// touchEvery is how stale a token's last use may get in the database.
const touchEvery = time.Minute

// Authenticator is a Connect interceptor that checks the bearer token (an
// API token or, with single sign-on, an ID token) and the caller's role
// grants against the procedure's rule (rules.go) on every operator call,
// unary and streaming. Tokens are cached for a few seconds, so a busy
// client costs no query per call.
type Authenticator struct {
	store *store.Store
	now   func() time.Time
	sso   IDTokenVerifier
	log   *slog.Logger

	mu    sync.Mutex
	cache map[string]cachedToken

	// refused writes the audit records of refused calls (refusals.go).
	refused *refusals
}

type cachedToken struct {
	tok     store.APIToken
	p       access.Principal
	expires time.Time
}

// NewAuthenticator returns an Authenticator over st; sso may be nil (no
// single sign-on).
func NewAuthenticator(st *store.Store, now func() time.Time, sso IDTokenVerifier, log *slog.Logger) *Authenticator {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Authenticator{store: st, now: now, sso: sso, log: log, cache: make(map[string]cachedToken),
		refused: &refusals{store: st, now: now, log: log, actors: map[string]*actorRefusals{}}}
}

func (a *Authenticator) lookup(ctx context.Context, hash string) (store.APIToken, access.Principal, error) {
	now := a.now()
	a.mu.Lock()
	c, ok := a.cache[hash]
	a.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.tok, c.p, nil
	}
	tok, err := a.store.APITokenByHash(ctx, hash)
	if err != nil {
		return tok, access.Principal{}, err
	}
	p, err := TokenPrincipal(tok)
	if err != nil {
		return tok, p, err
	}
	if now.Sub(tok.LastUsedAt) >= touchEvery {
		if err := a.store.TouchAPIToken(ctx, tok.ID, now); err != nil {
			a.log.WarnContext(ctx, "cannot record an api token's last use", "token", tok.Name, "err", err)
		} else {
			tok.LastUsedAt = now
		}
	}
	a.mu.Lock()
	if len(a.cache) > 10000 {
		clear(a.cache) // crude bound; tokens are few
	}
	a.cache[hash] = cachedToken{tok: tok, p: p, expires: now.Add(tokenCacheTTL)}
	a.mu.Unlock()
	return tok, p, nil
}

var _ connect.Interceptor = (*Authenticator)(nil)

// Forget drops every cached token, so a revoked one is looked up again.
func (a *Authenticator) Forget() {
	a.mu.Lock()
	clear(a.cache)
	a.mu.Unlock()
}

// authenticate returns who presented the Authorization header.
func (a *Authenticator) authenticate(ctx context.Context, header string) (access.Principal, error) {
	secret, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || secret == "" {
		return access.Principal{}, connect.NewError(connect.CodeUnauthenticated, errors.New("missing bearer token: pass --token, run byoc login, or add a context with `byoc context add`"))
	}
	if !strings.HasPrefix(secret, auth.APITokenPrefix) && strings.Count(secret, ".") == 2 {
		if a.sso == nil {
			return access.Principal{}, connect.NewError(connect.CodeUnauthenticated, errors.New("an ID token was presented, but single sign-on is off on this imsd"))
		}
		p, err := a.sso.Principal(ctx, secret)
		if err != nil {
			return p, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("single sign-on: %w; run byoc login again", err))
		}
		return p, nil
	}
	tok, p, err := a.lookup(ctx, auth.Hash(secret))
	if errs.Is(err, errs.NotFound) {
		return p, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown or revoked API token"))
	}
	if err != nil {
		a.log.ErrorContext(ctx, "cannot check an api token", "err", err)
		return p, connect.NewError(connect.CodeUnavailable, errors.New("cannot check the API token now; try again"))
	}
	if !tok.ExpiresAt.IsZero() && !a.now().Before(tok.ExpiresAt) {
		return p, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("API token %s expired at %s", tok.Name, tok.ExpiresAt.UTC().Format(time.RFC3339)))
	}
	return p, nil
}

// authorize authenticates the caller (unless the procedure is public)
// and, when msg is known, applies the procedure's rule.
func (a *Authenticator) authorize(ctx context.Context, procedure, header string, msg proto.Message, checkRule bool) (context.Context, error) {
	ru, ok := rules[procedure]
	if ok && ru.on == onPublic {
		return ctx, nil
	}
	p, err := a.authenticate(ctx, header)
	if err != nil {
		return nil, err
	}
	ctx = WithCaller(ctx, p)
	if checkRule {
		if err := a.checkRule(ctx, p, procedure, msg); err != nil {
			return nil, err
		}
	}
	return ctx, nil
}

// checkRule applies the procedure's rule and records a refusal.
func (a *Authenticator) checkRule(ctx context.Context, p access.Principal, procedure string, msg proto.Message) error {
	err := check(ctx, a.store, p, procedure, msg)
	if err == nil {
		return nil
	}
	cerr := rpcerr.ToConnect(ctx, a.log, err)
	if errs.Is(err, errs.PermissionDenied) {
		var t *access.Target
		if r := (*refusalError)(nil); errors.As(err, &r) {
			t = &r.target
		}
		a.refused.record(ctx, p, procedure, msg, t, cerr)
	}
	return cerr
}

// refusedByHandler records a refusal the handler of a call made (a rule
// the request alone could not decide), if it made one.
func (a *Authenticator) refusedByHandler(ctx context.Context, note *refusalNote, procedure string, msg any, err error) {
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		return
	}
	note.mu.Lock()
	t := note.target
	note.mu.Unlock()
	if t != nil {
		a.refused.record(ctx, callerFrom(ctx), procedure, msg, t, err)
	}
}

// WrapUnary implements connect.Interceptor.
func (a *Authenticator) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		msg, _ := req.Any().(proto.Message)
		ctx, err := a.authorize(ctx, req.Spec().Procedure, req.Header().Get("Authorization"), msg, true)
		if err != nil {
			return nil, err
		}
		note := &refusalNote{}
		ctx = context.WithValue(ctx, refusalNoteKey{}, note)
		res, err := next(ctx, req)
		if err != nil {
			a.refusedByHandler(ctx, note, req.Spec().Procedure, msg, err)
		}
		return res, err
	}
}

// WrapStreamingClient implements connect.Interceptor; it is a no-op.
func (a *Authenticator) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// recheckFrom returns the function that checks a stream's caller again
// (nil for a call that did not come through the Authenticator), as
// stillAllowed does: an API token looked up again (revoked, expired), a
// single sign-on ID token's expiry (imsd cannot revoke one, and the
// token in the stream's header is not refreshed), and the procedure's
// rule applied again to the stream's first message (grants and labels
// as they stand).
func recheckFrom(ctx context.Context) func(ctx context.Context, msg proto.Message) error {
	if ctx.Value(streamCheckKey{}) == nil {
		return nil
	}
	return func(ctx context.Context, _ proto.Message) error { return stillAllowed(ctx) }
}

// WrapStreamingHandler implements connect.Interceptor. The caller is
// authenticated when the stream opens; the rule is applied to the first
// request message as the handler receives it, before it acts on it. A
// handler that lives long (SupportShell) checks again with recheckFrom.
func (a *Authenticator) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		procedure := conn.Spec().Procedure
		header := conn.RequestHeader().Get("Authorization")
		ctx, err := a.authorize(ctx, procedure, header, nil, false)
		if err != nil {
			return err
		}
		if ru, ok := rules[procedure]; ok && (ru.on == onPublic || ru.on == onSelf) {
			return next(ctx, conn)
		}
		note := &refusalNote{}
		ctx = context.WithValue(ctx, refusalNoteKey{}, note)
		cc := &checkedConn{StreamingHandlerConn: conn, ctx: ctx, a: a, procedure: procedure}
		ctx = context.WithValue(ctx, streamCheckKey{}, func(ctx context.Context) error {
			return a.recheck(ctx, procedure, header, cc)
		})
		err = next(ctx, cc)
		if err != nil && !cc.refused {
			a.refusedByHandler(ctx, note, procedure, cc.msg, err)
		}
		return err
	}
}

type streamCheckKey struct{}

// stillAllowed reports whether the caller of a stream that has been
// open a while may still make it (recheck); nil outside a stream the
// Authenticator opened. Long-lived streams (the fleet view, a log
// follow, a support shell) call it at each wake-up and end with its
// error.
func stillAllowed(ctx context.Context) error {
	f, _ := ctx.Value(streamCheckKey{}).(func(context.Context) error)
	if f == nil {
		return nil
	}
	return f(ctx)
}

// recheck applies again what allowed a stream to open, as things stand
// now: an API token must still be valid (a revoked or expired one ends
// the stream: unauthenticated), a single sign-on ID token must not have
// expired (ssoExpired), and the procedure's rule must still allow the
// stream's first message (an install relabelled out of a selector grant
// ends it: permission_denied, recorded as a refusal).
func (a *Authenticator) recheck(ctx context.Context, procedure, header string, cc *checkedConn) error {
	p := callerFrom(ctx)
	if p.Kind == "token" {
		if _, err := a.authenticate(ctx, header); err != nil {
			return err
		}
	}
	if err := a.ssoExpired(p); err != nil {
		return err
	}
	if cc.first == nil {
		return nil
	}
	return a.checkRule(ctx, p, procedure, cc.first)
}

// ssoExpired ends a stream opened with a single sign-on ID token once
// that token expires. The token was verified when the stream opened,
// and a stream's header is never replaced: byoc refreshes its session
// for the calls it makes next, never for a stream already open, so
// without this a stream (a support session above all) would outlive the
// sign-in that opened it by as long as it lasts.
func (a *Authenticator) ssoExpired(p access.Principal) error {
	if p.Kind != "user" || p.Expires.IsZero() || a.now().Before(p.Expires) {
		return nil
	}
	return connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("single sign-on: the ID token this stream was opened with expired at %s; run the command again (byoc refreshes the session) or byoc login",
		p.Expires.UTC().Format(time.RFC3339)))
}

// checkedConn applies the procedure's rule to each received message.
type checkedConn struct {
	connect.StreamingHandlerConn
	ctx       context.Context
	a         *Authenticator
	procedure string
	// msg is the last message received; refused says the rule refused
	// it (and the refusal is recorded).
	msg     proto.Message
	refused bool
	// first is the first message received (set by the handler's first
	// Receive, before it may call stillAllowed), which recheck applies
	// the rule to again.
	first proto.Message
	// checked is set once a message passed the rule.
	checked bool
}

func (c *checkedConn) Receive(m any) error {
	if err := c.StreamingHandlerConn.Receive(m); err != nil {
		return err
	}
	msg, _ := m.(proto.Message)
	c.msg = msg
	if c.first == nil {
		c.first = msg
	}
	if c.checked && rules[c.procedure].firstOnly {
		return nil
	}
	c.checked = true
	if err := c.a.checkRule(c.ctx, callerFrom(c.ctx), c.procedure, msg); err != nil {
		c.refused = true
		return err
	}
	return nil
}
