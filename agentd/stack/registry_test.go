package stack_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/byoc-dev/byoc/agentd/stack"
	"github.com/byoc-dev/byoc/agentd/stack/azurefake"
	"github.com/byoc-dev/byoc/agentd/stack/gcpfake"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// sourceImage pushes a small image into an OCI layout and opens it.
func sourceImage(t *testing.T) (*ocicopy.Repo, digest.Digest) {
	t.Helper()
	ctx := context.Background()
	src, err := ocicopy.Open(ctx, ocicopy.Registry{LayoutRoot: t.TempDir()}, "vendor/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	desc, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 7, Layers: []int64{4096, 1024}})
	if err != nil {
		t.Fatal(err)
	}
	return src, desc.Digest
}

// copyAs copies the image into the install registry with the
// credentials a job of mode gets, read from its environment as the
// image, helm and terraform plugins read them.
func copyAs(t *testing.T, creds stack.Credentials, reg ocicopy.Registry, src *ocicopy.Repo, dg digest.Digest) error {
	t.Helper()
	dst, err := ocicopy.Open(context.Background(), reg, "acme/web", ocicopy.CredentialsFromEnv(creds.Env, stack.InstallRegistryEnv))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if _, err := ocicopy.Copy(context.Background(), src, dst, dg, ocicopy.Options{}); err != nil {
		return err
	}
	got, err := dst.Resolve(context.Background(), dg.String())
	if err != nil || got.Digest != dg {
		t.Fatalf("resolve %s after the copy: %v %v", dg, got.Digest, err)
	}
	return nil
}

// TestAzureInstallRegistryCustody: a job's mode identity's token
// (azidentity, from the fake's managed identity endpoint) is exchanged
// at the install registry (an ACR's /oauth2/exchange, in front of a real
// docker-registry) for a refresh token, traded for a repository-scoped
// token, and an image copy into the registry works; an identity without
// AcrPush fails naming the role.
func TestAzureInstallRegistryCustody(t *testing.T) {
	backend := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	fake := azurefake.New(t)
	acr := fake.StartRegistry(t, backend.Host)
	s, ids := azureStack(t, fake, func(c *stackconfig.Config) { c.Registry = acr.Host })
	fake.GrantRegistry(ids.prov, "AcrPush")
	fake.GrantRegistry(ids.maint, "AcrPull")
	reg := ocicopy.Registry{Host: acr.Host, PlainHTTP: true}
	src, dg := sourceImage(t)
	ctx := context.Background()

	prov, err := s.Assume(ctx, "provision", "", "job-1", 10*time.Minute, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if prov.Env["BYOC_INSTALL_REGISTRY_AZURE_TOKEN"] != prov.Env["BYOC_AZURE_ACCESS_TOKEN"] || prov.Env["BYOC_INSTALL_REGISTRY_AZURE_TENANT"] != fake.Tenant {
		t.Fatalf("the job's registry credentials: %v", prov.Env)
	}
	if err := copyAs(t, prov, reg, src, dg); err != nil {
		t.Fatalf("copy with the provision identity (AcrPush): %v", err)
	}
	if got := fake.Exchanged(); !slices.Equal(got, []string{ids.prov}) {
		t.Errorf("exchanged tokens of %v, want only the provision identity's", got)
	}

	maint, err := s.Assume(ctx, "maintenance", "", "job-2", 10*time.Minute, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// The image is there: a copy with pull only has nothing to write.
	if err := copyAs(t, maint, reg, src, dg); err != nil {
		t.Fatalf("an AcrPull identity checking a present image: %v", err)
	}
	fake.GrantRegistry(ids.maint, "")
	src2, dg2 := sourceImage2(t)
	err = copyAs(t, maint, reg, src2, dg2)
	if err == nil || !strings.Contains(err.Error(), "AcrPush") || !strings.Contains(err.Error(), acr.Host) {
		t.Fatalf("an identity without a registry role: %v", err)
	}
	t.Logf("without a role: %v", err)

	// A token that is not the tenant's is refused at the exchange.
	bad := stack.Credentials{Env: map[string]string{"BYOC_INSTALL_REGISTRY_AZURE_TOKEN": "forged", "BYOC_INSTALL_REGISTRY_AZURE_TENANT": fake.Tenant}}
	if err := copyAs(t, bad, reg, src, dg); err == nil || !strings.Contains(err.Error(), "/oauth2/exchange: HTTP 401") || !strings.Contains(err.Error(), "not one this tenant issued") {
		t.Fatalf("a forged token: %v", err)
	}
}

// sourceImage2 is another image, not yet in the install registry.
func sourceImage2(t *testing.T) (*ocicopy.Repo, digest.Digest) {
	t.Helper()
	ctx := context.Background()
	src, err := ocicopy.Open(ctx, ocicopy.Registry{LayoutRoot: t.TempDir()}, "vendor/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	desc, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 99, Layers: []int64{2048}})
	if err != nil {
		t.Fatal(err)
	}
	return src, desc.Digest
}

// TestGCPInstallRegistryCustody: a job's impersonated service account
// token (the IAM Credentials API, through the real Google client) is
// the install registry's password as oauth2accesstoken (Artifact
// Registry's token realm, in front of a real docker-registry), and an
// image copy into it works; an account without
// roles/artifactregistry.writer fails naming the role.
func TestGCPInstallRegistryCustody(t *testing.T) {
	backend := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	fake := gcpfake.New(t, gcpAgent)
	ar := fake.StartArtifactRegistry(t, backend.Host)
	s := gcpStack(t, fake, func(c *stackconfig.Config) { c.Registry = ar.Host + "/acme-prod-1/byoc-acme" })
	fake.GrantArtifactRegistry(gcpProv, "roles/artifactregistry.writer")
	reg := ocicopy.Registry{Host: ar.Host, PlainHTTP: true}
	src, dg := sourceImage(t)
	ctx := context.Background()

	prov, err := s.Assume(ctx, "provision", "", "job-1", 10*time.Minute, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if prov.Env["BYOC_INSTALL_REGISTRY_USERNAME"] != gcpfake.RegistryUsername || prov.Env["BYOC_INSTALL_REGISTRY_PASSWORD"] != prov.Env["GOOGLE_OAUTH_ACCESS_TOKEN"] {
		t.Fatalf("the job's registry credentials: %v", prov.Env)
	}
	if err := copyAs(t, prov, reg, src, dg); err != nil {
		t.Fatalf("copy with the provision account (writer): %v", err)
	}

	maint, err := s.Assume(ctx, "maintenance", "", "job-2", 10*time.Minute, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	src2, dg2 := sourceImage2(t)
	err = copyAs(t, maint, reg, src2, dg2)
	if err == nil || !strings.Contains(err.Error(), "roles/artifactregistry.writer") || !strings.Contains(err.Error(), ar.Host) {
		t.Fatalf("an account without a registry role: %v", err)
	}
	t.Logf("without a role: %v", err)
}
