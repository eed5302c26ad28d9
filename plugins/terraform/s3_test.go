package terraform_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
	"github.com/byoc-dev/byoc/plugins/terraform"
)

// fakeS3 is an S3-compatible store in-process (gofakes3, which honours
// the conditional writes Terraform's S3 lock file relies on), since AWS
// is not reachable here. Terraform talks to it with its real S3 backend.
func fakeS3(t *testing.T, bucket string) (url string, backend *s3mem.Backend) {
	t.Helper()
	backend = s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	return srv.URL, backend
}

func s3Object(t *testing.T, b *s3mem.Backend, bucket, key string) ([]byte, bool) {
	t.Helper()
	obj, err := b.GetObject(bucket, key, nil)
	if err != nil {
		if gofakes3.HasErrorCode(err, gofakes3.ErrNoSuchKey) {
			return nil, false
		}
		t.Fatal(err)
	}
	defer obj.Contents.Close()
	data, err := io.ReadAll(obj.Contents)
	if err != nil {
		t.Fatal(err)
	}
	return data, true
}

func s3Resources(t *testing.T, b *s3mem.Backend, bucket, key string) string {
	t.Helper()
	data, ok := s3Object(t, b, bucket, key)
	if !ok {
		return "(no state object)"
	}
	var st struct{ Resources []struct{ Type, Name string } }
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("state object: %v", err)
	}
	var out []string
	for _, r := range st.Resources {
		out = append(out, r.Type+"."+r.Name)
	}
	return strings.Join(out, ",")
}

// TestS3Backend keeps the state in an S3 bucket with a lock file: apply
// writes the state there (not into the state dir), a lock held by someone
// else stops a plan, a lock left by a killed run of the same component is
// removed by the next run, and destroy empties the state.
func TestS3Backend(t *testing.T) {
	env, _ := setup(t)
	url, store := fakeS3(t, "acme-state")
	env["AWS_ACCESS_KEY_ID"] = "AKIDTEST"
	env["AWS_SECRET_ACCESS_KEY"] = "test-secret"
	site := t.TempDir()
	const key = "site/terraform.tfstate"
	cfg := map[string]any{
		"module": moduleRef("site"),
		"vars":   map[string]any{"name": "acme", "dir": site},
		"backend": map[string]any{"s3": map[string]any{
			"bucket": "acme-state", "key": key, "region": "eu-west-1",
			"endpoint": url, "use_path_style": true, "skip_aws_checks": true,
		}},
	}
	lockInfo := func(id string) []byte {
		b, _ := json.Marshal(map[string]string{"ID": id, "Operation": "OperationTypeApply", "Who": "someone@elsewhere",
			"Version": "1.11.4", "Created": "2026-01-01T00:00:00Z", "Path": "acme-state/" + key})
		return b
	}
	putLock := func(id string) func() error {
		return func() error {
			data := lockInfo(id)
			_, err := store.PutObject("acme-state", key+".tflock", nil, bytes.NewReader(data), int64(len(data)), nil)
			return err
		}
	}
	var stateDir string
	sdktest.Test(t, terraform.New(), sdktest.Case{
		Env: env,
		Steps: []sdktest.Step{
			{Name: "apply", Config: cfg, Check: sdktest.All(
				sdktest.ExpectOutput("name", "acme"),
				sdktest.ExpectNoStateFile(terraform.StateFile),
				func(o *sdktest.Outcome) error {
					stateDir = o.StateDir
					if got := s3Resources(t, store, "acme-state", key); got != "local_file.index,terraform_data.site" {
						return fmt.Errorf("state in the bucket holds %s", got)
					}
					if _, ok := s3Object(t, store, "acme-state", key+".tflock"); ok {
						return fmt.Errorf("the lock file is still in the bucket after the apply")
					}
					return nil
				},
			)},
			{Name: "plan unchanged", Op: sdk.OpPlan, Config: cfg, Check: sdktest.ExpectChanges("No changes.")},
			// Someone else holds the lock: the plan waits for nobody and
			// fails, naming the holder; the lock is left alone.
			{Name: "locked", Op: sdk.OpPlan, Config: cfg, PreConfig: putLock("11111111-2222-3333-4444-555555555555"),
				ExpectError: regexp.MustCompile(`(?s)Error acquiring the state lock.*someone@elsewhere`),
				Check: func(*sdktest.Outcome) error {
					if _, ok := s3Object(t, store, "acme-state", key+".tflock"); !ok {
						return fmt.Errorf("a lock this component did not leave was removed")
					}
					return nil
				}},
			// A run of this component was killed while it held the lock:
			// it left the running marker in the state dir, and the next
			// run removes its lock and goes on.
			{Name: "stale lock", Op: sdk.OpPlan, Config: cfg,
				PreConfig: func() error {
					if err := putLock("66666666-7777-8888-9999-000000000000")(); err != nil {
						return err
					}
					return os.WriteFile(filepath.Join(stateDir, ".terraform-running"), []byte("job-killed\n"), 0o600)
				},
				Check: sdktest.All(
					sdktest.ExpectLog("(job job-killed) did not finish"),
					sdktest.ExpectLog("the state is locked by 66666666-7777-8888-9999-000000000000, left by a run of this component that was killed; removing the lock"),
					sdktest.ExpectChanges("No changes."),
					func(*sdktest.Outcome) error {
						if _, err := os.Stat(filepath.Join(stateDir, ".terraform-running")); err == nil {
							return fmt.Errorf("the running marker is still there after a run that finished")
						}
						return nil
					},
				)},
		},
		CheckDestroy: func(*sdktest.Outcome) error {
			if got := s3Resources(t, store, "acme-state", key); got != "" {
				return fmt.Errorf("state in the bucket after destroy holds %s", got)
			}
			return nil
		},
	})
}
