package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/security/keyvault/azsecrets"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// An Azure stack (format azure) attaches to the agent's VM one
// user-assigned managed identity for the agent itself and one per
// enabled permission mode. The agent gets tokens for them through
// azidentity's ManagedIdentityCredential, naming the identity by its
// client id: on a VM from the instance metadata service (IMDS); where
// IDENTITY_ENDPOINT and IDENTITY_HEADER are set (App Service, Container
// Apps, and the tests' azurefake) from that endpoint. The agent's own
// identity reads the stack's Key Vault; a job gets a token of its mode's
// identity only, in its own environment. The sandbox's egress policy
// refuses the instance metadata service, so a job cannot ask IMDS for
// another identity's token itself.

// ManagementScope is the scope of a job's token: Azure Resource Manager.
const ManagementScope = "https://management.azure.com/.default"

// azureState is an Azure stack's clients.
type azureState struct {
	transport policy.Transporter
	mu        sync.Mutex
	creds     map[string]azcore.TokenCredential
	vault     *azsecrets.Client
}

// OpenOptions are Open's options beside the path.
type OpenOptions struct {
	// HTTPClient is the Azure clients' HTTP client (nil: the SDK's
	// default); tests give the local fake's TLS client.
	HTTPClient *http.Client
}

// openAzure builds an Azure stack's clients: the agent's own managed
// identity and the Key Vault client it reads with.
func (s *Stack) openAzure(o OpenOptions) error {
	c := s.Config
	az := &azureState{creds: map[string]azcore.TokenCredential{}}
	if o.HTTPClient != nil {
		az.transport = o.HTTPClient
	}
	s.azure = az
	own, err := az.credential(c.Azure.AgentClientID)
	if err != nil {
		return fmt.Errorf("the agent's managed identity %s: %w", c.Azure.AgentClientID, err)
	}
	vaultURL := c.Azure.KeyVaultURL
	opts := &azsecrets.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: az.transport}}
	if u := c.Endpoints["keyvault"]; u != "" {
		// A private endpoint or a test's fake: the challenge's resource
		// (vault.azure.net) is not its host's domain.
		vaultURL, opts.DisableChallengeResourceVerification = u, true
	}
	if az.vault, err = azsecrets.NewClient(vaultURL, own, opts); err != nil {
		return fmt.Errorf("key vault %s: %w", vaultURL, err)
	}
	return nil
}

// credential returns the managed identity credential of clientID.
func (az *azureState) credential(clientID string) (azcore.TokenCredential, error) {
	az.mu.Lock()
	defer az.mu.Unlock()
	if c, ok := az.creds[clientID]; ok {
		return c, nil
	}
	c, err := azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{
		ClientOptions: azcore.ClientOptions{Transport: az.transport},
		ID:            azidentity.ClientID(clientID),
	})
	if err != nil {
		return nil, err
	}
	az.creds[clientID] = c
	return c, nil
}

// readKeyVault returns the latest version of Key Vault secret name.
func (s *Stack) readKeyVault(ctx context.Context, src stackconfig.Source) (string, error) {
	if s.azure == nil || s.azure.vault == nil {
		return "", fmt.Errorf("%s: this stack has no Key Vault client", src)
	}
	out, err := s.azure.vault.GetSecret(ctx, src.KeyVaultSecret, "", nil)
	if err != nil {
		return "", fmt.Errorf("read %s from %s: %w", src, s.Config.Azure.KeyVaultURL, azErr(err))
	}
	if out.Value == nil {
		return "", fmt.Errorf("read %s: it has no value", src)
	}
	return *out.Value, nil
}

// assumeAzure gets a token of mode's managed identity for a job: the
// job's environment names the identity, the customer's tenant,
// subscription and resource group, and carries the token, which ends
// when Azure says (managed identity tokens live up to 24 hours; Azure
// offers no way to shorten one to the job's limit).
func (s *Stack) assumeAzure(ctx context.Context, mode string, r stackconfig.Role) (Credentials, error) {
	tok, err := s.azureToken(ctx, r)
	if err != nil {
		return Credentials{}, fmt.Errorf("get a token of the %s managed identity %s (client id %s): %w; check that the stack's %s is true and the identity is attached to the agent's VM",
			mode, r.Name, r.ClientID, azErr(err), r.Parameter)
	}
	a := s.Config.Azure
	creds := Credentials{
		Env: map[string]string{
			"AZURE_CLIENT_ID":           r.ClientID,
			"AZURE_TENANT_ID":           a.TenantID,
			"AZURE_SUBSCRIPTION_ID":     a.SubscriptionID,
			"ARM_CLIENT_ID":             r.ClientID,
			"ARM_TENANT_ID":             a.TenantID,
			"ARM_SUBSCRIPTION_ID":       a.SubscriptionID,
			"BYOC_AZURE_RESOURCE_GROUP": a.ResourceGroup,
			"BYOC_AZURE_ACCESS_TOKEN":   tok.Token,
			"BYOC_AZURE_TOKEN_EXPIRES":  tok.ExpiresOn.UTC().Format(time.RFC3339),
		},
		Secret:  []string{tok.Token},
		RoleARN: r.ClientID,
		Expires: tok.ExpiresOn,
	}
	if s.Config.Registry != "" {
		// The install registry (an Azure Container Registry) exchanges
		// the same token for its own when a plugin first reaches it
		// (internal/ocicopy); the mode's identity has AcrPush on it.
		creds.Env[InstallRegistryEnv+ocicopy.EnvAzureToken] = tok.Token
		creds.Env[InstallRegistryEnv+ocicopy.EnvAzureTenant] = a.TenantID
	}
	return creds, nil
}

// InstallRegistryEnv is the prefix of the install registry's credentials
// in a job's environment (agentd/agent and the plugins read the same).
const InstallRegistryEnv = "BYOC_INSTALL_REGISTRY"

// azureToken gets an Azure Resource Manager token of r's identity.
func (s *Stack) azureToken(ctx context.Context, r stackconfig.Role) (azcore.AccessToken, error) {
	if s.azure == nil {
		return azcore.AccessToken{}, errors.New("this stack has no Azure clients")
	}
	cred, err := s.azure.credential(r.ClientID)
	if err != nil {
		return azcore.AccessToken{}, err
	}
	return cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{ManagementScope}})
}

var spaceRE = regexp.MustCompile(`\s+`)

// azErr shortens an Azure SDK error: its text spans lines, with
// separators and links to troubleshooting guides.
func azErr(err error) error {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		msg := strings.TrimSpace(fmt.Sprintf("HTTP %d %s", re.StatusCode, re.ErrorCode))
		if re.RawResponse != nil {
			// azcore buffered the body when it made the error.
			if b, _ := runtime.Payload(re.RawResponse); len(b) > 0 {
				var body struct {
					Error struct{ Message string } `json:"error"`
				}
				if json.Unmarshal(b, &body) == nil && body.Error.Message != "" {
					msg += ": " + body.Error.Message
				}
			}
		}
		return errors.New(msg)
	}
	var lines []string
	for l := range strings.SplitSeq(err.Error(), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "---") || strings.HasPrefix(l, "To troubleshoot") {
			continue
		}
		lines = append(lines, l)
	}
	msg := spaceRE.ReplaceAllString(strings.Join(lines, " "), " ")
	if len(msg) > 400 {
		msg = msg[:400] + "…"
	}
	return errors.New(msg)
}
