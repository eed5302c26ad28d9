// Package sso is imsd's single sign-on: it verifies OpenID Connect ID
// tokens (with github.com/coreos/go-oidc) that byoc login obtained from
// the vendor's identity provider, and maps the token's groups claim to
// role grants by imsd's SSO config file.
package sso

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/pelletier/go-toml/v2"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/auth"
)

// Config is the SSO config file (TOML).
type Config struct {
	// Issuer is the identity provider's issuer URL.
	Issuer string `toml:"issuer"`
	// ClientID is the OAuth client byoc login uses (a public client:
	// PKCE and device code, no secret); ID tokens must be for it.
	ClientID string `toml:"client_id"`
	// Scopes are asked for besides openid and offline_access (for
	// example profile, email, groups).
	Scopes []string `toml:"scopes"`
	// GroupsClaim is the ID token claim holding the groups (default
	// "groups").
	GroupsClaim string `toml:"groups_claim"`
	// Groups map identity provider groups to role grants.
	Groups []Group `toml:"group"`
}

// Group grants Role to the members of Name, on everything or on at most
// one of Install, App and Selector.
type Group struct {
	Name     string `toml:"name"`
	Role     string `toml:"role"`
	Install  string `toml:"install"`
	App      string `toml:"app"`
	Selector string `toml:"selector"`
}

// Load reads and checks the SSO config file at path.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	var c Config
	d := toml.NewDecoder(bytes.NewReader(b)).DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return c, fmt.Errorf("%s:%d:%d: %s", path, row, col, de.Error())
		}
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			return c, fmt.Errorf("%s: %s", path, sm.String())
		}
		return c, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := c.grants(); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// grants checks the config and returns each group's grants.
func (c Config) grants() (map[string][]access.Grant, error) {
	if c.Issuer == "" {
		return nil, errors.New("issuer: is required")
	}
	if c.ClientID == "" {
		return nil, errors.New("client_id: is required")
	}
	out := map[string][]access.Grant{}
	for i, g := range c.Groups {
		field := fmt.Sprintf("group[%d]", i)
		if g.Name == "" {
			return nil, fmt.Errorf("%s.name: is required", field)
		}
		r, err := access.ParseRole(g.Role)
		if err != nil {
			return nil, fmt.Errorf("%s.role: %w", field, err)
		}
		n := 0
		var sc access.Scope
		for _, s := range []struct {
			k access.ScopeKind
			v string
		}{{access.Install, g.Install}, {access.App, g.App}, {access.Selector, g.Selector}} {
			if s.v == "" {
				continue
			}
			n++
			if sc, err = access.NewScope(s.k, s.v); err != nil {
				return nil, fmt.Errorf("%s.%s: %w", field, s.k, err)
			}
		}
		if n > 1 {
			return nil, fmt.Errorf("%s: give at most one of install, app and selector", field)
		}
		out[g.Name] = append(out[g.Name], access.Grant{Role: r, Scope: sc, Source: "group " + g.Name})
	}
	return out, nil
}

// Verifier turns ID tokens into principals.
type Verifier struct {
	cfg    Config
	grants map[string][]access.Grant
	now    func() time.Time

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
	cache    map[string]access.Principal
}

// NewVerifier returns a Verifier for c. It reads the provider's
// discovery document at the first ID token it sees (and again after a
// failure), so imsd starts while the provider is down.
func NewVerifier(c Config, now func() time.Time) (*Verifier, error) {
	g, err := c.grants()
	if err != nil {
		return nil, err
	}
	if c.GroupsClaim == "" {
		c.GroupsClaim = "groups"
	}
	return &Verifier{cfg: c, grants: g, now: now, cache: map[string]access.Principal{}}, nil
}

func (v *Verifier) idVerifier(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.verifier != nil {
		return v.verifier, nil
	}
	// The provider's keys are fetched with a context that outlives this
	// call (go-oidc's remote key set keeps it).
	p, err := oidc.NewProvider(oidc.ClientContext(context.WithoutCancel(ctx), nil), v.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the identity provider %s: %w", v.cfg.Issuer, err)
	}
	v.verifier = p.Verifier(&oidc.Config{ClientID: v.cfg.ClientID, Now: v.now})
	return v.verifier, nil
}

// Principal verifies raw (signature, issuer, audience, expiry) and
// returns the user with the grants of its groups.
func (v *Verifier) Principal(ctx context.Context, raw string) (access.Principal, error) {
	key := auth.Hash(raw)
	v.mu.Lock()
	p, ok := v.cache[key]
	v.mu.Unlock()
	if ok && v.now().Before(p.Expires) {
		return p, nil
	}
	iv, err := v.idVerifier(ctx)
	if err != nil {
		return access.Principal{}, err
	}
	tok, err := iv.Verify(ctx, raw)
	if err != nil {
		var exp *oidc.TokenExpiredError
		if errors.As(err, &exp) {
			return access.Principal{}, fmt.Errorf("the session expired at %s", exp.Expiry.UTC().Format(time.RFC3339))
		}
		return access.Principal{}, fmt.Errorf("the ID token is not valid: %w", err)
	}
	claims := map[string]any{}
	if err := tok.Claims(&claims); err != nil {
		return access.Principal{}, fmt.Errorf("the ID token's claims: %w", err)
	}
	p = access.Principal{Kind: "user", ID: tok.Subject, Name: tok.Subject, Expires: tok.Expiry}
	for _, c := range []string{"email", "preferred_username"} {
		if s, ok := claims[c].(string); ok && s != "" {
			p.Name = s
			break
		}
	}
	var groups []string
	switch gs := claims[v.cfg.GroupsClaim].(type) {
	case []any:
		for _, g := range gs {
			if s, ok := g.(string); ok {
				groups = append(groups, s)
			}
		}
	case string:
		groups = []string{gs}
	}
	slices.Sort(groups)
	for _, g := range groups {
		p.Grants = append(p.Grants, v.grants[g]...)
	}
	v.mu.Lock()
	if len(v.cache) > 10000 {
		clear(v.cache)
	}
	v.cache[key] = p
	v.mu.Unlock()
	return p, nil
}
