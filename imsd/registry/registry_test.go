package registry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/byoc-dev/byoc/imsd/registry"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
)

// TestRegistryVerifiesMintedTokens runs a real docker-registry with token
// authentication trusting imsd's certificate: a token for one repository
// pushes and pulls it, and the registry itself refuses it for another
// repository, for push when only pull was granted, after it expired, and
// when signed by another key.
func TestRegistryVerifiesMintedTokens(t *testing.T) {
	dir := t.TempDir()
	s, err := registry.LoadOrCreateSigner(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	reg := ocitest.StartRegistry(t, ocitest.RegistryOptions{AuthYAML: registry.AuthYAML("http://127.0.0.1:1/v2/token", "", registry.CertPath(dir))})
	now := time.Now()
	mint := func(s *registry.Signer, at time.Time, ttl time.Duration, scopes ...string) string {
		t.Helper()
		var sc []registry.Scope
		for _, v := range scopes {
			p, err := registry.ParseScope(v)
			if err != nil {
				t.Fatal(err)
			}
			sc = append(sc, p)
		}
		tok, err := s.Mint("test", sc, at, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	push := mint(s, now, 5*time.Minute, "repository:web:pull,push")
	d := pushImage(t, repo(t, reg.Host, "web", push), "v1", 1)
	pushImage(t, repo(t, reg.Host, "db", mint(s, now, 5*time.Minute, "repository:db:pull,push")), "v1", 2)

	ctx := context.Background()
	pull := mint(s, now, 5*time.Minute, "repository:web:pull")
	if _, err := repo(t, reg.Host, "web", pull).Resolve(ctx, d.Digest.String()); err != nil {
		t.Fatalf("pull web with a pull token: %v", err)
	}
	other, _ := registry.LoadOrCreateSigner(t.TempDir(), "")
	for name, tc := range map[string]struct{ repo, token string }{
		"another repository": {"db", pull},
		"expired":            {"web", mint(s, now.Add(-time.Hour), 5*time.Minute, "repository:web:pull")},
		"another key":        {"web", mint(other, now, 5*time.Minute, "repository:web:pull")},
		"another service":    {"web", mintService(t, dir, "other", "repository:web:pull")},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := repo(t, reg.Host, tc.repo, tc.token).Resolve(ctx, "v1")
			if err == nil || !isUnauthorized(err) {
				t.Fatalf("resolve %s: %v, want 401", tc.repo, err)
			}
		})
	}
	t.Run("push with a pull token", func(t *testing.T) {
		_, err := ocitest.Image(ctx, repo(t, reg.Host, "web", pull), ocitest.ImageSpec{Seed: 3, Layers: []int64{10}})
		if err == nil || !isUnauthorized(err) {
			t.Fatalf("push with a pull-only token: %v, want 401", err)
		}
	})
}

// repo opens repository name on host over plain HTTP with token.
func repo(t *testing.T, host, name, token string) *ocicopy.Repo {
	t.Helper()
	r, err := ocicopy.Open(t.Context(), ocicopy.Registry{Host: host, PlainHTTP: true}, name, ocicopy.Credentials{AccessToken: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// pushImage pushes a small image of one seeded layer to r as tag.
func pushImage(t *testing.T, r *ocicopy.Repo, tag string, seed uint64) ocispec.Descriptor {
	t.Helper()
	d, err := ocitest.Image(t.Context(), r, ocitest.ImageSpec{Seed: seed, Layers: []int64{1024}})
	if err == nil {
		err = r.Tag(t.Context(), d, tag)
	}
	if err != nil {
		t.Fatalf("push image to %s: %v", r.Name(), err)
	}
	return d
}

func mintService(t *testing.T, dir, service, scope string) string {
	s, err := registry.LoadOrCreateSigner(dir, service)
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := registry.ParseScope(scope)
	tok, err := s.Mint("test", []registry.Scope{sc}, time.Now(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

func isUnauthorized(err error) bool {
	return strings.Contains(err.Error(), "401") || strings.Contains(strings.ToLower(err.Error()), "unauthorized")
}

type authorizeFunc func(ctx context.Context, user, pass string, scopes []registry.Scope) (string, []registry.Scope, time.Duration, error)

func (f authorizeFunc) Authorize(ctx context.Context, user, pass string, scopes []registry.Scope) (string, []registry.Scope, time.Duration, error) {
	return f(ctx, user, pass, scopes)
}

// TestHandler: the token endpoint's refusals name what is wrong, and an
// authorised request gets a token for what the authorizer granted.
func TestHandler(t *testing.T) {
	s, err := registry.LoadOrCreateSigner(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	h := registry.Handler(s, authorizeFunc(func(_ context.Context, user, pass string, scopes []registry.Scope) (string, []registry.Scope, time.Duration, error) {
		if pass != "good" {
			return "", nil, 0, errors.Join(registry.ErrDenied, errors.New("grant already used"))
		}
		return user, scopes, time.Minute, nil
	}), time.Now)
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct {
		name, query, pass string
		status            int
		body              string
	}{
		{"ok", "service=byoc-registry&scope=repository:web:pull", "good", 200, `"token":"`},
		{"wrong service", "service=x&scope=repository:web:pull", "good", 400, `service \"x\" is not this registry's`},
		{"bad scope", "service=byoc-registry&scope=repository:WEB:pull", "good", 400, `is not a repository name`},
		{"no credentials", "service=byoc-registry&scope=repository:web:pull", "", 401, "basic credentials required"},
		{"denied", "service=byoc-registry&scope=repository:web:pull", "bad", 401, "grant already used"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", srv.URL+"/v2/token?"+tc.query, nil)
			if tc.pass != "" {
				req.SetBasicAuth("agent", tc.pass)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b := new(strings.Builder)
			_, _ = io.Copy(b, resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(b.String(), tc.body) {
				t.Fatalf("%s: %d %s, want %d containing %s", tc.query, resp.StatusCode, b, tc.status, tc.body)
			}
		})
	}
}
