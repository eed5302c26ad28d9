package agentapi

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/registry"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// RegistryConfig is the vendor registry imsd issues grants for.
type RegistryConfig struct {
	// URL is the registry as agents reach it (http://HOST:PORT).
	URL string
	// Service is its auth.token.service.
	Service string
	// GrantTTL is how long a grant may wait to be exchanged (default 5m).
	GrantTTL time.Duration
	// TokenTTL is how long a registry token is valid (default: the job's
	// time limit, at least 15m and at most 2h).
	TokenTTL time.Duration
}

// grantScopes is what a job of type typ with config may have a grant
// for; nil for a job that needs none or cannot have one. Only a plan and
// an apply read the vendor registry (an image's drift check and destroy
// look at the install registry only).
func grantScopes(installID, typ, op string, config []byte) []string {
	if op != "plan" && op != "apply" {
		return nil
	}
	var cfg map[string]any
	switch typ {
	case agentproto.ImageType:
		if installID == store.VendorInstallID || json.Unmarshal(config, &cfg) != nil {
			return nil
		}
		src, _ := cfg[agentproto.ImageSourceKey].(string)
		repo, _, err := agentproto.ParseBuildRef(src)
		if err != nil {
			return nil // the agent refuses the job, saying why
		}
		return []string{"repository:" + repo + ":pull"}
	case store.BuildType:
		if installID != store.VendorInstallID || json.Unmarshal(config, &cfg) != nil {
			return nil
		}
		repo, _ := cfg["repository"].(string)
		if !registry.ValidRepository(repo) {
			return nil
		}
		return []string{"repository:" + repo + ":pull,push"}
	}
	return nil
}

// grant issues the registry grant job j needs, if any: stored (its
// secret's hash) before the assignment that carries it is sent.
func (s *Service) grant(ctx context.Context, j store.Job, installID string) (*agentv1.RegistryGrant, *agentproto.GrantClaims, error) {
	rc := s.cfg.Registry
	if rc == nil {
		return nil, nil, nil
	}
	scopes := grantScopes(installID, j.ComponentType, j.Operation, j.Config)
	if scopes == nil {
		return nil, nil, nil
	}
	now := s.now()
	ttl := rc.GrantTTL
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	g := store.RegistryGrant{ID: auth.NewID("grt_"), InstallID: installID, JobID: j.ID, Attempt: j.Attempt, Scopes: scopes,
		CreatedAt: now, ExpiresAt: now.Add(ttl)}
	secret := auth.NewSecret("")
	g.Hash = auth.Hash(secret)
	if err := s.store.CreateRegistryGrant(ctx, g); err != nil {
		return nil, nil, err
	}
	svc := rc.Service
	if svc == "" {
		svc = registry.DefaultService
	}
	pg := &agentv1.RegistryGrant{Id: g.ID, Secret: secret, Registry: rc.URL, Service: svc, Scopes: scopes, ExpireUnixMs: g.ExpiresAt.UnixMilli()}
	return pg, &agentproto.GrantClaims{ID: g.ID, Secret: secret, Registry: rc.URL, Service: svc, Scopes: scopes, Expires: time.UnixMilli(pg.ExpireUnixMs)}, nil
}

// exchangeSkew bounds how far an exchange's signed time may be from imsd's.
const exchangeSkew = 5 * time.Minute

// Authorize implements registry.Authorizer: an agent exchanges its
// grant. The user is the agent's id, the password its signed exchange
// (agentproto.GrantExchangePassword); the scopes asked for must be among
// the grant's (none asked: all of them).
func (s *Service) Authorize(ctx context.Context, user, password string, scopes []registry.Scope) (string, []registry.Scope, time.Duration, error) {
	ex, err := agentproto.ParseGrantExchangePassword(password)
	if err != nil {
		return "", nil, 0, errors.Join(registry.ErrDenied, err)
	}
	a, err := s.store.GetAgent(ctx, user)
	if errs.Is(err, errs.NotFound) {
		return "", nil, 0, errors.Join(registry.ErrDenied, fmt.Errorf("agent %q unknown", user))
	}
	if err != nil {
		return "", nil, 0, err
	}
	now := s.now()
	// Checked before anything is written: without the agent's key, a
	// request costs imsd no write (not even a refusal's audit record).
	if !verifiesWith(a, func(k ed25519.PublicKey) bool { return ex.Verify(k, a.ID) }) {
		s.log.WarnContext(ctx, "registry grant exchange not signed by the agent's key", "agent", a.ID, "grant", ex.GrantID)
		return "", nil, 0, errors.Join(registry.ErrDenied, errors.New("the exchange is not signed by the agent's key"))
	}
	var granted []registry.Scope
	g, err := s.store.ExchangeRegistryGrant(ctx, ex.GrantID, auth.Hash(ex.Secret), a.ID, now, func(g store.RegistryGrant) error {
		if d := now.Sub(ex.At); d > exchangeSkew || d < -exchangeSkew {
			return fmt.Errorf("the exchange is signed for %s, more than %s from imsd's clock", ex.At.UTC().Format(time.RFC3339), exchangeSkew)
		}
		var allowed []registry.Scope
		for _, v := range g.Scopes {
			sc, err := registry.ParseScope(v)
			if err != nil {
				return err
			}
			allowed = append(allowed, sc)
		}
		if len(scopes) == 0 {
			granted = allowed
			return nil
		}
		for _, sc := range scopes {
			if !sc.Within(allowed) {
				return fmt.Errorf("scope %s is not in the grant (%s)", sc, strings.Join(g.Scopes, " "))
			}
		}
		granted = scopes
		return nil
	})
	if errs.Is(err, errs.PermissionDenied) {
		s.log.WarnContext(ctx, "registry grant refused", "agent", a.ID, "grant", ex.GrantID, "err", err)
		return "", nil, 0, errors.Join(registry.ErrDenied, err)
	}
	if err != nil {
		return "", nil, 0, err
	}
	return "agent:" + a.ID, granted, s.tokenTTL(ctx, g.JobID), nil
}

// Bounds of a registry token's lifetime.
const (
	minTokenTTL = 15 * time.Minute
	maxTokenTTL = 2 * time.Hour
)

// tokenTTL is how long the token of job jobID's grant lives: the job's
// time limit (a copy may take that long, and the registry checks the
// token on every request), between minTokenTTL and maxTokenTTL;
// Config.Registry.TokenTTL when set.
func (s *Service) tokenTTL(ctx context.Context, jobID string) time.Duration {
	if s.cfg.Registry != nil && s.cfg.Registry.TokenTTL > 0 {
		return s.cfg.Registry.TokenTTL
	}
	ttl := minTokenTTL
	if j, err := s.store.GetJob(ctx, jobID); err == nil && j.Timeout > ttl {
		ttl = min(j.Timeout, maxTokenTTL)
	}
	return ttl
}
