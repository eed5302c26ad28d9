// Package helm is the built-in "helm" component type: it installs,
// upgrades, rolls back and uninstalls a Helm release with the Helm SDK
// (helm.sh/helm/v3), in the cluster of the agent's kubeconfig.
//
// Config (helmschema.Config):
//
//	{
//	  "release": "web", "namespace": "shop", "create_namespace": true,
//	  "chart": "oci:/var/lib/byoc/registry/web@sha256:…",   // or chart_dir, or manifests
//	  "values": {"replicas": 2},
//	  "wait": true, "timeout": "5m", "rollback_on_failure": true, "history_max": 10
//	}
//
// The release history is Helm's own, kept in Secrets in the release's
// namespace (Helm's Secrets driver): the customer owns it, and helm(1)
// reads it. The plan is the difference between the deployed release's
// manifests and the newly rendered ones, one PlannedChange per object,
// with a Secret's values masked. Drift compares each object of the
// deployed release with its live version (fields the manifest sets only).
//
// The kubeconfig is $KUBECONFIG from the job's environment (agentd
// --kubeconfig), else the in-cluster config of the agent's pod.
//
// Cancel is real: every request of the job's kube clients is tied to the
// job's context, and so are the waits for readiness, so a cancelled
// install stops where it is and its release is recorded as failed.
package helm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"

	"github.com/byoc-dev/byoc/plugins/helm/helmschema"
	"github.com/byoc-dev/byoc/plugins/policy"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// TypeName is the component type this package implements.
const TypeName = "helm"

// Version is the version of the helm plugin.
const Version = "0.1.0"

// Plugin implements sdk.Plugin for the helm type.
type Plugin struct {
	connect connectFunc
}

var (
	_ sdk.Plugin    = (*Plugin)(nil)
	_ sdk.Destroyer = (*Plugin)(nil)
	_ sdk.Drifter   = (*Plugin)(nil)
)

// New returns the helm plugin, connecting to the cluster of the job's
// $KUBECONFIG.
func New() *Plugin { return &Plugin{connect: connect} }

// Describe reports the helm type and its config schema.
func (p *Plugin) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: TypeName, Version: Version, ConfigSchema: helmschema.Config, EvaluatesPolicies: true}, nil
}

// Validate checks what the schema cannot: one chart source, a chart
// reference by digest, a timeout that parses.
func (p *Plugin) Validate(_ context.Context, req *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	_, diags := parseConfig(req.Config)
	return &sdk.ValidateResponse{Diagnostics: diags}, nil
}

// job is what every operation starts from: the config, the chart and the
// cluster.
type job struct {
	cfg     *config
	cluster *cluster
	log     sdk.Logger
}

func (p *Plugin) open(ctx context.Context, raw map[string]any, env map[string]string, log sdk.Logger) (*job, error) {
	cfg, diags := parseConfig(raw)
	if len(diags) > 0 {
		return nil, fmt.Errorf("config.%s: %s", diags[0].Field, diags[0].Message)
	}
	kubeconfig := env["KUBECONFIG"]
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}
	cl, err := p.connect(ctx, kubeconfig, cfg.Namespace, func(format string, args ...any) {
		// Helm's debug lines are many; they go to the job log's system
		// stream only when they say something went wrong.
		line := fmt.Sprintf(format, args...)
		if strings.Contains(line, "error") || strings.Contains(line, "failed") {
			log.System("helm: " + line)
		}
	})
	if err != nil {
		return nil, err
	}
	cl.cfg.Releases.MaxHistory = cfg.HistoryMax
	return &job{cfg: cfg, cluster: cl, log: log}, nil
}

// last returns the release's newest revision, nil when there is none.
func (j *job) last() (*release.Release, error) {
	rel, err := j.cluster.cfg.Releases.Last(j.cfg.Release)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("release %s: history: %w", j.cfg.Release, err)
	}
	return rel, nil
}

// deployed returns the release's deployed revision, nil when there is
// none.
func (j *job) deployed() (*release.Release, error) {
	rel, err := j.cluster.cfg.Releases.Deployed(j.cfg.Release)
	if errors.Is(err, driver.ErrNoDeployedReleases) || errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("release %s: %w", j.cfg.Release, err)
	}
	return rel, nil
}

// render renders the chart as the next revision would be, without
// changing anything in the cluster.
func (j *job) render(ctx context.Context, ch *chart.Chart, last *release.Release) (*release.Release, error) {
	if last == nil {
		in := action.NewInstall(j.cluster.cfg)
		in.ReleaseName, in.Namespace = j.cfg.Release, j.cfg.Namespace
		in.DryRun, in.DryRunOption = true, "client"
		in.Replace = true
		rel, err := in.RunWithContext(ctx, ch, j.cfg.Values)
		if err != nil {
			return nil, fmt.Errorf("render chart %s: %w", chartName(ch), err)
		}
		return rel, nil
	}
	up := action.NewUpgrade(j.cluster.cfg)
	up.Namespace = j.cfg.Namespace
	// The config's values are the whole truth: never Helm's reuse of
	// the last release's values when none are given.
	up.ResetValues = true
	up.DryRun, up.DryRunOption = true, "client"
	rel, err := up.RunWithContext(ctx, j.cfg.Release, ch, j.cfg.Values)
	if err != nil {
		return nil, fmt.Errorf("render chart %s: %w", chartName(ch), err)
	}
	return rel, nil
}

func chartName(ch *chart.Chart) string {
	if ch.Metadata == nil {
		return "(unnamed)"
	}
	return ch.Metadata.Name + "-" + ch.Metadata.Version
}

// manifestOf is a release's manifest with its hooks' manifests.
func manifestOf(rel *release.Release) string {
	var b strings.Builder
	b.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		b.WriteString("\n---\n# Source: " + h.Path + "\n" + h.Manifest)
	}
	return b.String()
}

// recoverPending marks a release left pending by a killed job as failed,
// so the next operation can go on. Only one job of a component runs at a
// time (the agent holds its state directory), so a pending release of
// this component is a job that is gone, not one still running.
func (j *job) recoverPending(last *release.Release) error {
	if last == nil || !last.Info.Status.IsPending() {
		return nil
	}
	j.log.System(fmt.Sprintf("release %s revision %d was left %s by an interrupted job: marking it failed", last.Name, last.Version, last.Info.Status))
	last.SetStatus(release.StatusFailed, "interrupted: the job running it ended before it finished")
	if err := j.cluster.cfg.Releases.Update(last); err != nil {
		return fmt.Errorf("release %s: mark interrupted revision %d failed: %w", last.Name, last.Version, err)
	}
	return nil
}

// Plan renders the chart and reports, per object, what an apply would
// create, update or delete relative to the deployed revision.
func (p *Plugin) Plan(ctx context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	j, err := p.open(ctx, req.Config, req.Env, req.Log)
	if err != nil {
		return nil, err
	}
	ch, err := loadChart(ctx, j.cfg, req.Env)
	if err != nil {
		return nil, err
	}
	changes, rendered, err := j.plan(ctx, ch)
	if err != nil {
		return nil, err
	}
	resp := &sdk.PlanResponse{Changes: summarize(changes), PlannedChanges: changes}
	// A plan the policies deny fails, so the operator sees it before an
	// apply is asked for.
	resp.PolicyFindings, err = j.gate(ctx, req.Job, sdk.OpPlan, changes, manifestOf(rendered))
	return resp, err
}

// gate evaluates the job's policies (vendor and customer rego, package
// plugins/policy) against the changes and the rendered manifests, as
// input.plan = {"release", "namespace", "manifests": [objects]}. A deny is
// an error (policy.DeniedError); warnings are logged.
func (j *job) gate(ctx context.Context, jc sdk.JobContext, op string, changes []sdk.PlannedChange, manifest string) ([]sdk.PolicyFinding, error) {
	if len(jc.Policies) == 0 {
		return nil, nil
	}
	objs, err := parseManifests(manifest, j.cfg.Namespace)
	if err != nil {
		return nil, err
	}
	manifests := make([]any, 0, len(objs))
	for _, o := range objs {
		manifests = append(manifests, o.obj)
	}
	raw := map[string]any{"release": j.cfg.Release, "namespace": j.cfg.Namespace, "manifests": manifests}
	return policy.Gate(ctx, jc, j.log, policy.NewInput(jc, TypeName, op, changes, raw))
}

// plan renders the next revision and diffs it against the deployed one.
func (j *job) plan(ctx context.Context, ch *chart.Chart) ([]sdk.PlannedChange, *release.Release, error) {
	last, err := j.last()
	if err != nil {
		return nil, nil, err
	}
	deployed, err := j.deployed()
	if err != nil {
		return nil, nil, err
	}
	if last != nil && last.Info.Status.IsPending() {
		// Rendering an upgrade of a pending release fails; plan
		// against the deployed revision as an install would.
		last = deployed
	}
	if last != nil && last.Info.Status == release.StatusUninstalled {
		last = nil
	}
	rendered, err := j.render(ctx, ch, last)
	if err != nil {
		return nil, nil, err
	}
	oldManifest := ""
	if deployed != nil {
		oldManifest = manifestOf(deployed)
	}
	changes, err := diffManifests(oldManifest, manifestOf(rendered), j.cfg.Namespace)
	if err != nil {
		return nil, nil, err
	}
	return changes, rendered, nil
}

// Apply installs the release, or upgrades it to the config's chart and
// values, and waits for its objects to be ready. An upgrade that fails is
// rolled back to the last deployed revision (rollback_on_failure).
func (p *Plugin) Apply(ctx context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	j, err := p.open(ctx, req.Config, req.Env, req.Log)
	if err != nil {
		return nil, err
	}
	ch, err := loadChart(ctx, j.cfg, req.Env)
	if err != nil {
		return nil, err
	}
	last, err := j.last()
	if err != nil {
		return nil, err
	}
	if err := j.recoverPending(last); err != nil {
		return nil, err
	}
	changes, rendered, err := j.plan(ctx, ch)
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(summarize(changes), "\n") {
		req.Log.System("plan: " + strings.TrimSpace(line))
	}
	findings, err := j.gate(ctx, req.Job, sdk.OpApply, changes, manifestOf(rendered))
	if err != nil {
		// Denied (or a policy that does not compile): nothing applied.
		return &sdk.ApplyResponse{PolicyFindings: findings}, err
	}
	install := last == nil || last.Info.Status == release.StatusUninstalled
	var rel *release.Release
	if install {
		req.Log.System(fmt.Sprintf("installing release %s (chart %s) in namespace %s", j.cfg.Release, chartName(ch), j.cfg.Namespace))
		in := action.NewInstall(j.cluster.cfg)
		in.ReleaseName, in.Namespace, in.CreateNamespace = j.cfg.Release, j.cfg.Namespace, j.cfg.CreateNamespace
		in.Wait, in.Timeout = j.cfg.Wait, j.cfg.Timeout
		// An uninstalled release whose history was kept is installed
		// again under the same name.
		in.Replace = true
		rel, err = in.RunWithContext(ctx, ch, j.cfg.Values)
	} else {
		req.Log.System(fmt.Sprintf("upgrading release %s from revision %d (chart %s) in namespace %s", j.cfg.Release, last.Version, chartName(ch), j.cfg.Namespace))
		up := action.NewUpgrade(j.cluster.cfg)
		up.Namespace = j.cfg.Namespace
		up.ResetValues = true
		up.Wait, up.Timeout = j.cfg.Wait, j.cfg.Timeout
		up.MaxHistory = j.cfg.HistoryMax
		actx, detach := actionContext(ctx)
		rel, err = up.RunWithContext(actx, j.cfg.Release, ch, j.cfg.Values)
		detach()
		if err != nil && ctx.Err() == nil && j.cfg.RollbackOnFail {
			err = j.rollbackAfter(err)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return &sdk.ApplyResponse{PolicyFindings: findings}, fmt.Errorf("release %s: cancelled: %w", j.cfg.Release, err)
		}
		return &sdk.ApplyResponse{PolicyFindings: findings}, fmt.Errorf("release %s: %w", j.cfg.Release, err)
	}
	req.Log.System(fmt.Sprintf("release %s revision %d: %s", rel.Name, rel.Version, rel.Info.Status))
	return &sdk.ApplyResponse{Outputs: outputs(rel), PolicyFindings: findings}, nil
}

// actionContext is the context for Helm's upgrade (RunWithContext): it
// ends with ctx while the upgrade runs, and no longer once the function
// it returns is called. Helm (v3.22) watches the context in a goroutine
// that outlives the call (Upgrade.handleContext): started alongside the
// upgrade, it may first run after the upgrade returned, and if by then
// the context has ended, as the job's does once the step returns, it
// picks that case as often as the upgrade's end, marks the release it
// just deployed FAILED and records it (failRelease). With the job's
// context itself, a plan after a successful upgrade could find no
// deployed revision (plugins/helm TestLifecycle failed so once under
// -race in CI). A job cancelled while the upgrade runs still ends it
// (and cancelKube and the transport end its writes and waits).
func actionContext(ctx context.Context) (context.Context, func()) {
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	return run, func() { stop() }
}

// rollbackAfter rolls a failed upgrade back to the last deployed revision
// (Helm's rollback: a new revision with that revision's chart and values)
// and returns the error the job fails with.
func (j *job) rollbackAfter(upgradeErr error) error {
	deployed, err := j.deployed()
	if err != nil || deployed == nil {
		// Nothing to go back to (the only revisions failed).
		return upgradeErr
	}
	j.log.System(fmt.Sprintf("upgrade failed: %v; rolling back to revision %d", upgradeErr, deployed.Version))
	if err := j.rollback(deployed.Version); err != nil {
		return fmt.Errorf("%w; the rollback to revision %d failed too: %v", upgradeErr, deployed.Version, err)
	}
	return fmt.Errorf("%w; rolled back to revision %d", upgradeErr, deployed.Version)
}

// rollback rolls the release back to revision (0: the previous one).
func (j *job) rollback(revision int) error {
	rb := action.NewRollback(j.cluster.cfg)
	rb.Version = revision
	rb.Wait, rb.Timeout = j.cfg.Wait, j.cfg.Timeout
	rb.MaxHistory = j.cfg.HistoryMax
	return rb.Run(j.cfg.Release)
}

// outputs are an applied release's outputs.
func outputs(rel *release.Release) map[string]string {
	out := map[string]string{
		"release":   rel.Name,
		"namespace": rel.Namespace,
		"revision":  strconv.Itoa(rel.Version),
		"status":    rel.Info.Status.String(),
	}
	if rel.Chart != nil && rel.Chart.Metadata != nil {
		out["chart"] = rel.Chart.Metadata.Name
		out["chart_version"] = rel.Chart.Metadata.Version
		out["app_version"] = rel.Chart.Metadata.AppVersion
	}
	return out
}

// Destroy uninstalls the release and deletes its history.
func (p *Plugin) Destroy(ctx context.Context, req *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	j, err := p.open(ctx, req.Config, req.Env, req.Log)
	if err != nil {
		return nil, err
	}
	last, err := j.last()
	if err != nil {
		return nil, err
	}
	if last == nil {
		req.Log.System(fmt.Sprintf("release %s does not exist: nothing to destroy", j.cfg.Release))
		return &sdk.DestroyResponse{}, nil
	}
	if err := j.recoverPending(last); err != nil {
		return nil, err
	}
	// The policies see a destroy as every object of the last revision
	// deleted: that is what an uninstall deletes, whether the revision
	// was deployed or failed (a failed install's objects are in the
	// cluster too, and a destroy must not pass the policies because no
	// revision is deployed).
	var findings []sdk.PolicyFinding
	if len(req.Job.Policies) > 0 {
		changes, err := diffManifests(manifestOf(last), "", j.cfg.Namespace)
		if err != nil {
			return nil, err
		}
		if findings, err = j.gate(ctx, req.Job, sdk.OpDestroy, changes, manifestOf(last)); err != nil {
			return &sdk.DestroyResponse{PolicyFindings: findings}, err
		}
	}
	un := action.NewUninstall(j.cluster.cfg)
	un.Wait, un.Timeout = j.cfg.Wait, j.cfg.Timeout
	res, err := un.Run(j.cfg.Release)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("release %s: uninstall cancelled: %w", j.cfg.Release, err)
		}
		return nil, fmt.Errorf("release %s: uninstall: %w", j.cfg.Release, err)
	}
	if res != nil && res.Info != "" {
		req.Log.System(res.Info)
	}
	req.Log.System(fmt.Sprintf("release %s uninstalled", j.cfg.Release))
	return &sdk.DestroyResponse{PolicyFindings: findings}, nil
}

// Drift compares every object of the deployed revision with its live
// version and reports each that was changed or deleted outside the
// release. It changes nothing.
func (p *Plugin) Drift(ctx context.Context, req *sdk.DriftRequest) (*sdk.DriftResponse, error) {
	j, err := p.open(ctx, req.Config, req.Env, req.Log)
	if err != nil {
		return nil, err
	}
	deployed, err := j.deployed()
	if err != nil {
		return nil, err
	}
	if deployed == nil {
		return &sdk.DriftResponse{Drifted: true, Changes: fmt.Sprintf("release %s is not deployed", j.cfg.Release)}, nil
	}
	manifest := deployed.Manifest
	objs, err := parseManifests(manifest, j.cfg.Namespace)
	if err != nil {
		return nil, fmt.Errorf("release %s revision %d: %w", deployed.Name, deployed.Version, err)
	}
	live, err := j.cluster.live(ctx, manifest)
	if err != nil {
		return nil, fmt.Errorf("release %s: %w", j.cfg.Release, err)
	}
	changes := driftOf(objs, live)
	if len(changes) == 0 {
		return &sdk.DriftResponse{Changes: fmt.Sprintf("release %s revision %d: %d objects match", deployed.Name, deployed.Version, len(objs))}, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "release %s revision %d: %d of %d objects drifted", deployed.Name, deployed.Version, len(changes), len(objs))
	for _, c := range changes {
		b.WriteString("\n  " + c.String())
	}
	return &sdk.DriftResponse{Drifted: true, Changes: b.String(), PlannedChanges: changes}, nil
}
