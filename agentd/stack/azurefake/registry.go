package azurefake

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
)

// ACRUsername is the user an ACR refresh token is sent as.
const ACRUsername = "00000000-0000-0000-0000-000000000000"

// StartRegistry fronts backend (a real docker-registry, host:port) with
// an Azure Container Registry's token exchange: POST /oauth2/exchange
// (grant_type=access_token, service, tenant, access_token: a token this
// fake issued for Azure Resource Manager, not expired, of this tenant)
// answers a refresh token; /oauth2/token trades it (grant_type=
// refresh_token, or Basic auth as ACRUsername as the docker CLI does)
// for an access token of the actions the identity's registry role
// allows (GrantRegistry: AcrPush pull and push, AcrPull pull, none
// nothing), which the registry's every request needs. Plain HTTP on
// loopback.
func (a *Azure) StartRegistry(tb testing.TB, backend string) *ocitest.TokenProxy {
	tb.Helper()
	p := ocitest.StartTokenProxy(tb, ocitest.TokenProxyOptions{Backend: backend, RealmPath: "/oauth2/token",
		Login: func(r *http.Request) (string, error) {
			rt := r.Form.Get("refresh_token")
			if r.Form.Get("grant_type") != "refresh_token" {
				user, pass, ok := r.BasicAuth()
				if !ok || user != ACRUsername {
					return "", errors.New("want grant_type=refresh_token, or Basic auth as " + ACRUsername)
				}
				rt = pass
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			id, ok := a.refresh[rt]
			if !ok {
				return "", errors.New("the refresh token is not this registry's")
			}
			return id, nil
		},
		Allowed: func(clientID, _ string) []string {
			a.mu.Lock()
			defer a.mu.Unlock()
			return a.registryRoles[clientID]
		}})
	p.Mux.HandleFunc("POST /oauth2/exchange", func(w http.ResponseWriter, r *http.Request) {
		fail := func(msg string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"errors":[{"code":"UNAUTHORIZED","message":%q}]}`, msg)
		}
		if err := r.ParseForm(); err != nil {
			fail(err.Error())
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		t, ok := a.byToken[r.Form.Get("access_token")]
		switch {
		case r.Form.Get("grant_type") != "access_token":
			fail("grant_type must be access_token")
		case r.Form.Get("service") != p.Host:
			fail(fmt.Sprintf("service %q is not this registry (%s)", r.Form.Get("service"), p.Host))
		case r.Form.Get("tenant") != "" && r.Form.Get("tenant") != a.Tenant:
			fail("the registry is not in tenant " + r.Form.Get("tenant"))
		case !ok:
			fail("the access token is not one this tenant issued")
		case t.Resource != ManagementResource:
			fail(fmt.Sprintf("the access token's audience is %s, not %s", t.Resource, ManagementResource))
		case !time.Now().Before(t.ExpiresOn):
			fail("the access token has expired")
		default:
			rt := "fake-acr-refresh-" + NewID()
			a.refresh[rt] = t.ClientID
			a.exchanged = append(a.exchanged, t.ClientID)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"refresh_token":%q}`, rt)
		}
	})
	return p
}

// GrantRegistry gives an identity a role on the registry: "AcrPush",
// "AcrPull", or "" for none.
func (a *Azure) GrantRegistry(clientID, role string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch strings.ToLower(role) {
	case "acrpush":
		a.registryRoles[clientID] = []string{"pull", "push"}
	case "acrpull":
		a.registryRoles[clientID] = []string{"pull"}
	default:
		delete(a.registryRoles, clientID)
	}
}

// Exchanged are the client ids whose tokens the registry exchanged.
func (a *Azure) Exchanged() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.exchanged...)
}
