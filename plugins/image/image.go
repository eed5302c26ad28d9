// Package image is the built-in "image" component type: it copies an
// image, a multi-platform index or any OCI artifact, by digest, from its
// source (the vendor registry) into the install registry, with its OCI
// 1.1 referrers, through internal/ocicopy.
//
// Config:
//
//	{"source": "acme/web@sha256:...", "repository": "web", "referrers": true}
//
// source names a digest: REPOSITORY@sha256:HEX in the vendor registry
// (the registry the agent names in BYOC_VENDOR_REGISTRY, with its token
// in BYOC_VENDOR_REGISTRY_TOKEN), or a full reference
// (HOST[:PORT]/REPOSITORY@sha256:HEX, http(s)://..., oci:DIR@sha256:HEX;
// credentials in BYOC_SOURCE_REGISTRY_USERNAME/_PASSWORD/_TOKEN). A tag
// only is a config error: what runs must not change under the install.
//
// The install registry is the agent's (BYOC_INSTALL_REGISTRY, a location
// ocicopy.ParseRegistry reads; credentials in
// BYOC_INSTALL_REGISTRY_USERNAME/_PASSWORD/_TOKEN).
//
// Plan lists what the install registry lacks; apply copies it (only
// that: an unchanged re-sync sends nothing) and records the copy in the
// component's state directory; drift compares what was applied and is
// still whole in the install registry with the config's digest; destroy
// forgets the record (content stays: it is addressed by digest and may
// be shared). If the source registry cannot be reached, the job fails
// before the install registry gets anything the install could run, and
// says so.
package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/byoc-dev/byoc/internal/atomicfile"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/plugins/image/imageschema"
	"github.com/byoc-dev/byoc/plugins/policy"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// TypeName is the component type this package implements.
const TypeName = "image"

// Version is the version of the image plugin.
const Version = "0.1.0"

// The environment the agent gives an image job.
const (
	// EnvInstallRegistry is the install registry's location
	// (ocicopy.ParseRegistry); agentd --install-registry.
	EnvInstallRegistry = "BYOC_INSTALL_REGISTRY"
	// EnvInstallRegistryCreds prefixes _USERNAME, _PASSWORD, _TOKEN.
	EnvInstallRegistryCreds = "BYOC_INSTALL_REGISTRY"
	// EnvVendorRegistry is the vendor registry's HOST[:PORT], for
	// sources that name a repository only.
	EnvVendorRegistry = "BYOC_VENDOR_REGISTRY"
	// EnvVendorRegistryPlainHTTP is "1" when the vendor registry speaks
	// plain HTTP.
	EnvVendorRegistryPlainHTTP = "BYOC_VENDOR_REGISTRY_PLAIN_HTTP"
	// EnvVendorRegistryToken is a bearer token allowing pull of the
	// source's repository (from the job's one-time grant).
	EnvVendorRegistryToken = "BYOC_VENDOR_REGISTRY_TOKEN"
	// EnvSourceRegistryCreds prefixes _USERNAME, _PASSWORD, _TOKEN for a
	// source named with its host.
	EnvSourceRegistryCreds = "BYOC_SOURCE_REGISTRY"
)

// stateFile is the record of the last apply in the state directory.
const stateFile = "image.json"

// Plugin implements sdk.Plugin for the image type.
type Plugin struct {
	now func() time.Time
	// progressEvery is how often an apply logs how far along it is.
	progressEvery time.Duration
}

// ProgressEvery is how often an apply logs the bytes sent so far.
const ProgressEvery = 10 * time.Second

var (
	_ sdk.Plugin    = (*Plugin)(nil)
	_ sdk.Destroyer = (*Plugin)(nil)
	_ sdk.Drifter   = (*Plugin)(nil)
)

// New returns the image plugin.
func New() *Plugin { return &Plugin{now: time.Now, progressEvery: ProgressEvery} }

// NewWithProgress is New logging progress every d (for tests).
func NewWithProgress(d time.Duration) *Plugin { return &Plugin{now: time.Now, progressEvery: d} }

// Describe reports the image type and its config schema.
func (p *Plugin) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: TypeName, Version: Version, ConfigSchema: imageschema.Config, EvaluatesPolicies: true}, nil
}

// config is a parsed image config.
type config struct {
	source string
	// vendor: the source names a repository of the vendor registry.
	vendor     bool
	ref        ocicopy.Reference
	repository string
	referrers  bool
}

// parseConfig reads a config the schema accepted. The registry of a
// vendor-relative source is filled in later, from the environment.
func parseConfig(c map[string]any) (config, []sdk.Diagnostic) {
	var cfg config
	var diags []sdk.Diagnostic
	cfg.source, _ = c["source"].(string)
	cfg.referrers = true
	if v, ok := c["referrers"].(bool); ok {
		cfg.referrers = v
	}
	ref, vendor, err := parseSource(cfg.source)
	switch {
	case err != nil:
		diags = append(diags, sdk.Diagnostic{Field: "source", Message: err.Error()})
	case ref.Digest == "":
		diags = append(diags, sdk.Diagnostic{Field: "source", Message: fmt.Sprintf("%q %v", cfg.source, ocicopy.ErrNoDigest)})
	}
	cfg.ref, cfg.vendor = ref, vendor
	cfg.repository = ref.Repository
	if r, ok := c["repository"].(string); ok {
		if !ocicopy.ValidRepository(r) {
			diags = append(diags, sdk.Diagnostic{Field: "repository", Message: fmt.Sprintf("%q is not a valid repository name (lowercase letters, digits, separators . _ - /)", r)})
		}
		cfg.repository = r
	}
	return cfg, diags
}

// parseSource reads a source: a full reference, or a repository of the
// vendor registry (no host: the first path element has no dot or colon
// and is not localhost, as docker tells them apart).
func parseSource(s string) (ocicopy.Reference, bool, error) {
	if strings.HasPrefix(s, "oci:") || strings.Contains(s, "://") {
		ref, err := ocicopy.ParseReference(s)
		return ref, false, err
	}
	name := s
	if i := strings.IndexAny(name, "@"); i >= 0 {
		name = name[:i]
	}
	first, _, hasSlash := strings.Cut(name, "/")
	if hasSlash && (strings.ContainsAny(first, ".:") || first == "localhost") {
		ref, err := ocicopy.ParseReference(s)
		return ref, false, err
	}
	// A vendor repository: parse it against a placeholder host.
	ref, err := ocicopy.ParseReference("vendor.invalid/" + s)
	if err != nil {
		return ocicopy.Reference{}, true, errors.New(strings.ReplaceAll(err.Error(), "vendor.invalid/", ""))
	}
	ref.Registry = ocicopy.Registry{}
	return ref, true, nil
}

// Validate checks the config and names each offending field.
func (p *Plugin) Validate(_ context.Context, req *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	_, diags := parseConfig(req.Config)
	return &sdk.ValidateResponse{Diagnostics: diags}, nil
}

// job is one operation's opened ends.
type job struct {
	cfg      config
	src, dst *ocicopy.Repo
	// srcName says which registry the source is, for messages: "vendor
	// registry HOST" or "source registry HOST".
	srcName string
	dstReg  ocicopy.Registry
}

func (j *job) close() {
	if j.src != nil {
		j.src.Close()
	}
	if j.dst != nil {
		j.dst.Close()
	}
}

func (p *Plugin) open(ctx context.Context, c map[string]any, env map[string]string, needSource bool) (*job, error) {
	cfg, diags := parseConfig(c)
	if len(diags) > 0 {
		return nil, fmt.Errorf("config.%s: %s", diags[0].Field, diags[0].Message)
	}
	j := &job{cfg: cfg}
	loc := env[EnvInstallRegistry]
	if loc == "" {
		return nil, fmt.Errorf("no install registry: the agent gives it in %s (agentd --install-registry)", EnvInstallRegistry)
	}
	reg, err := ocicopy.ParseRegistry(loc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvInstallRegistry, err)
	}
	j.dstReg = reg
	if j.dst, err = ocicopy.Open(ctx, reg, cfg.repository, ocicopy.CredentialsFromEnv(env, EnvInstallRegistryCreds)); err != nil {
		return nil, fmt.Errorf("install registry: %w", err)
	}
	if !needSource {
		return j, nil
	}
	srcCreds := ocicopy.CredentialsFromEnv(env, EnvSourceRegistryCreds)
	if cfg.vendor {
		host := env[EnvVendorRegistry]
		if host == "" {
			j.close()
			return nil, fmt.Errorf("config.source %q names a repository of the vendor registry, but the agent gave no %s", cfg.source, EnvVendorRegistry)
		}
		vreg, err := ocicopy.ParseRegistry(host)
		if err != nil {
			j.close()
			return nil, fmt.Errorf("%s: %w", EnvVendorRegistry, err)
		}
		if v, ok := env[EnvVendorRegistryPlainHTTP]; ok {
			vreg.PlainHTTP = v == "1" || v == "true"
		}
		j.cfg.ref.Registry = vreg
	}
	if vh := env[EnvVendorRegistry]; cfg.vendor || (vh != "" && j.cfg.ref.Registry.Host == vh) {
		j.srcName = "vendor registry " + j.cfg.ref.Registry.Host
		srcCreds = ocicopy.Credentials{AccessToken: env[EnvVendorRegistryToken]}
	} else {
		j.srcName = "source registry " + j.cfg.ref.Registry.String()
	}
	if j.src, err = ocicopy.Open(ctx, j.cfg.ref.Registry, j.cfg.ref.Repository, srcCreds); err != nil {
		j.close()
		return nil, fmt.Errorf("config.source: %w", err)
	}
	return j, nil
}

// explain words a copy's error for the job: an outage says which registry
// and that what runs is untouched.
func (j *job) explain(err error) error {
	var ue *ocicopy.UnreachableError
	if errors.As(err, &ue) {
		if ue.Side == ocicopy.Source {
			return fmt.Errorf("%s is unreachable: %v; nothing the install runs was changed in the install registry %s, and what already runs is untouched",
				j.srcName, ue.Err, j.dstReg)
		}
		return fmt.Errorf("install registry %s is unreachable: %v; what already runs is untouched", j.dstReg, ue.Err)
	}
	return err
}

func (p *Plugin) plan(ctx context.Context, j *job) (*ocicopy.Plan, error) {
	// Every blob is checked, so an apply after drift (content removed
	// from the install registry) repairs it.
	plan, err := ocicopy.PlanCopy(ctx, j.src, j.dst, j.cfg.ref.Digest, ocicopy.Options{NoReferrers: !j.cfg.referrers, CheckEveryBlob: true, RefuseImageReferrers: true})
	if err != nil {
		return nil, j.explain(err)
	}
	return plan, nil
}

// Plan lists what the install registry lacks of the source.
func (p *Plugin) Plan(ctx context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	pg, err := p.planGated(ctx, req.Config, req.Env, req.Job, req.Log, sdk.OpPlan)
	if pg == nil {
		return nil, err
	}
	pg.j.close()
	return &sdk.PlanResponse{Changes: pg.summary, PlannedChanges: pg.changes, PolicyFindings: pg.findings}, err
}

// planned is a job's copy plan, what it would change and the policies'
// findings on it.
type planned struct {
	j        *job
	plan     *ocicopy.Plan
	changes  []sdk.PlannedChange
	summary  string
	findings []sdk.PolicyFinding
}

// planGated opens the job's registries, plans the copy and checks it
// against the job's policies for operation op. It returns nil only when
// nothing was opened or planned; otherwise the caller closes pg.j, and
// err is the policy gate's (a deny) or nil.
func (p *Plugin) planGated(ctx context.Context, config map[string]any, env map[string]string, jc sdk.JobContext, log sdk.Logger, op string) (*planned, error) {
	j, err := p.open(ctx, config, env, true)
	if err != nil {
		return nil, err
	}
	plan, err := p.plan(ctx, j)
	if err != nil {
		j.close()
		return nil, err
	}
	pg := &planned{j: j, plan: plan}
	pg.changes, pg.summary = describe(j, plan, jc.StateDir)
	pg.findings, err = j.gate(ctx, jc, log, op, plan, pg.changes)
	return pg, err
}

// describe says what applying plan would change: one planned change (none
// when the install registry is up to date) and a summary listing each
// missing piece.
func describe(j *job, plan *ocicopy.Plan, stateDir string) ([]sdk.PlannedChange, string) {
	address := "image." + j.cfg.repository
	target := ocicopy.Reference{Registry: j.dstReg, Repository: j.cfg.repository, Digest: plan.Root.Digest}.String()
	missing := plan.Missing()
	var b strings.Builder
	if len(missing) == 0 {
		fmt.Fprintf(&b, "%s is up to date: the install registry has all %d pieces (%s)", target, len(plan.Nodes), mb(plan.TotalBytes))
		return nil, b.String()
	}
	var blobs, manifests int
	for _, n := range missing {
		what := "blob"
		if n.Manifest {
			what = "manifest"
			manifests++
		} else {
			blobs++
		}
		fmt.Fprintf(&b, "copy %s %s (%s)\n", what, n.Descriptor.Digest, mb(n.Descriptor.Size))
	}
	fmt.Fprintf(&b, "%d blobs and %d manifests, %s of %s, from %s to %s", blobs, manifests, mb(plan.MissingBytes), mb(plan.TotalBytes), j.cfg.source, target)
	action := sdk.ActionCreate
	var before map[string]any
	if prev, ok := readState(stateDir); ok {
		action = sdk.ActionUpdate
		before = map[string]any{"digest": prev.Digest, "reference": prev.Reference}
	}
	return []sdk.PlannedChange{{
		Address: address, Action: action, Before: before,
		After:   map[string]any{"digest": plan.Root.Digest.String(), "reference": target},
		Summary: fmt.Sprintf("copy %d blobs and %d manifests (%s) into %s", blobs, manifests, mb(plan.MissingBytes), target),
	}}, b.String()
}

// gate evaluates the job's policies (the customer's and the vendor's)
// against the copy: input.changes as the plan reports them, input.plan
// the source and destination (source, source_registry, source_repository,
// digest, media_type, registry, repository, reference, total_bytes,
// missing_bytes, missing: [{digest, media_type, size, manifest}]), so a
// policy can allow only some registries or artifact types. A denial
// stops the job before anything is copied.
func (j *job) gate(ctx context.Context, jc sdk.JobContext, log sdk.Logger, op string, plan *ocicopy.Plan, changes []sdk.PlannedChange) ([]sdk.PolicyFinding, error) {
	missing := []map[string]any{}
	for _, n := range plan.Missing() {
		missing = append(missing, map[string]any{"digest": n.Descriptor.Digest.String(), "media_type": n.Descriptor.MediaType,
			"size": n.Descriptor.Size, "manifest": n.Manifest})
	}
	raw := map[string]any{
		"source":            j.cfg.source,
		"source_registry":   j.cfg.ref.Registry.String(),
		"source_repository": j.cfg.ref.Repository,
		"digest":            plan.Root.Digest.String(),
		"media_type":        plan.Root.MediaType,
		"registry":          j.dstReg.String(),
		"repository":        j.cfg.repository,
		"reference":         ocicopy.Reference{Registry: j.dstReg, Repository: j.cfg.repository, Digest: plan.Root.Digest}.String(),
		"total_bytes":       plan.TotalBytes,
		"missing_bytes":     plan.MissingBytes,
		"missing":           missing,
	}
	return policy.Gate(ctx, jc, log, policy.NewInput(jc, TypeName, op, changes, raw))
}

// record is what the state directory keeps of the last apply.
type record struct {
	Source       string `json:"source"`
	SourceDigest string `json:"source_digest"`
	Digest       string `json:"digest"`
	Registry     string `json:"registry"`
	Repository   string `json:"repository"`
	Reference    string `json:"reference"`
	CopiedAt     string `json:"copied_at"`
}

func readState(dir string) (record, bool) {
	var r record
	if dir == "" {
		return r, false
	}
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil || json.Unmarshal(b, &r) != nil || r.Digest == "" {
		return record{}, false
	}
	return r, true
}

// Apply copies what the install registry lacks, then records the copy.
func (p *Plugin) Apply(ctx context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	pg, err := p.planGated(ctx, req.Config, req.Env, req.Job, req.Log, sdk.OpApply)
	if pg == nil {
		return nil, err
	}
	defer pg.j.close()
	j, plan, findings := pg.j, pg.plan, pg.findings
	if err != nil {
		return &sdk.ApplyResponse{PolicyFindings: findings}, err
	}
	target := ocicopy.Reference{Registry: j.dstReg, Repository: j.cfg.repository, Digest: plan.Root.Digest}.String()
	req.Log.Stdout(fmt.Sprintf("%s -> %s: %d of %d pieces missing (%s of %s)", j.cfg.source, target, len(plan.Missing()), len(plan.Nodes), mb(plan.MissingBytes), mb(plan.TotalBytes)))
	// While blobs stream, a line every progressEvery says how far along.
	var sent atomic.Int64
	stop, stopped := make(chan struct{}), make(chan struct{})
	// No line after the operation returns: the ticker's goroutine ends first.
	defer func() { close(stop); <-stopped }()
	go func() {
		defer close(stopped)
		t := time.NewTicker(p.progressEvery)
		defer t.Stop()
		begin := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				n := sent.Load()
				req.Log.Stdout(fmt.Sprintf("sent %s of %s (%.1f MB/s)", mb(n), mb(plan.MissingBytes), float64(n)/(1<<20)/time.Since(begin).Seconds()))
			}
		}
	}()
	res, err := plan.Apply(ctx, ocicopy.Options{NoReferrers: !j.cfg.referrers, Sent: &sent, Progress: func(e ocicopy.Event) {
		if !e.Done {
			return
		}
		what := "blob"
		if e.Manifest {
			what = "manifest"
		}
		req.Log.Stdout(fmt.Sprintf("copied %s %s (%s)", what, e.Descriptor.Digest, mb(e.Descriptor.Size)))
	}})
	if err != nil {
		if res != nil && res.BlobsCopied > 0 {
			req.Log.System(fmt.Sprintf("%d blobs (%s) reached the install registry before the failure; the next attempt does not send them again", res.BlobsCopied, mb(res.BlobBytes)))
		}
		return nil, j.explain(err)
	}
	now := p.now().UTC().Format(time.RFC3339)
	rec := record{Source: j.cfg.source, SourceDigest: j.cfg.ref.Digest.String(), Digest: res.Root.Digest.String(),
		Registry: j.dstReg.String(), Repository: j.cfg.repository, Reference: target, CopiedAt: now}
	if dir := req.Job.StateDir; dir != "" {
		b, _ := json.MarshalIndent(rec, "", "  ")
		if err := atomicfile.Write(filepath.Join(dir, stateFile), append(b, '\n'), 0o600); err != nil {
			return nil, fmt.Errorf("record the copy: %w", err)
		}
	}
	req.Log.Stdout(fmt.Sprintf("%s: %s sent (%d blobs copied, %d already there; %d manifests copied)", target, mb(res.BytesTransferred), res.BlobsCopied, res.BlobsSkipped, res.ManifestsCopied))
	return &sdk.ApplyResponse{PolicyFindings: findings, Outputs: map[string]string{
		"digest":                 rec.Digest,
		"media_type":             res.Root.MediaType,
		"size":                   strconv.FormatInt(res.Root.Size, 10),
		"total_size":             strconv.FormatInt(res.TotalBytes, 10),
		"bytes_transferred":      strconv.FormatInt(res.BytesTransferred, 10),
		"blob_bytes_transferred": strconv.FormatInt(res.BlobBytes, 10),
		"blobs_copied":           strconv.Itoa(res.BlobsCopied),
		"blobs_skipped":          strconv.Itoa(res.BlobsSkipped),
		"registry":               rec.Registry,
		"repository":             rec.Repository,
		"reference":              rec.Reference,
		"source":                 rec.Source,
		"source_digest":          rec.SourceDigest,
		"copied_at":              rec.CopiedAt,
	}}, nil
}

// Drift compares the running digest (the last apply's, if the install
// registry still holds all of it) with the config's. It needs no source.
func (p *Plugin) Drift(ctx context.Context, req *sdk.DriftRequest) (*sdk.DriftResponse, error) {
	j, err := p.open(ctx, req.Config, req.Env, false)
	if err != nil {
		return nil, err
	}
	defer j.close()
	want := j.cfg.ref.Digest
	running := want
	rec, ok := readState(req.Job.StateDir)
	if ok {
		running = digest.Digest(rec.Digest)
	}
	var reasons []string
	if ok && running != want {
		reasons = append(reasons, fmt.Sprintf("runs %s, the config says %s", running, want))
	}
	if !ok && req.Job.StateDir != "" {
		reasons = append(reasons, "never applied: no record in the state directory")
	}
	missing, err := ocicopy.Missing(ctx, j.dst, running, j.cfg.referrers)
	var ue *ocicopy.UnreachableError
	switch {
	case errors.As(err, &ue):
		return nil, fmt.Errorf("install registry %s is unreachable: %v", j.dstReg, ue.Err)
	case err != nil:
		reasons = append(reasons, fmt.Sprintf("the install registry does not hold %s whole: %v", running, err))
	case len(missing) > 0:
		var ds []string
		for _, n := range missing {
			ds = append(ds, n.Descriptor.Digest.String())
		}
		reasons = append(reasons, fmt.Sprintf("the install registry does not hold %s whole: it lacks %s", running, strings.Join(ds, ", ")))
	}
	if len(reasons) == 0 {
		return &sdk.DriftResponse{Changes: fmt.Sprintf("%s@%s is in the install registry, whole", j.cfg.repository, running)}, nil
	}
	return &sdk.DriftResponse{Drifted: true, Changes: strings.Join(reasons, "\n")}, nil
}

// Destroy forgets the record of the copy. The install registry keeps the
// content: it is addressed by digest, and other components may share it.
func (p *Plugin) Destroy(_ context.Context, req *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	if req.Job.StateDir == "" {
		req.Log.System("no state directory: nothing recorded to forget")
		return &sdk.DestroyResponse{}, nil
	}
	err := os.Remove(filepath.Join(req.Job.StateDir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		req.Log.System("nothing recorded: nothing to forget")
		return &sdk.DestroyResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	req.Log.Stdout("forgot the copy; its content stays in the install registry, addressed by digest")
	return &sdk.DestroyResponse{}, nil
}

// mb writes a byte count for people.
func mb(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
