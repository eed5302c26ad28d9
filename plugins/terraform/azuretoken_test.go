package terraform

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
)

// TestAzureTokenEndpoint: the real azidentity ManagedIdentityCredential,
// pointed at the job's endpoint through IDENTITY_ENDPOINT and
// IDENTITY_HEADER, gets the job's token; the metadata-service shape
// (what azurerm's ARM_MSI_ENDPOINT speaks) answers too; another
// resource, another identity or a wrong header secret are refused.
func TestAzureTokenEndpoint(t *testing.T) {
	const clientID = "11111111-2222-3333-4444-555555555555"
	exp := time.Now().Add(50 * time.Minute).UTC().Truncate(time.Second)
	e, env, err := startAzureTokenEndpoint(map[string]string{envAzureToken: "job-token-1", envAzureClient: clientID, envAzureExpires: exp.Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !strings.HasPrefix(env["IDENTITY_ENDPOINT"], "http://127.0.0.1:") || env["ARM_USE_MSI"] != "true" {
		t.Fatalf("env %v", env)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	cred, err := azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{ID: azidentity.ClientID(clientID)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tok, err := cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{"https://management.azure.com/.default"}})
	if err != nil || tok.Token != "job-token-1" || !tok.ExpiresOn.Equal(exp) {
		t.Fatalf("azidentity: %+v, %v", tok, err)
	}
	if _, err := cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{"https://vault.azure.net/.default"}}); err == nil || !strings.Contains(err.Error(), "Azure Resource Manager") {
		t.Errorf("a Key Vault token: %v, want refused", err)
	}

	get := func(url string, h map[string]string) (int, map[string]string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body map[string]string
		_ = json.NewDecoder(res.Body).Decode(&body)
		return res.StatusCode, body
	}
	imds := env["ARM_MSI_ENDPOINT"] + "?api-version=2018-02-01&resource=https%3A%2F%2Fmanagement.azure.com%2F&client_id=" + clientID
	if code, b := get(imds, map[string]string{"Metadata": "true"}); code != 200 || b["access_token"] != "job-token-1" || b["expires_on"] == "" {
		t.Errorf("metadata shape: %d %v", code, b)
	}
	for _, tc := range []struct {
		url string
		h   map[string]string
	}{
		{imds, nil},
		{strings.Replace(imds, clientID, "99999999-2222-3333-4444-555555555555", 1), map[string]string{"Metadata": "true"}},
		{env["IDENTITY_ENDPOINT"] + "?api-version=2019-08-01&resource=https://management.azure.com", map[string]string{"X-IDENTITY-HEADER": "guess"}},
	} {
		if code, b := get(tc.url, tc.h); code == 200 || b["access_token"] != "" {
			t.Errorf("%s %v: %d %v, want refused", tc.url, tc.h, code, b)
		}
	}
	if e2, env2, err := startAzureTokenEndpoint(map[string]string{}); e2 != nil || env2 != nil || err != nil {
		t.Errorf("without a token: %v %v %v", e2, env2, err)
	}
}
