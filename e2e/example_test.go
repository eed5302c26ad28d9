package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content/oci"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/internal/demoimage"
	"github.com/byoc-dev/byoc/plugins/helm/kubetest"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// The whole app `byoc app init` writes provisions end to end, as the quick
// start of docs/operator/getting-started.md runs it: a real imsd with a
// vendor registry (imsd its token server) and a build agent that syncs the
// demo image the web component names; the install's agentd with a provider
// mirror, a kubeconfig of a real kube-apiserver and the license secret; the
// sandbox's and db's modules and the api's and cache's charts put into the
// agent's install registry with `agentd module push` (the charts' digests
// are the ones the example's config names). Provision runs the sandbox, db,
// cache, api (its values from db's output, the install and the secret), the
// migrate action after the api, and web (the image through the vendor
// registry); deprovision uninstalls the releases and destroys the terraform
// state. Every plugin is a real subprocess. Needs terraform and its mirror,
// the kube-apiserver tier (scripts/build-kube-apiserver.sh) and
// docker-registry; each skips with how to get it, and fails under CI=true.
func TestExampleApp(t *testing.T) {
	skipShort(t)
	mirror := terraformMirror(t)
	kube := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	c := startCustodyWith(t, opts)
	began := time.Now()

	// The vendor's side: the demo image, synced by the build agent.
	layout := filepath.Join(c.layouts, "oci", "web")
	st, err := oci.NewWithContext(ctx, layout)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := demoimage.Write(ctx, st); err != nil {
		t.Fatal(err)
	}
	if b := printedBuild(t, c.cli.Run(0, "build", "sync", "oci:"+layout+":"+demoimage.Tag, "--repo", demoimage.Repository, "--wait", "-o", "json")); b.Digest != demoimage.Digest().String() {
		t.Fatalf("demo image build %s, want %s", b.Digest, demoimage.Digest())
	}

	dir := t.TempDir()
	c.cli.Run(0, "app", "init", dir)
	out := c.cli.Run(0, "app", "push", dir)
	token := cluster.Pushed{Output: out}.EnrollToken(t)

	// The customer's side: modules and charts into the agent's install
	// registry, then the agent.
	stateDir := t.TempDir()
	agentd := filepath.Join(cluster.Binaries(t), "agentd")
	for _, p := range []struct{ kind, dir, ref, config string }{
		{"terraform", "modules/sandbox", "modules/sandbox:0.1.0", "sandbox.toml"},
		{"terraform", "modules/postgres", "modules/postgres:0.1.0", "components/db.toml"},
		{"helm", "charts/api", "charts/api:0.1.0", "components/api.toml"},
		{"helm", "charts/redis", "charts/redis:0.1.0", "components/cache.toml"},
	} {
		b, err := exec.Command(agentd, "module", "push", "--kind", p.kind, "--state-dir", stateDir, filepath.Join(dir, p.dir), p.ref).CombinedOutput()
		m := regexp.MustCompile(`^` + regexp.QuoteMeta(p.ref) + ` (sha256:[0-9a-f]{64})\n$`).FindSubmatch(b)
		if err != nil || m == nil {
			t.Fatalf("agentd module push --kind %s %s: %v\n%s", p.kind, p.dir, err, b)
		}
		// Each component names what it runs by the digest the push
		// printed (a tag is refused).
		key := map[string]string{"terraform": "module", "helm": "chart"}[p.kind]
		cfg, _ := os.ReadFile(filepath.Join(dir, p.config))
		if want := key + ` = "` + strings.Split(p.ref, ":")[0] + "@" + string(m[1]) + `"`; !strings.Contains(string(cfg), want) {
			t.Fatalf("%s does not name the pushed %s (%s):\n%s", p.config, key, want, cfg)
		}
	}
	secrets := filepath.Join(t.TempDir(), "secrets")
	if err := os.WriteFile(secrets, []byte("license_key=acme-license-4242\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cluster.StartAgent(t, c.ims.URL(), token, stateDir, "--terraform-providers", mirror, "--kubeconfig", kube.Kubeconfig, "--secrets-file", secrets)

	started := time.Now()
	out = c.cli.Run(0, "install", "provision", "demo", "--wait")
	if m := regexp.MustCompile(`succeeded: (\d+)/(\d+) done`).FindStringSubmatch(out); m == nil || m[1] != m[2] {
		t.Fatalf("provision:\n%s", out)
	}
	t.Logf("provision took %s", time.Since(started).Round(time.Millisecond))

	adm := c.ims.Admin()
	wfs, err := adm.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{Install: "demo"}))
	if err != nil {
		t.Fatal(err)
	}
	wf := wfs.Msg.Workflows[0].Id
	job := func(step string) *imsv1.Job {
		t.Helper()
		res, err := adm.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: jobOf(t, adm, wf, step)}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.Job
	}
	sandbox, db, cache, api, web := job("sandbox"), job("db"), job("cache"), job("api"), job("web")
	vpc := sandbox.Outputs["vpc_id"]
	dbURL := "postgres://events@db." + vpc + ".internal:5432/events?size=large"
	if !regexp.MustCompile(`^vpc-[0-9a-f]{8}$`).MatchString(vpc) || db.Outputs["url"] != dbURL {
		t.Fatalf("sandbox outputs %v, db outputs %v", sandbox.Outputs, db.Outputs)
	}
	for _, j := range []*imsv1.Job{cache, api} {
		if j.Outputs["status"] != "deployed" || j.Outputs["namespace"] != "app" || j.Outputs["revision"] != "1" {
			t.Errorf("helm job %s outputs %v", j.Id, j.Outputs)
		}
	}
	if api.Outputs["chart"] != "api" || cache.Outputs["chart"] != "redis" {
		t.Errorf("charts: api %q, cache %q", api.Outputs["chart"], cache.Outputs["chart"])
	}
	if web.Outputs["digest"] != demoimage.Digest().String() || web.Outputs["source"] != "acme/web@"+demoimage.Digest().String() {
		t.Errorf("web outputs %v", web.Outputs)
	}
	// The order the graph says: the sandbox first, the api after db and
	// cache, web after the api.
	before := func(a, b *imsv1.Job, what string) {
		t.Helper()
		if a.EndTime.AsTime().After(b.StartTime.AsTime()) {
			t.Errorf("%s: one ended %s, the other started %s", what, a.EndTime.AsTime(), b.StartTime.AsTime())
		}
	}
	before(sandbox, db, "sandbox before db")
	before(sandbox, cache, "sandbox before cache")
	before(db, api, "db before api")
	before(cache, api, "cache before api")
	before(api, web, "api before web")

	// What the cluster holds: the api's values resolved from db's output,
	// the install, the install file's override and the agent's secret.
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := kube.Kubectl(ctx, nil, args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v", args, err)
		}
		return out
	}
	if got := kubectl("-n", "app", "get", "configmap", "api-config", "-o", "jsonpath={.data.DOMAIN} {.data.REPLICAS} {.data.RETENTION_DAYS}"); got != "demo.acme.example 3 30" {
		t.Errorf("api-config: %q, want the install's domain, its replicas override and the app's default retention", got)
	}
	if got := kubectl("-n", "app", "get", "secret", "api-secrets", "-o", "jsonpath={.data.DATABASE_URL}"); got != b64(dbURL) {
		t.Errorf("api-secrets DATABASE_URL %q, want %q encoded", got, dbURL)
	}
	if got := kubectl("-n", "app", "get", "secret", "api-secrets", "-o", "jsonpath={.data.LICENSE_KEY}"); got != b64("acme-license-4242") {
		t.Errorf("api-secrets LICENSE_KEY %q: want the agent's secret", got)
	}
	if got := kubectl("-n", "app", "get", "configmap", "cache-config", "-o", "jsonpath={.data.redis\\.conf}"); !strings.Contains(got, "maxmemory 64mb") {
		t.Errorf("cache-config: %q", got)
	}
	releases := func() string {
		t.Helper()
		return kubectl("get", "secrets", "-A", "-l", "owner=helm", "-o", "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.labels.name}={.metadata.labels.status} {end}")
	}
	if got := releases(); got != "app/api=deployed app/cache=deployed " {
		t.Errorf("helm releases: %q", got)
	}
	for _, l := range cluster.Logs(t, adm, api.Id) {
		if strings.Contains(l.Text, "acme-license-4242") {
			t.Errorf("the api's log shows the secret: %q", l.Text)
		}
	}

	// The migrate action runs after the api's deploy (a step of the same
	// workflow), with db's URL.
	migrate := job("post_deploy:migrate:api")
	before(api, migrate, "api before migrate")
	if log := strings.Join(cluster.Texts(cluster.Logs(t, adm, migrate.Id)), "\n"); migrate.State != imsv1.JobState_JOB_STATE_SUCCEEDED || !strings.Contains(log, "migrating postgres://events@…") {
		t.Errorf("migrate %v, log:\n%s", migrate.State, log)
	}
	// web: the demo image, whole, in the agent's install registry.
	inst, err := oci.NewWithContext(ctx, filepath.Join(stateDir, "registry", "acme", "web"))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := inst.Exists(ctx, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: demoimage.Digest(), Size: 397}); err != nil || !ok {
		t.Fatalf("the install registry lacks the demo image: %v %v", ok, err)
	}

	started = time.Now()
	out = c.cli.Run(0, "install", "deprovision", "demo", "--yes", "--wait")
	if m := regexp.MustCompile(`succeeded: (\d+)/(\d+) done`).FindStringSubmatch(out); m == nil || m[1] != m[2] {
		t.Fatalf("deprovision:\n%s", out)
	}
	t.Logf("deprovision took %s", time.Since(started).Round(time.Millisecond))
	if got := releases(); got != "" {
		t.Errorf("helm releases after deprovision: %q", got)
	}
	if got := kubectl("-n", "app", "get", "configmaps,secrets", "-l", "app.kubernetes.io/instance", "-o", "name"); got != "" {
		t.Errorf("the charts' objects after deprovision: %q", got)
	}
	for _, comp := range []string{"sandbox", "db"} {
		state := filepath.Join(stateDir, "components", comp, "terraform.tfstate")
		b, err := os.ReadFile(state)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		var s struct{ Resources []json.RawMessage }
		if err := json.Unmarshal(b, &s); err != nil || len(s.Resources) != 0 {
			t.Errorf("%s after deprovision: %d resources (%v)", state, len(s.Resources), err)
		}
	}
	if _, err := os.Stat(filepath.Join(stateDir, "components", "sandbox", "data", "network.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the sandbox's network.json after deprovision: %v", err)
	}
	t.Logf("the whole test took %s", time.Since(began).Round(time.Millisecond))
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
