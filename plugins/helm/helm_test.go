package helm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"

	"github.com/byoc-dev/byoc/internal/chartpack"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

func webConfig(values map[string]any) map[string]any {
	abs, _ := filepath.Abs("testdata/web")
	return map[string]any{"release": "web", "chart_dir": abs, "values": values, "timeout": "30s"}
}

// TestLifecycle drives the type as the agent does, on Helm's fake kube
// client: plan, install, plans of upgrades, upgrade, a removed object,
// and the final uninstall.
func TestLifecycle(t *testing.T) {
	f := newFakeCluster(t)
	sdktest.Test(t, f.plugin(), sdktest.Case{
		Env: map[string]string{"KUBECONFIG": "/etc/byoc/kubeconfig"},
		Steps: []sdktest.Step{
			{Op: sdk.OpPlan, Config: webConfig(nil), Check: sdktest.All(
				sdktest.ExpectChanges("3 to create, 0 to update, 0 to delete"),
				sdktest.ExpectPlannedChange(sdk.ActionCreate, "ConfigMap/default/web-config"),
				sdktest.ExpectPlannedChange(sdk.ActionCreate, "Secret/default/web-secret"),
				sdktest.ExpectPlannedChange(sdk.ActionCreate, "Service/default/web"),
			)},
			{Name: "install", Config: webConfig(nil), Check: sdktest.All(
				sdktest.ExpectOutput("revision", "1"),
				sdktest.ExpectOutput("status", "deployed"),
				sdktest.ExpectOutput("chart", "web"),
				sdktest.ExpectOutput("chart_version", "1.0.0"),
				sdktest.ExpectLog("installing release web (chart web-1.0.0) in namespace default"),
			)},
			{Op: sdk.OpPlan, Config: webConfig(nil), Check: sdktest.ExpectChanges("no changes")},
			{Op: sdk.OpPlan, Config: webConfig(map[string]any{"greeting": "hi", "extra": true}), Check: sdktest.All(
				sdktest.ExpectChanges("1 to create, 1 to update, 0 to delete"),
				sdktest.ExpectChanges("update ConfigMap/default/web-config: changed: data.greeting"),
				sdktest.ExpectPlannedChange(sdk.ActionCreate, "ConfigMap/default/web-extra"),
			)},
			{Name: "upgrade", Config: webConfig(map[string]any{"greeting": "hi", "extra": true}), Check: sdktest.All(
				sdktest.ExpectOutput("revision", "2"),
				sdktest.ExpectLog("upgrading release web from revision 1"),
			)},
			{Op: sdk.OpPlan, Config: webConfig(map[string]any{"greeting": "hi"}), Check: sdktest.All(
				sdktest.ExpectChanges("0 to create, 0 to update, 1 to delete"),
				sdktest.ExpectPlannedChange(sdk.ActionDelete, "ConfigMap/default/web-extra"),
			)},
			{Name: "upgrade removing an object", Config: webConfig(map[string]any{"greeting": "hi"}), Check: sdktest.ExpectOutput("revision", "3")},
		},
		CheckDestroy: func(*sdktest.Outcome) error {
			if _, err := f.releases.History("web"); err == nil {
				if h, _ := f.releases.History("web"); len(h) > 0 {
					return fmt.Errorf("history left after destroy: %d revisions", len(h))
				}
			}
			return nil
		},
	})
	for _, k := range f.kubeconfigs {
		if k != "/etc/byoc/kubeconfig" {
			t.Fatalf("a job connected with KUBECONFIG %q, want the job environment's", k)
		}
	}
}

// TestPlanMasksSecrets: a Secret's values never leave the plugin, but a
// change of one shows as a change.
func TestPlanMasksSecrets(t *testing.T) {
	f := newFakeCluster(t)
	c := sdktest.Start(t, f.plugin())
	run := func(op string, values map[string]any) (*sdk.Result, string) {
		t.Helper()
		res, logs := sdktest.Run(t, c, op, &sdk.RunRequest{Job: sdk.JobContext{JobID: "j", WorkDir: t.TempDir()}, Config: webConfig(values)})
		var b strings.Builder
		for _, e := range logs {
			b.WriteString(e.Text + "\n")
		}
		return res, b.String()
	}
	if res, _ := run(sdk.OpApply, map[string]any{"password": "first-secret"}); res.Error != "" {
		t.Fatal(res.Error)
	}
	res, logs := run(sdk.OpPlan, map[string]any{"password": "second-secret"})
	if res.Error != "" {
		t.Fatal(res.Error)
	}
	var secret *sdk.PlannedChange
	for i, ch := range res.PlannedChanges {
		if ch.Address == "Secret/default/web-secret" {
			secret = &res.PlannedChanges[i]
		}
	}
	if secret == nil || secret.Action != sdk.ActionUpdate {
		t.Fatalf("no update of the Secret in %+v", res.PlannedChanges)
	}
	before := secret.Before.(map[string]any)["stringData"].(map[string]any)["password"]
	after := secret.After.(map[string]any)["stringData"].(map[string]any)["password"]
	if before != sdk.Masked || after != sdk.MaskedChanged {
		t.Fatalf("password before %v after %v; want %q and %q", before, after, sdk.Masked, sdk.MaskedChanged)
	}
	all := fmt.Sprintf("%+v %s %s", res.PlannedChanges, res.Changes, logs)
	for _, s := range []string{"first-secret", "second-secret"} {
		if strings.Contains(all, s) {
			t.Fatalf("the plan leaks %q: %s", s, all)
		}
	}
}

// TestUpgradeFailureRollsBack: an upgrade whose objects do not become
// ready is rolled back to the deployed revision, and the job fails
// saying so.
func TestUpgradeFailureRollsBack(t *testing.T) {
	f := newFakeCluster(t)
	sdktest.Test(t, f.plugin(), sdktest.Case{
		SkipDestroy: true,
		Steps: []sdktest.Step{
			{Name: "install", Config: webConfig(map[string]any{"greeting": "v1"}), Check: sdktest.ExpectOutput("revision", "1")},
			{Name: "upgrade never ready", Config: webConfig(map[string]any{"greeting": "v2"}),
				PreConfig:   func() error { f.kube.failWaits(errors.New("timed out waiting for the condition"), 1); return nil },
				ExpectError: regexp.MustCompile(`timed out waiting for the condition; rolled back to revision 1`)},
		},
	})
	h, err := f.releases.History("web")
	if err != nil {
		t.Fatal(err)
	}
	status := map[int]release.Status{}
	for _, r := range h {
		status[r.Version] = r.Info.Status
	}
	if status[2] != release.StatusFailed || status[3] != release.StatusDeployed {
		t.Fatalf("history %v; want revision 2 failed and 3 deployed (the rollback)", status)
	}
	rel, _ := f.releases.Get("web", 3)
	if !strings.Contains(rel.Manifest, `greeting: "v1"`) {
		t.Fatalf("revision 3 is not revision 1's manifest:\n%s", rel.Manifest)
	}
}

// TestCancelStopsInstall: cancelling a job while Helm waits for
// readiness ends the operation at once, records the release as failed,
// and Helm's abandoned goroutine never marks it deployed later. The next
// apply recovers.
func TestCancelStopsInstall(t *testing.T) {
	f := newFakeCluster(t)
	p := f.plugin()
	f.kube.blockWaits()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Apply(ctx, &sdk.ApplyRequest{Config: webConfig(nil), Log: discardLog{}})
		done <- err
	}()
	select {
	case <-f.kube.waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("the install never waited for readiness")
	}
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Apply did not return within 10s of the cancel")
	}
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "release web: cancelled") {
		t.Fatalf("Apply after cancel: %v; want a cancelled error", err)
	}
	// Let the fake's blocked wait return, as a real one would have
	// carried on: nothing may record the release as deployed. Helm left
	// its install goroutine (performInstall) running when Apply returned;
	// once it has exited, whatever it was going to write is written.
	close(f.kube.block)
	<-f.kube.finished
	waitGoroutineGone(t, "helm.sh/helm/v3/pkg/action.(*Install).performInstall(")
	rel, err := f.releases.Last("web")
	if err != nil {
		t.Fatal(err)
	}
	if rel.Info.Status != release.StatusFailed {
		t.Fatalf("release after a cancelled install: %s, want failed", rel.Info.Status)
	}
	f.kube.mu.Lock()
	f.kube.block = nil
	f.kube.mu.Unlock()
	res, err := p.Apply(context.Background(), &sdk.ApplyRequest{Config: webConfig(nil), Log: discardLog{}})
	if err != nil {
		t.Fatalf("apply after a cancelled install: %v", err)
	}
	if res.Outputs["revision"] != "2" || res.Outputs["status"] != "deployed" {
		t.Fatalf("apply after a cancelled install: %v", res.Outputs)
	}
}

// TestInterruptedReleaseRecovered: a job killed mid-install leaves its
// release pending-install; the next apply marks it failed and goes on
// instead of failing "another operation is in progress" for ever.
func TestInterruptedReleaseRecovered(t *testing.T) {
	f := newFakeCluster(t)
	p := f.plugin()
	if _, err := p.Apply(context.Background(), &sdk.ApplyRequest{Config: webConfig(nil), Log: discardLog{}}); err != nil {
		t.Fatal(err)
	}
	rel, _ := f.releases.Last("web")
	stuck := *rel
	stuck.Info = &release.Info{Status: release.StatusPendingUpgrade}
	stuck.Version = 2
	if err := f.releases.Create(&stuck); err != nil {
		t.Fatal(err)
	}
	var log recordLog
	res, err := p.Apply(context.Background(), &sdk.ApplyRequest{Config: webConfig(map[string]any{"greeting": "again"}), Log: &log})
	if err != nil {
		t.Fatalf("apply after an interrupted upgrade: %v", err)
	}
	if res.Outputs["revision"] != "3" {
		t.Fatalf("revision %s, want 3", res.Outputs["revision"])
	}
	if !strings.Contains(log.String(), "revision 2 was left pending-upgrade by an interrupted job: marking it failed") {
		t.Fatalf("log does not say what it recovered:\n%s", log.String())
	}
}

// TestDrift: objects changed or deleted outside the release are drift;
// what the API server adds is not.
func TestDrift(t *testing.T) {
	f := newFakeCluster(t)
	sdktest.Test(t, f.plugin(), sdktest.Case{
		Steps: []sdktest.Step{
			{Op: sdk.OpDrift, Config: webConfig(nil), Check: sdktest.All(
				sdktest.ExpectDrifted(true), sdktest.ExpectChanges("release web is not deployed"))},
			{Config: webConfig(nil)},
			{Op: sdk.OpDrift, Config: webConfig(nil), Check: sdktest.All(
				sdktest.ExpectDrifted(false), sdktest.ExpectChanges("3 objects match"))},
			{Op: sdk.OpDrift, Config: webConfig(nil),
				PreConfig: func() error {
					f.setEdit(func(k objectKey, obj map[string]any) map[string]any {
						switch k.Name {
						case "web-config":
							obj["data"].(map[string]any)["greeting"] = "edited"
							obj["data"].(map[string]any)["added"] = "by hand" // not in the manifest: ignored
						case "web-secret":
							return nil
						}
						return obj
					})
					return nil
				},
				Check: sdktest.All(
					sdktest.ExpectDrifted(true),
					sdktest.ExpectChanges("2 of 3 objects drifted"),
					sdktest.ExpectChanges("update ConfigMap/default/web-config: changed outside the release: data.greeting"),
					sdktest.ExpectPlannedChange(sdk.ActionCreate, "Secret/default/web-secret"),
				)},
		},
	})
}

// TestManifests: raw manifests are installed verbatim, even text that
// looks like a Helm template (a Kyverno policy's variables).
func TestManifests(t *testing.T) {
	f := newFakeCluster(t)
	kyverno := `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: require-team
spec:
  rules:
  - name: check
    validate:
      message: "{{ request.object.metadata.name }} needs a team label"
`
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\ndata:\n  a: b\n"
	// As imsd sends cluster policies: base64, so that no {{ }} is read
	// as a byoc reference on the way.
	cfg := map[string]any{"release": "byoc-cluster-policies", "manifests_base64": []any{
		base64.StdEncoding.EncodeToString([]byte(kyverno)), base64.StdEncoding.EncodeToString([]byte(cm))}}
	sdktest.Test(t, f.plugin(), sdktest.Case{Steps: []sdktest.Step{
		{Op: sdk.OpPlan, Config: cfg, Check: sdktest.All(
			sdktest.ExpectPlannedChange(sdk.ActionCreate, "ClusterPolicy/require-team"),
			sdktest.ExpectPlannedChange(sdk.ActionCreate, "ConfigMap/default/plain"),
		)},
		{Config: cfg, Check: func(*sdktest.Outcome) error {
			rel, err := f.releases.Last("byoc-cluster-policies")
			if err != nil {
				return err
			}
			if !strings.Contains(rel.Manifest, "{{ request.object.metadata.name }} needs a team label") {
				return fmt.Errorf("the Kyverno variable was not kept verbatim:\n%s", rel.Manifest)
			}
			return nil
		}},
	}})
}

// TestOCIChart: a chart read from an OCI image layout by digest; a
// tampered layer or a tag-only reference is refused.
func TestOCIChart(t *testing.T) {
	ctx := context.Background()
	layout := t.TempDir()
	dg, err := PushChart(ctx, "testdata/web", layout, "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	registry := t.TempDir()
	registryDigest, err := PushChart(ctx, "testdata/web", filepath.Join(registry, "charts", "web"), "")
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeCluster(t)
	cfg := func(ref string) map[string]any { return map[string]any{"release": "web", "chart": ref} }
	sdktest.Test(t, f.plugin(), sdktest.Case{SkipDestroy: true, Steps: []sdktest.Step{
		{Config: cfg("oci:" + layout + "@" + dg.String()), Check: sdktest.All(
			sdktest.ExpectOutput("chart", "web"), sdktest.ExpectOutput("chart_version", "1.0.0"))},
		{Name: "install registry", Config: cfg("charts/web@" + registryDigest.String()),
			Env:   map[string]string{"BYOC_INSTALL_REGISTRY": "oci:" + registry},
			Check: sdktest.ExpectOutput("revision", "2")},
		{Name: "no install registry", Config: cfg("charts/web@" + registryDigest.String()),
			ExpectError: regexp.MustCompile(`names a repository of the install registry, and the agent names none \(BYOC_INSTALL_REGISTRY\)`)},
		{Config: cfg("oci:" + layout + ":1.0.0"), ExpectDiagnostics: []string{"chart: \"oci:" + layout + ":1.0.0\" names no digest"}},
		// A tag could move under the install: refused, saying how to get the digest.
		{Config: cfg("charts/web:1.0.0"), ExpectDiagnostics: []string{"chart: \"charts/web:1.0.0\" names no digest (a tag could move under the install); reference the chart by digest, REPO@sha256:HEX in the install registry or oci:LAYOUT-DIR@sha256:HEX (helm push prints the digest it pushed, as Digest: sha256:HEX), or use chart_dir"}},
		{Config: cfg(layout + "@" + dg.String()), ExpectDiagnostics: []string{"chart: \"" + layout}},
		{Name: "tampered layer", Config: cfg("oci:" + layout + "@" + dg.String()),
			PreConfig:   func() error { return tamperLargestBlob(layout) },
			ExpectError: regexp.MustCompile(`chart .*: read chart layer: .*(digest|size)`)},
	}})
}

// A chart layer of more files than chartpack.MaxEntries is refused
// before Helm unpacks it, naming the entry and the limit (Helm bounds the
// bytes of a chart, not its files).
func TestOCIChartEntryLimit(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	chartYAML := "apiVersion: v2\nname: many\nversion: 1.0.0\n"
	tw.WriteHeader(&tar.Header{Name: "many/Chart.yaml", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(chartYAML))})
	tw.Write([]byte(chartYAML))
	for i := range chartpack.MaxEntries {
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("many/files/%05d", i), Typeflag: tar.TypeReg, Mode: 0o644})
	}
	tw.Close()
	zw.Close()
	layout := t.TempDir()
	dg, err := pushChartLayer(context.Background(), []byte(`{"apiVersion":"v2","name":"many","version":"1.0.0"}`), buf.Bytes(), layout, "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeCluster(t)
	sdktest.Test(t, f.plugin(), sdktest.Case{SkipDestroy: true, Steps: []sdktest.Step{
		{Op: sdk.OpPlan, Config: map[string]any{"release": "many", "chart": "oci:" + layout + "@" + dg.String()},
			ExpectError: regexp.MustCompile(`chart .*: chart layer: entry "files/09999": the chart has more than 10000 entries \(files and directories\), the limit`)},
	}})
}

// tamperLargestBlob flips a byte of the layout's largest blob (the
// chart's tgz).
func tamperLargestBlob(layout string) error {
	blobs, err := filepath.Glob(filepath.Join(layout, "blobs", "sha256", "*"))
	if err != nil {
		return err
	}
	var largest string
	var size int64
	for _, b := range blobs {
		if st, err := os.Stat(b); err == nil && st.Size() > size {
			largest, size = b, st.Size()
		}
	}
	data, err := os.ReadFile(largest)
	if err != nil {
		return err
	}
	data[len(data)/2] ^= 0xff
	return os.WriteFile(largest, data, 0o644)
}

func TestValidate(t *testing.T) {
	f := newFakeCluster(t)
	abs, _ := filepath.Abs("testdata/web")
	sdktest.Test(t, f.plugin(), sdktest.Case{SkipDestroy: true, Steps: []sdktest.Step{
		{Config: map[string]any{"release": "web", "chart_dir": abs, "manifests": []any{"a: b"}},
			ExpectDiagnostics: []string{"must match exactly one of the allowed forms (oneOf), matches 2"}},
		{Config: map[string]any{"release": "web", "chart_dir": abs, "timeout": "soon"},
			ExpectDiagnostics: []string{"timeout: not a Go duration"}},
		{Config: map[string]any{"release": "Web_1", "chart_dir": abs}, ExpectDiagnostics: []string{"release:"}},
		{Config: map[string]any{"chart_dir": abs}, ExpectDiagnostics: []string{"release: is required"}},
	}})
}

type discardLog struct{}

func (discardLog) Stdout(string) {}
func (discardLog) Stderr(string) {}
func (discardLog) System(string) {}

type recordLog struct {
	lines []string
}

func (l *recordLog) Stdout(s string) { l.lines = append(l.lines, s) }
func (l *recordLog) Stderr(s string) { l.lines = append(l.lines, s) }
func (l *recordLog) System(s string) { l.lines = append(l.lines, s) }
func (l *recordLog) String() string  { return strings.Join(l.lines, "\n") }

// TestChartFromRegistry: with the install registry a real registry (the
// image type's copy engine syncs charts there too), the chart is read
// from it by digest, with the registry's credentials from the job's
// environment.
func TestChartFromRegistry(t *testing.T) {
	ctx := context.Background()
	reg := ocitest.StartRegistry(t, ocitest.RegistryOptions{Username: "agent", Password: "pw-of-agent"})
	layout := t.TempDir()
	dg, err := PushChart(ctx, "testdata/web", filepath.Join(layout, "charts", "web"), "")
	if err != nil {
		t.Fatal(err)
	}
	// Sync it the way the install registry gets every artifact.
	src, err := ocicopy.Open(ctx, mustRegistry(t, "oci:"+layout), "charts/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	dst, err := ocicopy.Open(ctx, mustRegistry(t, reg.URL()), "charts/web", ocicopy.Credentials{Username: "agent", Password: "pw-of-agent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ocicopy.Copy(ctx, src, dst, dg, ocicopy.Options{}); err != nil {
		t.Fatal(err)
	}
	f := newFakeCluster(t)
	cfg := map[string]any{"release": "web", "chart": "charts/web@" + dg.String()}
	env := map[string]string{"BYOC_INSTALL_REGISTRY": reg.URL(), "BYOC_INSTALL_REGISTRY_USERNAME": "agent", "BYOC_INSTALL_REGISTRY_PASSWORD": "pw-of-agent"}
	sdktest.Test(t, f.plugin(), sdktest.Case{SkipDestroy: true, Steps: []sdktest.Step{
		{Env: env, Config: cfg, Check: sdktest.ExpectOutput("chart_version", "1.0.0")},
		{Name: "wrong password", Env: map[string]string{"BYOC_INSTALL_REGISTRY": reg.URL(), "BYOC_INSTALL_REGISTRY_USERNAME": "agent", "BYOC_INSTALL_REGISTRY_PASSWORD": "nope"},
			Config: cfg, ExpectError: regexp.MustCompile(`chart .*charts/web.*(401|unauthorized|Unauthorized)`)},
	}})
}

func mustRegistry(t *testing.T, loc string) ocicopy.Registry {
	t.Helper()
	r, err := ocicopy.ParseRegistry(loc)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A job with no kubeconfig, outside a cluster, fails naming the flag that
// fixes it, not with client-go's fallback to localhost:8080.
func TestNoKubeconfigNamesTheFlag(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	chartDir, _ := filepath.Abs("testdata/web")
	cfg := map[string]any{"release": "web", "namespace": "shop", "chart_dir": chartDir}
	_, err := New().Plan(t.Context(), &sdk.PlanRequest{Config: cfg, Env: map[string]string{}, Log: discardLog{}})
	if err == nil || !strings.Contains(err.Error(), "agentd with --kubeconfig") || !strings.Contains(err.Error(), "KUBECONFIG") || strings.Contains(err.Error(), "8080") {
		t.Fatalf("plan with no kubeconfig: %v, want an error naming agentd --kubeconfig and KUBECONFIG", err)
	}
	if _, err := ServerVersion(t.Context(), ""); !errors.Is(err, ErrNoKubeconfig) {
		t.Fatalf("ServerVersion with no kubeconfig: %v", err)
	}
}

// The upgrade's context ends with the job's while the upgrade runs, and
// no longer once it returned: Helm's leftover goroutine must never see
// the job's end after a successful upgrade (actionContext).
func TestActionContextDetachesAfterTheRun(t *testing.T) {
	job, cancel := context.WithCancel(context.Background())
	run, detach := actionContext(job)
	cancel()
	select {
	case <-run.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a job cancelled during the upgrade did not end its context")
	}
	job, cancel = context.WithCancel(context.Background())
	run, detach2 := actionContext(job)
	detach2()
	cancel()
	select {
	case <-run.Done():
		t.Fatal("the job's end reached the upgrade's context after the upgrade returned")
	case <-time.After(50 * time.Millisecond):
	}
	detach()
}
