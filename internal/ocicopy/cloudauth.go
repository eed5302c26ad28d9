package ocicopy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// Install registries on Azure and Google Cloud take the job's cloud
// identity, not a password. An Azure Container Registry exchanges a
// Microsoft Entra (AAD) access token for a refresh token of its own
// (POST https://REGISTRY/oauth2/exchange, grant_type=access_token), which
// oras-go's auth.Client then trades at the registry's token realm
// (/oauth2/token, grant_type=refresh_token) for an access token scoped
// to the repository and actions: what az acr login does. Artifact
// Registry takes a Google access token as the password of the user
// oauth2accesstoken (as gcloud's Docker credential helper does).

const (
	// ACRUsername is the user an ACR refresh token is sent as (the docker
	// CLI's, when it logs in with one).
	ACRUsername = "00000000-0000-0000-0000-000000000000"
	// GoogleUsername is the user a Google access token is sent as.
	GoogleUsername = "oauth2accesstoken"
)

// Environment suffixes of an Azure identity's token for the install
// registry: PREFIX_AZURE_TOKEN (an AAD access token for Azure Resource
// Manager) and PREFIX_AZURE_TENANT.
const (
	EnvAzureToken  = "_AZURE_TOKEN"
	EnvAzureTenant = "_AZURE_TENANT"
)

// acrCredential is the auth.Client credential of a registry that
// exchanges an AAD token: the exchange happens on the first request that
// needs a token, once per repository handle.
func acrCredential(client *http.Client, reg Registry, tenant, aadToken string) auth.CredentialFunc {
	var mu sync.Mutex
	var refresh string
	return func(ctx context.Context, hostport string) (auth.Credential, error) {
		if hostport != reg.Host {
			return auth.EmptyCredential, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if refresh == "" {
			rt, err := ACRExchange(ctx, client, reg, tenant, aadToken)
			if err != nil {
				return auth.EmptyCredential, err
			}
			refresh = rt
		}
		return auth.Credential{RefreshToken: refresh}, nil
	}
}

// ACRExchange exchanges an AAD access token for reg's refresh token.
func ACRExchange(ctx context.Context, client *http.Client, reg Registry, tenant, aadToken string) (string, error) {
	scheme := "https"
	if reg.PlainHTTP {
		scheme = "http"
	}
	u := scheme + "://" + reg.Host + "/oauth2/exchange"
	form := url.Values{"grant_type": {"access_token"}, "service": {reg.Host}, "access_token": {aadToken}}
	if tenant != "" {
		form.Set("tenant", tenant)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("exchange the identity's Azure token at %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(body))
		var e struct {
			Errors []struct{ Code, Message string }
		}
		if json.Unmarshal(body, &e) == nil && len(e.Errors) > 0 {
			msg = e.Errors[0].Code + ": " + e.Errors[0].Message
		}
		return "", fmt.Errorf("exchange the identity's Azure token at %s: HTTP %d: %s (the registry must be in the identity's tenant and accept Entra tokens)", u, resp.StatusCode, msg)
	}
	var out struct {
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.RefreshToken == "" {
		return "", fmt.Errorf("exchange the identity's Azure token at %s: the answer has no refresh_token", u)
	}
	return out.RefreshToken, nil
}

// CheckWritable checks that creds may push to repository in reg without
// writing anything: it starts a blob upload (with a token for pull and
// push, when the registry asks for one) and cancels it. An error says
// what the registry answered.
func CheckWritable(ctx context.Context, reg Registry, repository string, creds Credentials) error {
	if reg.IsLayout() {
		return nil
	}
	full := reg.repoPath(repository)
	tr := newTransport()
	defer tr.CloseIdleConnections()
	c := authClient(reg, creds, &http.Client{Transport: tr})
	scheme := "https"
	if reg.PlainHTTP {
		scheme = "http"
	}
	ctx = auth.AppendRepositoryScope(ctx, registry.Reference{Registry: reg.Host, Repository: full}, auth.ActionPull, auth.ActionPush)
	u := scheme + "://" + reg.Host + "/v2/" + full + "/blobs/uploads/"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("start an upload to %s/%s: %w", reg.Host, full, err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		msg := strings.TrimSpace(string(body))
		var e struct {
			Errors []struct{ Code, Message string }
		}
		if json.Unmarshal(body, &e) == nil && len(e.Errors) > 0 {
			msg = e.Errors[0].Code + ": " + e.Errors[0].Message
		}
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			return fmt.Errorf("start an upload to %s/%s: HTTP %d %s (%s)", reg.Host, full, resp.StatusCode, msg, DeniedHint)
		}
		return fmt.Errorf("start an upload to %s/%s: HTTP %d %s", reg.Host, full, resp.StatusCode, msg)
	}
	// Cancel it: nothing stays behind (a registry that cannot cancel
	// expires the upload).
	if loc := resp.Header.Get("Location"); loc != "" {
		if lu, err := req.URL.Parse(loc); err == nil {
			if del, err := http.NewRequestWithContext(ctx, http.MethodDelete, lu.String(), nil); err == nil {
				if r, err := c.Do(del); err == nil {
					r.Body.Close()
				}
			}
		}
	}
	return nil
}
