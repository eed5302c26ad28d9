package gcpfake

import (
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
)

// RegistryUsername is the user a Google access token is sent as.
const RegistryUsername = "oauth2accesstoken"

// StartArtifactRegistry fronts backend (a real docker-registry,
// host:port) as Artifact Registry does: its token realm (/v2/token)
// takes Basic auth as oauth2accesstoken with a Google access token this
// fake issued (not expired, with the cloud-platform scope) as the
// password, and issues registry tokens for the actions the account's
// role allows (GrantArtifactRegistry: writer pull and push, reader
// pull), which the registry's every request needs. Plain HTTP on
// loopback.
func (g *GCP) StartArtifactRegistry(tb testing.TB, backend string) *ocitest.TokenProxy {
	tb.Helper()
	return ocitest.StartTokenProxy(tb, ocitest.TokenProxyOptions{Backend: backend, RealmPath: "/v2/token",
		Login: func(r *http.Request) (string, error) {
			user, pass, ok := r.BasicAuth()
			if !ok || user != RegistryUsername {
				return "", errors.New("want Basic auth as " + RegistryUsername + " with a Google access token")
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			t, known := g.byToken[pass]
			switch {
			case !known:
				return "", errors.New("the access token is not one Google issued")
			case time.Now().After(t.Expires):
				return "", errors.New("the access token has expired")
			case len(t.Scopes) > 0 && !slices.Contains(t.Scopes, "https://www.googleapis.com/auth/cloud-platform"):
				return "", errors.New("the access token lacks the cloud-platform scope")
			}
			return t.Account, nil
		},
		Allowed: func(account, _ string) []string {
			g.mu.Lock()
			defer g.mu.Unlock()
			return g.registryRoles[account]
		}})
}

// GrantArtifactRegistry gives account a role on the repository:
// "roles/artifactregistry.writer", ".reader", or "" for none.
func (g *GCP) GrantArtifactRegistry(account, role string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch role {
	case "roles/artifactregistry.writer":
		g.registryRoles[account] = []string{"pull", "push"}
	case "roles/artifactregistry.reader":
		g.registryRoles[account] = []string{"pull"}
	default:
		delete(g.registryRoles, account)
	}
}
