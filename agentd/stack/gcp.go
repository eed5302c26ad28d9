package stack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/googleapi"
	iamcredentials "google.golang.org/api/iamcredentials/v1"
	"google.golang.org/api/option"
	secretmanager "google.golang.org/api/secretmanager/v1"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// A Google Cloud stack (format gcp) runs the agent on a VM as its own
// service account, which may read the stack's Secret Manager secrets and
// impersonate (roles/iam.serviceAccountTokenCreator) each enabled
// permission mode's service account, and nothing else. The agent's own
// token comes from the VM's metadata server (golang.org/x/oauth2/google's
// ComputeTokenSource; GCE_METADATA_HOST points it elsewhere, as the
// tests' gcpfake does); a job's token is a short-lived access token of
// its mode's service account from the IAM Credentials API
// (generateAccessToken), whose lifetime is the job's limit plus JobGrace
// within an hour, in the job's own environment only. The sandbox's
// egress policy refuses the metadata server, so a job cannot ask it for
// the agent's token itself.

// CloudPlatformScope is the scope of the agent's and a job's tokens.
const CloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"

// gcpState is a Google Cloud stack's clients.
type gcpState struct {
	creds   *iamcredentials.Service
	secrets *secretmanager.Service
}

// openGCP builds a Google Cloud stack's clients, authenticated as the
// VM's service account.
func (s *Stack) openGCP(o OpenOptions) error {
	c := s.Config
	base := http.DefaultTransport
	if o.HTTPClient != nil && o.HTTPClient.Transport != nil {
		base = o.HTTPClient.Transport
	}
	own := google.ComputeTokenSource("", CloudPlatformScope)
	hc := &http.Client{Transport: &oauth2.Transport{Source: own, Base: base}}
	ctx := context.Background()
	opts := func(svc string) []option.ClientOption {
		out := []option.ClientOption{option.WithHTTPClient(hc)}
		if u := c.Endpoints[svc]; u != "" {
			out = append(out, option.WithEndpoint(u))
		}
		return out
	}
	g := &gcpState{}
	var err error
	if g.creds, err = iamcredentials.NewService(ctx, opts("iamcredentials")...); err != nil {
		return fmt.Errorf("the IAM Credentials client: %w", err)
	}
	if g.secrets, err = secretmanager.NewService(ctx, opts("secretmanager")...); err != nil {
		return fmt.Errorf("the Secret Manager client: %w", err)
	}
	s.gcp = g
	return nil
}

// readGCPSecret returns the latest version of a Secret Manager secret of
// the stack's project.
func (s *Stack) readGCPSecret(ctx context.Context, src stackconfig.Source) (string, error) {
	if s.gcp == nil {
		return "", fmt.Errorf("%s: this stack has no Secret Manager client", src)
	}
	name := "projects/" + s.Config.GCP.Project + "/secrets/" + src.GCPSecret + "/versions/latest"
	out, err := s.gcp.secrets.Projects.Secrets.Versions.Access(name).Context(ctx).Do()
	if err != nil {
		return "", fmt.Errorf("read %s as %s: %w", name, s.Config.GCP.AgentServiceAccount, gcpErr(err))
	}
	if out.Payload == nil {
		return "", fmt.Errorf("read %s: it has no payload", name)
	}
	v, err := decodeB64(out.Payload.Data)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	return v, nil
}

// gcpToken gets an access token of r's service account lasting d.
func (s *Stack) gcpToken(ctx context.Context, r stackconfig.Role, d time.Duration) (*iamcredentials.GenerateAccessTokenResponse, error) {
	if s.gcp == nil {
		return nil, errors.New("this stack has no IAM Credentials client")
	}
	req := &iamcredentials.GenerateAccessTokenRequest{Scope: []string{CloudPlatformScope}, Lifetime: fmt.Sprintf("%ds", int(d/time.Second))}
	return s.gcp.creds.Projects.ServiceAccounts.GenerateAccessToken("projects/-/serviceAccounts/"+r.ServiceAccount, req).Context(ctx).Do()
}

// gcpRoleErr is the error of a mode's service account that cannot be
// impersonated.
func gcpRoleErr(mode string, r stackconfig.Role, err error) error {
	return fmt.Errorf("impersonate the %s service account %s: %w; check that the stack's %s is true and that the agent's service account has roles/iam.serviceAccountTokenCreator on it",
		mode, r.ServiceAccount, gcpErr(err), r.Parameter)
}

// assumeGCP gets a token of mode's service account for a job, ending at
// end (within an hour, the API's limit): the job's environment names the
// account, the project and region, and carries the token in the
// variables the google terraform provider (GOOGLE_OAUTH_ACCESS_TOKEN)
// and gcloud (CLOUDSDK_AUTH_ACCESS_TOKEN) read.
func (s *Stack) assumeGCP(ctx context.Context, mode string, r stackconfig.Role, now, end time.Time) (Credentials, error) {
	d := max(time.Minute, min(end.Sub(now), MaxSession))
	out, err := s.gcpToken(ctx, r, d)
	if err != nil {
		return Credentials{}, gcpRoleErr(mode, r, err)
	}
	if out.AccessToken == "" {
		return Credentials{}, fmt.Errorf("impersonate %s: the IAM Credentials API answered without a token", r.ServiceAccount)
	}
	expires, err := time.Parse(time.RFC3339Nano, out.ExpireTime)
	if err != nil {
		return Credentials{}, fmt.Errorf("impersonate %s: expireTime %q: %w", r.ServiceAccount, out.ExpireTime, err)
	}
	g := s.Config.GCP
	env := map[string]string{
		"GOOGLE_OAUTH_ACCESS_TOKEN":  out.AccessToken,
		"CLOUDSDK_AUTH_ACCESS_TOKEN": out.AccessToken,
		"GOOGLE_CLOUD_PROJECT":       g.Project,
		"GOOGLE_PROJECT":             g.Project,
		"CLOUDSDK_CORE_PROJECT":      g.Project,
		"BYOC_GCP_SERVICE_ACCOUNT":   r.ServiceAccount,
		"BYOC_GCP_TOKEN_EXPIRES":     expires.UTC().Format(time.RFC3339),
	}
	if g.Region != "" {
		env["GOOGLE_REGION"], env["CLOUDSDK_COMPUTE_REGION"] = g.Region, g.Region
	}
	if s.Config.Registry != "" {
		// The install registry (Artifact Registry) takes the token as
		// oauth2accesstoken's password; the mode's account needs
		// roles/artifactregistry.writer on the repository.
		env[InstallRegistryEnv+"_USERNAME"], env[InstallRegistryEnv+"_PASSWORD"] = ocicopy.GoogleUsername, out.AccessToken
	}
	return Credentials{Env: env, Secret: []string{out.AccessToken}, RoleARN: r.ServiceAccount, Expires: expires}, nil
}

// gcpErr shortens a Google API error to its code, status and message.
func gcpErr(err error) error {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		msg := fmt.Sprintf("HTTP %d", ge.Code)
		if ge.Message != "" {
			msg += ": " + strings.TrimSpace(ge.Message)
		}
		return errors.New(msg)
	}
	return err
}
