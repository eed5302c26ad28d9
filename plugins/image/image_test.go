package image_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"go.uber.org/goleak"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/plugins/image"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

// TestMain fails a passing run that leaves goroutines behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openRepo(tb testing.TB, loc, repo string, creds ocicopy.Credentials) *ocicopy.Repo {
	tb.Helper()
	reg, err := ocicopy.ParseRegistry(loc)
	if err != nil {
		tb.Fatal(err)
	}
	r, err := ocicopy.Open(context.Background(), reg, repo, creds)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Close)
	return r
}

// multiArch pushes an index of two platform images and a signature of it
// into repo, and returns the index.
func multiArch(tb testing.TB, repo *ocicopy.Repo, seed uint64) ocispec.Descriptor {
	tb.Helper()
	ctx := context.Background()
	amd, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: seed, Layers: []int64{1 << 20, 2048}, Platform: &ocispec.Platform{OS: "linux", Architecture: "amd64"}})
	if err != nil {
		tb.Fatal(err)
	}
	arm, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: seed + 100, Layers: []int64{1 << 20}, Platform: &ocispec.Platform{OS: "linux", Architecture: "arm64"}})
	if err != nil {
		tb.Fatal(err)
	}
	idx, err := ocitest.Index(ctx, repo, amd, arm)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := ocitest.Artifact(ctx, repo, idx, "application/vnd.example.signature", []byte("signed "+idx.Digest.String())); err != nil {
		tb.Fatal(err)
	}
	return idx
}

// outputAtLeast checks that an integer output is at least min.
func outputAtLeast(key string, min int64) sdktest.Check {
	return func(o *sdktest.Outcome) error {
		v, err := strconv.ParseInt(o.Result.Outputs[key], 10, 64)
		if err != nil || v < min {
			return fmt.Errorf("output %s = %q, want at least %d", key, o.Result.Outputs[key], min)
		}
		return nil
	}
}

func TestImageSyncFromVendorRegistry(t *testing.T) {
	vendor := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	install := ocitest.StartRegistry(t, ocitest.RegistryOptions{Username: "install", Password: "pw"})
	src := openRepo(t, vendor.URL(), "acme/web", ocicopy.Credentials{})
	idx := multiArch(t, src, 1)
	dst := openRepo(t, install.URL(), "web", ocicopy.Credentials{Username: "install", Password: "pw"})
	config := map[string]any{"source": "acme/web@" + idx.Digest.String(), "repository": "web"}
	ref := install.Host + "/web@" + idx.Digest.String()

	sdktest.Test(t, image.New(), sdktest.Case{
		Env: map[string]string{
			"BYOC_INSTALL_REGISTRY":          install.URL(),
			"BYOC_INSTALL_REGISTRY_USERNAME": "install",
			"BYOC_INSTALL_REGISTRY_PASSWORD": "pw",
			"BYOC_VENDOR_REGISTRY":           vendor.Host,
		},
		Steps: []sdktest.Step{
			{Op: sdk.OpPlan, Config: config, Check: sdktest.All(
				sdktest.ExpectPlannedChange(sdk.ActionCreate, "image.web"),
				sdktest.ExpectChanges("copy blob sha256:"),
				sdktest.ExpectChanges("to "+ref),
			)},
			{Name: "first sync", Config: config, Check: sdktest.All(
				sdktest.ExpectOutput("digest", idx.Digest.String()),
				sdktest.ExpectOutput("media_type", ocispec.MediaTypeImageIndex),
				sdktest.ExpectOutput("size", strconv.FormatInt(idx.Size, 10)),
				sdktest.ExpectOutput("reference", ref),
				sdktest.ExpectOutput("source", "acme/web@"+idx.Digest.String()),
				sdktest.ExpectOutput("source_digest", idx.Digest.String()),
				sdktest.ExpectOutput("blobs_copied", "7"), // 2 configs, 3 layers, the signature's config and layer
				outputAtLeast("blob_bytes_transferred", 2<<20),
				sdktest.ExpectStateFile("image.json"),
				sdktest.ExpectLog("copied manifest "+idx.Digest.String()),
				func(*sdktest.Outcome) error {
					ok, err := dst.Exists(context.Background(), idx)
					if !ok {
						return fmt.Errorf("the install registry lacks the index: %v", err)
					}
					return nil
				},
			)},
			{Name: "unchanged re-sync", Config: config, Check: sdktest.All(
				sdktest.ExpectOutput("digest", idx.Digest.String()),
				sdktest.ExpectOutput("bytes_transferred", "0"),
				sdktest.ExpectOutput("blob_bytes_transferred", "0"),
				sdktest.ExpectOutput("blobs_skipped", "7"),
			)},
			{Op: sdk.OpPlan, Config: config, Check: sdktest.All(
				sdktest.ExpectChanges(ref+" is up to date"),
				func(o *sdktest.Outcome) error {
					if n := len(o.Result.PlannedChanges); n != 0 {
						return fmt.Errorf("plan of an up-to-date image has %d changes", n)
					}
					return nil
				},
			)},
			{Op: sdk.OpDrift, Config: config, Check: sdktest.ExpectDrifted(false)},
		},
		CheckDestroy: sdktest.ExpectNoStateFile("image.json"),
	})
}

func TestImageConfigRefusesTags(t *testing.T) {
	sdktest.Test(t, image.New(), sdktest.Case{Steps: []sdktest.Step{
		{Config: map[string]any{"source": "acme/web:1.4.0"}, ExpectDiagnostics: []string{`source: "acme/web:1.4.0" names a tag only: reference a digest`}},
		{Config: map[string]any{"source": "registry.example.com/acme/web:1.4.0"}, ExpectDiagnostics: []string{`source: "registry.example.com/acme/web:1.4.0" names a tag only`}},
		{Config: map[string]any{"source": "acme/web@sha256:abc"}, ExpectDiagnostics: []string{`source: reference "acme/web@sha256:abc": digest`}},
		{Config: map[string]any{"source": "Acme/web@sha256:" + strings.Repeat("a", 64)}, ExpectDiagnostics: []string{`source: reference "Acme/web@sha256:`}},
		{Config: map[string]any{"source": "acme/web@sha256:" + strings.Repeat("a", 64), "repository": "Web"}, ExpectDiagnostics: []string{`repository: "Web" is not a valid repository name`}},
		{Config: map[string]any{"source": "acme/web@sha256:" + strings.Repeat("a", 64), "tag": "x"}, ExpectDiagnostics: []string{`tag: unknown field`}},
		{Config: map[string]any{}, ExpectDiagnostics: []string{`source: is required`}},
		// Without an install registry from the agent, apply says so.
		{Config: map[string]any{"source": "acme/web@sha256:" + strings.Repeat("a", 64)}, ExpectError: regexp.MustCompile(`no install registry: the agent gives it in BYOC_INSTALL_REGISTRY`)},
	}, SkipDestroy: true})
}

// tree lists a directory's files and sizes.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			out = append(out, fmt.Sprint(strings.TrimPrefix(path, dir), " ", info.Size()))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, "\n")
}

func TestImageVendorOutageAndLayoutDrift(t *testing.T) {
	vendor := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	layout := t.TempDir()
	src := openRepo(t, vendor.URL(), "acme/api", ocicopy.Credentials{})
	v1, err := ocitest.Image(context.Background(), src, ocitest.ImageSpec{Seed: 7, Layers: []int64{1 << 20, 300 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := ocitest.Image(context.Background(), src, ocitest.ImageSpec{Seed: 8, Layers: []int64{2 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	c1 := map[string]any{"source": "acme/api@" + v1.Digest.String()}
	c2 := map[string]any{"source": "acme/api@" + v2.Digest.String()}
	repoDir := filepath.Join(layout, "acme", "api")
	var before string

	sdktest.Test(t, image.New(), sdktest.Case{
		Env: map[string]string{
			// The zero-setup install registry: an OCI layout root.
			"BYOC_INSTALL_REGISTRY": "oci:" + layout,
			"BYOC_VENDOR_REGISTRY":  vendor.Host,
		},
		Steps: []sdktest.Step{
			{Name: "v1", Config: c1, Check: sdktest.All(
				sdktest.ExpectOutput("digest", v1.Digest.String()),
				sdktest.ExpectOutput("reference", "oci:"+repoDir+"@"+v1.Digest.String()),
			)},
			{Name: "v2 during a vendor outage", Config: c2,
				PreConfig: func() error { before = tree(t, layout); vendor.Stop(); return nil },
				ExpectError: regexp.MustCompile(`^vendor registry ` + regexp.QuoteMeta(vendor.Host) +
					` is unreachable: .*connection refused; nothing the install runs was changed in the install registry oci:` +
					regexp.QuoteMeta(layout) + `, and what already runs is untouched$`),
				Check: func(*sdktest.Outcome) error {
					if after := tree(t, layout); after != before {
						return fmt.Errorf("the install registry changed during the outage:\nbefore:\n%s\nafter:\n%s", before, after)
					}
					return nil
				}},
			// What runs is v1, whole.
			{Op: sdk.OpDrift, Config: c1, Check: sdktest.ExpectDrifted(false)},
			{Name: "v2 once the vendor registry is back", Config: c2,
				PreConfig: func() error { vendor.Start(); return nil },
				Check: sdktest.All(
					sdktest.ExpectOutput("digest", v2.Digest.String()),
					sdktest.ExpectOutput("blobs_copied", "2"),
				)},
			{Op: sdk.OpDrift, Config: c2, Check: sdktest.ExpectDrifted(false)},
			// A config pointing at another digest than what runs is drift.
			{Op: sdk.OpDrift, Config: c1, Check: sdktest.All(sdktest.ExpectDrifted(true),
				sdktest.ExpectChanges("runs "+v2.Digest.String()+", the config says "+v1.Digest.String()))},
			// A layer removed from the install registry behind the
			// agent's back is drift, and the next apply sends only it.
			{Op: sdk.OpDrift, Config: c2,
				PreConfig: func() error {
					// v2's one layer: seed 8, layer 0.
					return os.Remove(filepath.Join(repoDir, "blobs", "sha256", ocitest.Blob{Seed: 9, Size: 2 << 20}.Descriptor().Digest.Encoded()))
				},
				Check: sdktest.All(sdktest.ExpectDrifted(true), sdktest.ExpectChanges("does not hold "+v2.Digest.String()+" whole"))},
			{Name: "repair", Config: c2, Check: sdktest.All(
				sdktest.ExpectOutput("blobs_copied", "1"),
				sdktest.ExpectOutput("blob_bytes_transferred", strconv.Itoa(2<<20)),
			)},
			{Op: sdk.OpDrift, Config: c2, Check: sdktest.ExpectDrifted(false)},
		},
	})
}

// The customer's policies see the copy (input.plan: the source registry,
// the digest, what is missing) and can refuse it before anything is
// copied: here, only images from allowed registries.
func TestImagePolicyAllowsRegistries(t *testing.T) {
	vendor := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	src := openRepo(t, vendor.URL(), "acme/api", ocicopy.Credentials{})
	img, err := ocitest.Image(context.Background(), src, ocitest.ImageSpec{Seed: 90, Layers: []int64{100 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	layout := t.TempDir()
	config := map[string]any{"source": "acme/api@" + img.Digest.String()}
	allowed := func(registry string) []sdk.PolicyModule {
		return []sdk.PolicyModule{{Name: "registries.rego", Source: sdk.PolicySourceCustomer, Rego: fmt.Sprintf(`package byoc.images

allowed := {%q}

deny contains msg if {
	input.type == "image"
	not allowed[input.plan.source_registry]
	msg := sprintf("image source registry %%s is not allowed", [input.plan.source_registry])
}

warn contains msg if {
	input.type == "image"
	input.plan.missing_bytes > 0
	msg := sprintf("copies %%d bytes of %%s", [input.plan.missing_bytes, input.plan.digest])
}
`, registry)}}
	}
	empty := func(*sdktest.Outcome) error {
		if files := tree(t, layout); files != "" {
			return fmt.Errorf("the install registry got files although the policy denied the copy:\n%s", files)
		}
		return nil
	}
	deny := regexp.MustCompile(`^denied by policy: image source registry ` + regexp.QuoteMeta(vendor.Host) + ` is not allowed \(customer policy registries.rego\)$`)
	sdktest.Test(t, image.New(), sdktest.Case{
		Env: map[string]string{"BYOC_INSTALL_REGISTRY": "oci:" + layout, "BYOC_VENDOR_REGISTRY": vendor.Host},
		Steps: []sdktest.Step{
			{Op: sdk.OpPlan, Config: config, Policies: allowed("registry.example.com"), ExpectError: deny},
			{Config: config, Policies: allowed("registry.example.com"), ExpectError: deny, Check: empty},
			{Config: config, Policies: allowed(vendor.Host), Check: sdktest.All(
				sdktest.ExpectOutput("digest", img.Digest.String()),
				sdktest.ExpectLog("policy warn [customer] registries.rego: copies "),
				func(o *sdktest.Outcome) error {
					if len(o.Result.PolicyFindings) != 1 || o.Result.PolicyFindings[0].Level != sdk.PolicyWarn {
						return fmt.Errorf("findings %+v, want one warning", o.Result.PolicyFindings)
					}
					return nil
				},
			)},
		},
	})
}

// A source named with its host (or an OCI layout) and its own
// credentials, as the copy serves uses other than an install's deploy;
// wrong credentials are not an outage.
func TestImageFullReferenceSources(t *testing.T) {
	srcReg := ocitest.StartRegistry(t, ocitest.RegistryOptions{Username: "puller", Password: "pull-pw"})
	src := openRepo(t, srcReg.URL(), "acme/api", ocicopy.Credentials{Username: "puller", Password: "pull-pw"})
	img, err := ocitest.Image(context.Background(), src, ocitest.ImageSpec{Seed: 95, Layers: []int64{64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	srcLayout := filepath.Join(t.TempDir(), "api")
	lay := openRepo(t, "oci:"+filepath.Dir(srcLayout), "api", ocicopy.Credentials{})
	if _, err := ocicopy.Copy(context.Background(), src, lay, img.Digest, ocicopy.Options{}); err != nil {
		t.Fatal(err)
	}
	install := t.TempDir()
	fromRegistry := map[string]any{"source": "http://" + srcReg.Host + "/acme/api@" + img.Digest.String(), "repository": "api"}
	fromLayout := map[string]any{"source": "oci:" + srcLayout + "@" + img.Digest.String(), "repository": "api2"}
	creds := map[string]string{"BYOC_SOURCE_REGISTRY_USERNAME": "puller", "BYOC_SOURCE_REGISTRY_PASSWORD": "pull-pw"}
	sdktest.Test(t, image.New(), sdktest.Case{
		Env: map[string]string{"BYOC_INSTALL_REGISTRY": "oci:" + install},
		Steps: []sdktest.Step{
			{Config: fromRegistry, Env: map[string]string{"BYOC_SOURCE_REGISTRY_USERNAME": "puller", "BYOC_SOURCE_REGISTRY_PASSWORD": "wrong"},
				ExpectError: regexp.MustCompile(`resolve sha256:[0-9a-f]{64} in ` + regexp.QuoteMeta(srcReg.Host) + `/acme/api: .*401`)},
			{Config: fromRegistry, Env: creds, Check: sdktest.All(
				sdktest.ExpectOutput("digest", img.Digest.String()),
				sdktest.ExpectOutput("reference", "oci:"+filepath.Join(install, "api")+"@"+img.Digest.String()))},
			{Config: fromLayout, Check: sdktest.ExpectOutput("reference", "oci:"+filepath.Join(install, "api2")+"@"+img.Digest.String())},
		},
	})
}

// A long copy says how far along it is while blobs stream.
func TestImageApplyReportsProgress(t *testing.T) {
	vendor := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	install := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	slow := ocitest.StartProxy(t, install.Host)
	slow.SetUploadRate(4 << 20)
	src := openRepo(t, vendor.URL(), "acme/api", ocicopy.Credentials{})
	img, err := ocitest.Image(context.Background(), src, ocitest.ImageSpec{Seed: 97, Layers: []int64{2 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	sdktest.Test(t, image.NewWithProgress(50*time.Millisecond), sdktest.Case{
		Env: map[string]string{"BYOC_INSTALL_REGISTRY": "http://" + slow.Host, "BYOC_VENDOR_REGISTRY": vendor.Host},
		Steps: []sdktest.Step{{Config: map[string]any{"source": "acme/api@" + img.Digest.String()}, Check: sdktest.All(
			sdktest.ExpectLog(" of 2.0 MB ("),
			sdktest.ExpectOutput("blobs_copied", "2"),
		)}},
		SkipDestroy: true,
	})
}

// An image job copies its source's signatures, attestations and SBOMs
// into the install registry, never an image attached to it: a referrer
// that is a container image would land there unchecked by the
// customer's supply-chain policy (which checks the source), pullable by
// digest. The job fails naming it, and the install registry gets no
// manifest.
func TestImageSmuggledReferrerRefused(t *testing.T) {
	vendor := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	layout := t.TempDir()
	src := openRepo(t, vendor.URL(), "acme/web", ocicopy.Credentials{})
	ctx := context.Background()
	root, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 1, Layers: []int64{4096}})
	if err != nil {
		t.Fatal(err)
	}
	smuggled, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 2, Layers: []int64{4096}, Subject: &root})
	if err != nil {
		t.Fatal(err)
	}
	sdktest.Test(t, image.New(), sdktest.Case{
		Env: map[string]string{"BYOC_INSTALL_REGISTRY": "oci:" + layout, "BYOC_VENDOR_REGISTRY": vendor.Host},
		Steps: []sdktest.Step{{
			Config:      map[string]any{"source": "acme/web@" + root.Digest.String()},
			ExpectError: regexp.MustCompile(`referrer ` + regexp.QuoteMeta(smuggled.Digest.String()) + ` of ` + regexp.QuoteMeta(root.Digest.String()) + ` carries the container filesystem layer`),
			Check: func(*sdktest.Outcome) error {
				if tr := tree(t, layout); strings.Contains(tr, "index.json") {
					return fmt.Errorf("the install registry got a manifest:\n%s", tr)
				}
				return nil
			},
		}},
	})
}
