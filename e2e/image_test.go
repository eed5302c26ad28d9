package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
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

// The image type end to end, with real agents and real registries, into
// the zero-setup install registry (an OCI layout in the agent's state
// dir): a multi-platform index with a signature, synced from a source
// registry into the vendor registry by the build agent, is provisioned
// by the install's agentd with the deploy's one-time grant, digests equal
// and the signature with it; then an update while the vendor registry is
// down fails, saying so, with the install registry unchanged file for
// file; once the registry is back, the update succeeds.
func TestImageDeployIntoLayoutAndVendorOutage(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	c := startCustody(t)
	src := repo(t, c.source.Host, "acme/web", "")
	v1 := pushIndex(t, src, "1.0", 1, 256<<10)
	sig, err := ocitest.Artifact(ctx, src, v1, "application/vnd.example.signature", []byte("signed"))
	if err != nil {
		t.Fatal(err)
	}
	b1 := c.build(t, "acme/web:1.0", "web")
	if b1.Digest != v1.Digest.String() {
		t.Fatalf("build %s, want the source digest %s", b1.Digest, v1.Digest)
	}
	pushed := c.cli.PushApp(shopApp("web@" + b1.Digest))
	state := t.TempDir()
	cluster.StartAgent(t, c.ims.URL(), pushed.EnrollToken(t), state)
	waitConnected(t, c.ims, "acme")
	layout := filepath.Join(state, "registry")

	if wf := runWorkflow(t, c, imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION); wf.State != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
		t.Fatalf("provision ended %v:\n%s", wf.State, c.cli.Run(-1, "workflow", "get", wf.Id))
	}
	job := installJobs(t, c.ims.Admin())[0]
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
	dst.Close()

	// A new build; the vendor registry goes down before the deploy.
	pushImage(t, src, "2.0", 3, 512<<10)
	b2 := c.build(t, "acme/web:2.0", "web")
	c.cli.PushApp(shopApp("web@" + b2.Digest))
	before := layoutTree(t, layout)
	c.vendor.Stop()
	if wf := runWorkflow(t, c, imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE); wf.State != imsv1.WorkflowState_WORKFLOW_STATE_FAILED {
		t.Fatalf("deploy with the vendor registry down ended %v", wf.State)
	}
	var failed *imsv1.Job
	for _, j := range installJobs(t, c.ims.Admin()) {
		if j.State == imsv1.JobState_JOB_STATE_FAILED {
			failed = j
		}
	}
	wantErr := "vendor registry " + c.vendor.Host + " is unreachable: "
	if failed == nil || !strings.Contains(failed.Error, wantErr) || !strings.Contains(failed.Error, "and what already runs is untouched") {
		t.Fatalf("job error %q; want it to say %q and that what runs is untouched", failed.GetError(), wantErr)
	}
	if after := layoutTree(t, layout); after != before {
		t.Fatalf("the install registry changed during the outage:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	c.vendor.Start()
	if wf := runWorkflow(t, c, imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE); wf.State != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
		t.Fatalf("deploy after the vendor registry is back ended %v", wf.State)
	}
	if dst, err = ocicopy.Open(ctx, installReg, "web", ocicopy.Credentials{}); err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if missing, err := ocicopy.Missing(ctx, dst, digest.Digest(b2.Digest), true); err != nil || len(missing) > 0 {
		t.Fatalf("the install registry lacks part of %s: %v, %d missing", b2.Digest, err, len(missing))
	}
}
