package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// layoutTree lists the files under dir with their sizes.
func layoutTree(t *testing.T, dir string) string {
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

// The image type end to end, with a real agentd and real registries: an
// app whose web component is a multi-platform image with a signature,
// provisioned into the agent's zero-setup install registry (an OCI
// layout in its state dir), digests equal; then an update while the
// source registry is down fails, saying so, with the install registry
// unchanged; once the registry is back, the update succeeds.
func TestImageDeployAndSourceOutage(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	vendor := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	reg, _ := ocicopy.ParseRegistry(vendor.URL())
	src, err := ocicopy.Open(ctx, reg, "acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	amd, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 1, Layers: []int64{1 << 20}, Platform: &ocispec.Platform{OS: "linux", Architecture: "amd64"}})
	if err != nil {
		t.Fatal(err)
	}
	arm, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 2, Layers: []int64{1 << 20}, Platform: &ocispec.Platform{OS: "linux", Architecture: "arm64"}})
	if err != nil {
		t.Fatal(err)
	}
	v1, err := ocitest.Index(ctx, src, amd, arm)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := ocitest.Artifact(ctx, src, v1, "application/vnd.example.signature", []byte("signed"))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 3, Layers: []int64{2 << 20}})
	if err != nil {
		t.Fatal(err)
	}

	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	pushed := cli.PushApp(map[string]string{
		"app.toml":    "name = \"shop\"\n",
		"inputs.toml": fmt.Sprintf("[[input]]\nname = \"web_digest\"\ndefault = %q\n", v1.Digest),
		"components/web.toml": fmt.Sprintf(`type = "image"
[config]
source = "%s/acme/web@{{ .inputs.web_digest }}"
repository = "web"
`, vendor.Host),
		"installs/acme.toml": "",
	})
	state := t.TempDir()
	cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), state)
	layout := filepath.Join(state, "registry")

	if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded: 1/1 done") {
		t.Fatalf("provision:\n%s", out)
	}
	c := ims.Admin()
	job := installJobs(t, c)[0]
	wantRef := "oci:" + filepath.Join(layout, "web") + "@" + v1.Digest.String()
	if job.Outputs["digest"] != v1.Digest.String() || job.Outputs["reference"] != wantRef || job.Outputs["media_type"] != ocispec.MediaTypeImageIndex {
		t.Fatalf("image job outputs %v; want digest %s, reference %s", job.Outputs, v1.Digest, wantRef)
	}
	installReg, _ := ocicopy.ParseRegistry("oci:" + layout)
	dst, err := ocicopy.Open(ctx, installReg, "web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	if missing, err := ocicopy.Missing(ctx, dst, v1.Digest, true); err != nil || len(missing) > 0 {
		t.Fatalf("the install registry lacks part of %s: %v, %d missing", v1.Digest, err, len(missing))
	}
	if ok, _ := dst.Exists(ctx, sig); !ok {
		t.Fatal("the signature did not reach the install registry")
	}

	// The source registry goes down; an update to v2 fails before the
	// install registry changes.
	before := layoutTree(t, layout)
	vendor.Stop()
	out, errOut, code := cli.Exec("install", "update", "acme", "--input", "web_digest="+v2.Digest.String(), "--wait")
	if code != 1 || !strings.Contains(out+errOut, "failed") {
		t.Fatalf("update during the outage: exit %d\n%s%s", code, out, errOut)
	}
	var failed *imsv1.Job
	for _, j := range installJobs(t, c) {
		if j.State == imsv1.JobState_JOB_STATE_FAILED {
			failed = j
		}
	}
	if failed == nil {
		t.Fatalf("no failed job after the outage: %v", installJobs(t, c))
	}
	wantErr := "source registry " + vendor.Host + " is unreachable: "
	if !strings.Contains(failed.Error, wantErr) || !strings.Contains(failed.Error, "and what already runs is untouched") {
		t.Fatalf("job error %q; want it to say %q and that what runs is untouched", failed.Error, wantErr)
	}
	if after := layoutTree(t, layout); after != before {
		t.Fatalf("the install registry changed during the outage:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	vendor.Start()
	if out := cli.Run(0, "install", "update", "acme", "--input", "web_digest="+v2.Digest.String(), "--wait"); !strings.Contains(out, "succeeded: 1/1 done") {
		t.Fatalf("update once the registry is back:\n%s", out)
	}
	dst.Close()
	if dst, err = ocicopy.Open(ctx, installReg, "web", ocicopy.Credentials{}); err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if missing, err := ocicopy.Missing(ctx, dst, v2.Digest, true); err != nil || len(missing) > 0 {
		t.Fatalf("the install registry lacks part of %s: %v, %d missing", v2.Digest, err, len(missing))
	}
}
