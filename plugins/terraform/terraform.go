// Package terraform is the built-in "terraform" component type: it runs a
// Terraform module with the terraform binary on the agent's machine,
// through hashicorp/terraform-exec.
//
// Config (tfschema.Config):
//
//	{
//	  "module": "modules/network@sha256:…",    // by digest; or "module_dir": "/src/network"
//	  "vars": {"name": "acme", "cidr": "10.0.0.0/16"},
//	  "backend": {"s3": {"bucket": "b", "key": "network.tfstate", "region": "eu-west-1"}},
//	  "parallelism": 10
//	}
//
// The module is an OCI artifact (ModuleArtifactType, one gzipped tar layer)
// read with oras-go from the install registry ($BYOC_INSTALL_REGISTRY, an
// OCI image layout root), or for development a directory on the agent.
// Every operation unpacks it into the job's work dir, writes an override
// file that puts the state where it belongs (local state in the
// component's state dir, or the S3 backend the config names), a CLI
// config that installs providers only from the agent's filesystem mirror
// ($BYOC_TERRAFORM_PROVIDERS, never a registry), runs init, and then:
//
//   - plan: terraform plan to a saved plan file, show -json of that file,
//     turned into PlannedChanges (sensitive values masked);
//   - apply: the same plan, the policy gate on it, then terraform apply of
//     exactly that saved plan file; the module's outputs become the
//     component's outputs;
//   - destroy: a destroy plan, saved and applied the same way; then the
//     component's local state is removed;
//   - drift: terraform plan -refresh-only: what changed outside byoc.
//
// Cancelling an operation interrupts Terraform (SIGINT, which
// terraform-exec sends when the context ends): Terraform stops starting
// new changes, waits for those in flight, writes its state and releases
// the state lock before it exits, and the operation returns then. A
// Terraform killed outright leaves a state the next run continues from;
// a lock it left on an S3 state is removed by the next run of the same
// component (see lockRecovery).
package terraform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"

	"github.com/byoc-dev/byoc/plugins/policy"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/terraform/tfschema"
)

// TypeName is the component type this package implements.
const TypeName = "terraform"

// Version is the version of the terraform plugin.
const Version = "0.1.0"

// Environment variables the plugin reads (the operation's environment
// first, then its own process's), set by the agent.
const (
	// EnvInstallRegistry is the install registry's location: "oci:DIR"
	// or an absolute path, an OCI image layout root with one layout per
	// repository.
	EnvInstallRegistry = "BYOC_INSTALL_REGISTRY"
	// EnvProviders is the provider filesystem mirror directory
	// (Terraform's unpacked or packed mirror layout).
	EnvProviders = "BYOC_TERRAFORM_PROVIDERS"
	// EnvTerraform is the terraform binary; default: terraform on PATH.
	EnvTerraform = "BYOC_TERRAFORM"
)

// Files the plugin keeps in the component's state dir.
const (
	// StateFile is the local backend's state.
	StateFile = "terraform.tfstate"
	// PlanFile is the saved plan in a plan's JobContext.PlanDir.
	PlanFile = "tfplan"
	// DataDir is handed to a module that declares variable
	// "byoc_data_dir": a directory kept across jobs, for what a module
	// for a local machine writes (the example sandbox's files).
	DataDir = "data"
	// runningMarker exists while a Terraform command that may lock the
	// state runs; found at the start of a job, it says the previous one
	// was killed.
	runningMarker = ".terraform-running"
)

// waitDelay is how long a Terraform that was interrupted may take to stop
// before terraform-exec kills it; the agent's cancel grace bounds it too.
const waitDelay = 10 * time.Minute

// Plugin implements the terraform component type.
type Plugin struct {
	getenv func(string) string
}

var (
	_ sdk.Plugin    = (*Plugin)(nil)
	_ sdk.Destroyer = (*Plugin)(nil)
	_ sdk.Drifter   = (*Plugin)(nil)
)

// New returns the terraform plugin.
func New() *Plugin { return &Plugin{getenv: os.Getenv} }

// Describe reports the type and its config schema.
func (p *Plugin) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: TypeName, Version: Version, ConfigSchema: tfschema.Config, EvaluatesPolicies: true}, nil
}

// config is a decoded terraform config.
type config struct {
	Module      string         `json:"module"`
	ModuleDir   string         `json:"module_dir"`
	Vars        map[string]any `json:"vars"`
	Parallelism int            `json:"parallelism"`
	Backend     struct {
		S3 *s3Backend `json:"s3"`
	} `json:"backend"`
}

type s3Backend struct {
	Bucket        string `json:"bucket"`
	Key           string `json:"key"`
	Region        string `json:"region"`
	Endpoint      string `json:"endpoint"`
	UsePathStyle  bool   `json:"use_path_style"`
	UseLockfile   *bool  `json:"use_lockfile"`
	DynamoDBTable string `json:"dynamodb_table"`
	Encrypt       bool   `json:"encrypt"`
	SkipAWSChecks bool   `json:"skip_aws_checks"`
}

func decode(m map[string]any) (*config, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var c config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &c, nil
}

var varName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// Validate checks what the schema cannot: one module source, a module
// reference that parses, variable names Terraform accepts.
func (p *Plugin) Validate(_ context.Context, req *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	c, err := decode(req.Config)
	if err != nil {
		return nil, err
	}
	var diags []sdk.Diagnostic
	switch {
	case c.Module == "" && c.ModuleDir == "":
		diags = append(diags, sdk.Diagnostic{Field: "module", Message: "is required: the module's reference in the install registry (or module_dir, a directory on the agent, for development)"})
	case c.Module != "" && c.ModuleDir != "":
		diags = append(diags, sdk.Diagnostic{Field: "module_dir", Message: "set module or module_dir, not both"})
	case c.Module != "":
		if err := checkModuleRef(c.Module); err != nil {
			diags = append(diags, sdk.Diagnostic{Field: "module", Message: strings.TrimPrefix(err.Error(), fmt.Sprintf("module %q: ", c.Module))})
		}
	case !filepath.IsAbs(c.ModuleDir):
		diags = append(diags, sdk.Diagnostic{Field: "module_dir", Message: "must be an absolute path on the agent's machine"})
	}
	for _, k := range slices.Sorted(mapsKeys(c.Vars)) {
		if !varName.MatchString(k) {
			diags = append(diags, sdk.Diagnostic{Field: "vars." + k, Message: "is not a Terraform variable name (letters, digits, _ and -, not starting with a digit)"})
		}
		if strings.HasPrefix(k, "byoc_") {
			diags = append(diags, sdk.Diagnostic{Field: "vars." + k, Message: "byoc_ variables are set by the agent"})
		}
	}
	if s3 := c.Backend.S3; s3 != nil && s3.DynamoDBTable != "" && s3.UseLockfile != nil && *s3.UseLockfile {
		diags = append(diags, sdk.Diagnostic{Field: "backend.s3.dynamodb_table", Message: "lock with use_lockfile or dynamodb_table, not both"})
	}
	return &sdk.ValidateResponse{Diagnostics: diags}, nil
}

func mapsKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Plan runs terraform plan to a saved plan file and reports its changes.
func (p *Plugin) Plan(ctx context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	r, err := p.start(ctx, req.Job, req.Config, req.Env, req.Log)
	if err != nil {
		return nil, err
	}
	defer r.close()
	pl, err := r.plan(ctx, planNormal)
	if err != nil {
		return nil, err
	}
	// A plan that policy denies fails, so the operator sees it before an
	// apply would.
	findings, err := r.gate(ctx, sdk.OpPlan, pl)
	return &sdk.PlanResponse{Changes: pl.summary, PlannedChanges: pl.changes, PolicyFindings: findings}, err
}

// Apply plans, checks the plan against policy, applies exactly the saved
// plan, and returns the module's outputs.
func (p *Plugin) Apply(ctx context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	r, err := p.start(ctx, req.Job, req.Config, req.Env, req.Log)
	if err != nil {
		return nil, err
	}
	defer r.close()
	var pl *plan
	if req.Job.ApprovedPlanDigest != "" && req.Job.PlanDir != "" {
		pl, err = r.approvedPlan(ctx)
	} else {
		pl, err = r.plan(ctx, planNormal)
	}
	if err != nil {
		return nil, err
	}
	findings, err := r.gateAndApply(ctx, sdk.OpApply, pl, "terraform: no changes; nothing to apply")
	resp := &sdk.ApplyResponse{PolicyFindings: findings}
	if err != nil {
		return resp, err
	}
	resp.Outputs, err = r.outputs(ctx)
	return resp, err
}

// gateAndApply checks plan pl against the job's policies for operation op
// and, when they allow it, applies exactly that saved plan (or says
// unchanged when it changes nothing). The findings come back either way.
func (r *run) gateAndApply(ctx context.Context, op string, pl *plan, unchanged string) ([]sdk.PolicyFinding, error) {
	findings, err := r.gate(ctx, op, pl)
	if err != nil {
		return findings, err
	}
	if !pl.hasChanges {
		r.log.System(unchanged)
		return findings, nil
	}
	return findings, r.apply(ctx, pl)
}

// PlanDestroy runs terraform plan -destroy to a saved plan file in the
// plan directory and reports what it would remove: the plan an operator
// approves before a deprovision, which Destroy then applies.
func (p *Plugin) PlanDestroy(ctx context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	r, err := p.start(ctx, req.Job, req.Config, req.Env, req.Log)
	if err != nil {
		return nil, err
	}
	defer r.close()
	pl, err := r.plan(ctx, planDestroy)
	if err != nil {
		return nil, err
	}
	findings, err := r.gate(ctx, sdk.OpDestroy, pl)
	return &sdk.PlanResponse{Changes: pl.summary, PlannedChanges: pl.changes, PolicyFindings: findings}, err
}

// Destroy plans the destruction, checks it against policy, applies that
// saved plan, and then removes the component's local state.
func (p *Plugin) Destroy(ctx context.Context, req *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	r, err := p.start(ctx, req.Job, req.Config, req.Env, req.Log)
	if err != nil {
		return nil, err
	}
	defer r.close()
	var pl *plan
	if req.Job.ApprovedPlanDigest != "" && req.Job.PlanDir != "" {
		pl, err = r.approvedPlan(ctx)
	} else {
		pl, err = r.plan(ctx, planDestroy)
	}
	if err != nil {
		return nil, err
	}
	findings, err := r.gateAndApply(ctx, sdk.OpDestroy, pl, "terraform: nothing to destroy")
	resp := &sdk.DestroyResponse{PolicyFindings: findings}
	if err != nil {
		return resp, err
	}
	// The state now holds nothing; what is left in the state dir would
	// only confuse a later install of the same component.
	if r.stateDir != "" {
		for _, f := range []string{StateFile, StateFile + ".backup", DataDir} {
			if err := os.RemoveAll(filepath.Join(r.stateDir, f)); err != nil {
				return resp, err
			}
		}
	}
	return resp, nil
}

// Drift runs terraform plan -refresh-only and reports what changed outside
// byoc since the last apply. It changes nothing.
func (p *Plugin) Drift(ctx context.Context, req *sdk.DriftRequest) (*sdk.DriftResponse, error) {
	r, err := p.start(ctx, req.Job, req.Config, req.Env, req.Log)
	if err != nil {
		return nil, err
	}
	defer r.close()
	pl, err := r.plan(ctx, planRefreshOnly)
	if err != nil {
		return nil, err
	}
	return &sdk.DriftResponse{Drifted: len(pl.changes) > 0, Changes: pl.summary, PlannedChanges: pl.changes}, nil
}

// Import adopts existing objects into the component's Terraform state,
// one `terraform import ADDR ID` per pair of the import id
// "ADDR=ID[,ADDR=ID]..." (the address of a resource of the module, the
// provider's id of the object), then refreshes the state so the
// outputs are those of what was imported. It changes no object.
func (p *Plugin) Import(ctx context.Context, req *sdk.ImportRequest) (*sdk.ImportResponse, error) {
	pairs, err := parseImportID(req.ID)
	if err != nil {
		return nil, err
	}
	r, err := p.start(ctx, req.Job, req.Config, req.Env, req.Log)
	if err != nil {
		return nil, err
	}
	defer r.close()
	findings, err := r.gateImport(ctx, pairs)
	if err != nil {
		return &sdk.ImportResponse{PolicyFindings: findings}, err
	}
	for _, pr := range pairs {
		r.log.System(fmt.Sprintf("terraform: importing %s as %s", pr[1], pr[0]))
		if err := r.locked(ctx, "import "+pr[0], func() error {
			return r.tf.Import(ctx, pr[0], pr[1], tfexec.VarFile(r.varFile))
		}); err != nil {
			return nil, err
		}
	}
	if err := r.locked(ctx, "refresh", func() error { return r.tf.Refresh(ctx, tfexec.VarFile(r.varFile)) }); err != nil {
		return nil, err
	}
	outputs, err := r.outputs(ctx)
	return &sdk.ImportResponse{Outputs: outputs, PolicyFindings: findings}, err
}

// importAddr is a resource address an import block may name: modules,
// a type and a name, each with an optional index (a number or a quoted
// key).
var importAddr = regexp.MustCompile(`^(module\.[A-Za-z_][\w-]*(\[(\d+|"[^"\\\n$%{}]*")\])?\.)*[A-Za-z_][\w-]*\.[A-Za-z_][\w-]*(\[(\d+|"[^"\\\n$%{}]*")\])?$`)

// importFile is the file of import blocks gateImport writes into the
// module's root for its plan, and removes after.
const importFile = "byoc_import_gate.tf"

// gateImport puts an import through the job's policies before anything
// joins the state, as a plan is before an apply: a plan of the module
// with an import block per pair shows what would be adopted, each
// object an input.changes entry of action "import" (its values in after;
// input.plan is Terraform's JSON plan, whose resource_changes also show
// what a next apply would change). The plan is only read: the objects
// are then imported with terraform import, which changes none. Without
// policies it does nothing.
func (r *run) gateImport(ctx context.Context, pairs [][2]string) ([]sdk.PolicyFinding, error) {
	if len(r.job.Policies) == 0 {
		return nil, nil
	}
	var b strings.Builder
	for _, pr := range pairs {
		if !importAddr.MatchString(pr[0]) {
			return nil, fmt.Errorf("import id: %q is not a resource address (TYPE.NAME, optionally module.NAME. before and an [index] after)", pr[0])
		}
		id, err := json.Marshal(pr[1])
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "import {\n  to = %s\n  id = %s\n}\n", pr[0], id)
	}
	file := filepath.Join(r.dir, importFile)
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		return nil, err
	}
	defer os.Remove(file)
	r.log.System("terraform: planning the import for the policies")
	pl, err := r.plan(ctx, planNormal)
	if err != nil {
		return nil, err
	}
	var changes []sdk.PlannedChange
	for _, rc := range pl.json.ResourceChanges {
		if rc == nil || rc.Change == nil || rc.Change.Importing == nil {
			continue
		}
		after := maskSensitive(withUnknown(rc.Change.After, rc.Change.AfterUnknown), rc.Change.AfterSensitive, nil, sdk.Masked)
		summary := fmt.Sprintf("%s: import %s", rc.Address, rc.Change.Importing.ID)
		if a := actionOf(rc.Change.Actions); a != "" {
			summary += " (then " + a + ")"
		}
		changes = append(changes, sdk.PlannedChange{Address: rc.Address, Action: sdk.ActionImport, After: after, Summary: summary})
	}
	raw, err := planJSON(pl)
	if err != nil {
		return nil, err
	}
	return policy.Gate(ctx, r.job, r.log, policy.NewInput(r.job, TypeName, sdk.OpImport, changes, raw))
}

// planJSON is Terraform's JSON plan as plain values, for a policy's
// input.plan.
func planJSON(pl *plan) (any, error) {
	b, err := json.Marshal(pl.json)
	if err != nil {
		return nil, err
	}
	var raw any
	err = json.Unmarshal(b, &raw)
	return raw, err
}

// parseImportID reads "ADDR=ID[,ADDR=ID]...": pairs of a resource
// address and the provider's id of the object.
func parseImportID(s string) ([][2]string, error) {
	var out [][2]string
	seen := map[string]bool{}
	for i, part := range strings.Split(s, ",") {
		addr, id, ok := strings.Cut(strings.TrimSpace(part), "=")
		addr, id = strings.TrimSpace(addr), strings.TrimSpace(id)
		switch {
		case !ok || addr == "" || id == "":
			return nil, fmt.Errorf("import id: pair %d %q: want ADDR=ID (a resource address of the module and the object's id), pairs separated by commas", i+1, part)
		case seen[addr]:
			return nil, fmt.Errorf("import id: %s is named twice", addr)
		}
		seen[addr] = true
		out = append(out, [2]string{addr, id})
	}
	return out, nil
}

// env looks name up in the operation's environment, then the process's.
func (p *Plugin) env(opEnv map[string]string, name string) string {
	if v, ok := opEnv[name]; ok {
		return v
	}
	return p.getenv(name)
}

// run is one operation's Terraform working directory.
type run struct {
	azure    *azureTokenEndpoint // the job's Azure token endpoint (nil: not on Azure)
	tf       *tfexec.Terraform
	cfg      *config
	job      sdk.JobContext
	log      sdk.Logger
	dir      string // the module's root, Terraform's working dir
	work     string // the plugin's scratch dir for this operation
	stateDir string
	varFile  string
	// staleMarker: a previous run of the component left runningMarker.
	staleMarker bool
	out         *lineWriter
	errOut      *lineWriter
}

func (r *run) close() {
	r.azure.Close()
	r.out.Flush()
	r.errOut.Flush()
	os.RemoveAll(r.work)
}

// start prepares the working directory and runs terraform init.
func (p *Plugin) start(ctx context.Context, job sdk.JobContext, cfgMap map[string]any, opEnv map[string]string, log sdk.Logger) (*run, error) {
	cfg, err := decode(cfgMap)
	if err != nil {
		return nil, err
	}
	if job.StateDir == "" && cfg.Backend.S3 == nil {
		return nil, errors.New("no state directory for this job (a job of no component, or an agent older than protocol 1.2): the terraform type keeps its local state there; set backend.s3 or run it as a component")
	}
	bin := p.env(opEnv, EnvTerraform)
	if bin == "" {
		bin = "terraform"
	}
	execPath, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("terraform binary: %w (install Terraform on the agent's machine, on PATH, or set $%s)", err, EnvTerraform)
	}
	parent := job.WorkDir
	if parent == "" {
		parent = os.TempDir()
	}
	work, err := os.MkdirTemp(parent, "terraform-")
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, job: job, log: log, work: work, stateDir: job.StateDir, dir: filepath.Join(work, "module"),
		out: newLineWriter(log.Stdout), errOut: newLineWriter(log.Stderr)}
	ok := false
	defer func() {
		if !ok {
			r.close()
		}
	}()
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	if cfg.ModuleDir != "" {
		if err := copyModuleDir(cfg.ModuleDir, r.dir); err != nil {
			return nil, err
		}
		log.System("terraform: module from directory " + cfg.ModuleDir + " (development)")
	} else {
		dg, err := fetchModule(ctx, p.env(opEnv, EnvInstallRegistry), opEnv, cfg.Module, r.dir)
		if err != nil {
			return nil, err
		}
		log.System(fmt.Sprintf("terraform: module %s (%s)", cfg.Module, dg))
	}
	r.readMarker()
	if err := r.writeBackend(); err != nil {
		return nil, err
	}
	cliConfig, err := r.writeCLIConfig(p.env(opEnv, EnvProviders))
	if err != nil {
		return nil, err
	}
	if err := r.writeVars(); err != nil {
		return nil, err
	}
	r.tf, err = tfexec.NewTerraform(r.dir, execPath)
	if err != nil {
		return nil, err
	}
	env := tfexec.CleanEnv(maps(opEnv))
	// The azurerm provider cannot take the job's Azure token as it is:
	// serve it as a managed identity endpoint (azuretoken.go).
	var azEnv map[string]string
	if r.azure, azEnv, err = startAzureTokenEndpoint(opEnv); err != nil {
		return nil, err
	}
	for k, v := range azEnv {
		env[k] = v
	}
	env["TF_CLI_CONFIG_FILE"] = cliConfig
	env["CHECKPOINT_DISABLE"] = "1"
	if err := r.tf.SetEnv(env); err != nil {
		return nil, err
	}
	r.tf.SetStdout(r.out)
	r.tf.SetStderr(r.errOut)
	if err := r.tf.SetWaitDelay(waitDelay); err != nil {
		return nil, err
	}
	if err := r.locked(ctx, "init", func() error { return r.tf.Init(ctx, tfexec.Reconfigure(true)) }); err != nil {
		return nil, err
	}
	ok = true
	return r, nil
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// writeBackend writes the override file that says where the state lives.
// An override file replaces whatever backend the module declares.
func (r *run) writeBackend() error {
	var backend map[string]any
	if s3 := r.cfg.Backend.S3; s3 != nil {
		b := map[string]any{"bucket": s3.Bucket, "key": s3.Key, "region": s3.Region}
		if s3.Endpoint != "" {
			b["endpoints"] = map[string]any{"s3": s3.Endpoint}
		}
		if s3.UsePathStyle {
			b["use_path_style"] = true
		}
		if s3.Encrypt {
			b["encrypt"] = true
		}
		if s3.DynamoDBTable != "" {
			b["dynamodb_table"] = s3.DynamoDBTable
		} else {
			b["use_lockfile"] = s3.UseLockfile == nil || *s3.UseLockfile
		}
		if s3.SkipAWSChecks {
			for _, k := range []string{"skip_credentials_validation", "skip_region_validation", "skip_requesting_account_id", "skip_metadata_api_check", "skip_s3_checksum"} {
				b[k] = true
			}
		}
		backend = map[string]any{"s3": b}
	} else {
		backend = map[string]any{"local": map[string]any{"path": filepath.Join(r.stateDir, StateFile)}}
	}
	b, err := json.MarshalIndent(map[string]any{"terraform": map[string]any{"backend": backend}}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.dir, "zz_byoc_backend_override.tf.json"), b, 0o600)
}

// writeCLIConfig writes Terraform's CLI config: providers only from the
// filesystem mirror, never from a registry.
func (r *run) writeCLIConfig(mirror string) (string, error) {
	if mirror == "" {
		// An empty mirror: a module that needs a provider fails init
		// naming it; one of built-in resources only (terraform_data)
		// runs.
		mirror = filepath.Join(r.work, "no-providers")
		if err := os.MkdirAll(mirror, 0o755); err != nil {
			return "", err
		}
		r.log.System("terraform: no provider mirror on this agent (agentd --terraform-providers); only modules without providers can run")
	} else if !filepath.IsAbs(mirror) {
		return "", fmt.Errorf("provider mirror %q ($%s): must be an absolute path", mirror, EnvProviders)
	}
	q, _ := json.Marshal(mirror)
	text := fmt.Sprintf(`disable_checkpoint = true
provider_installation {
  filesystem_mirror {
    path    = %s
    include = ["*/*/*"]
  }
  direct {
    exclude = ["*/*/*"]
  }
}
`, q)
	path := filepath.Join(r.work, "terraform.rc")
	return path, os.WriteFile(path, []byte(text), 0o600)
}

// writeVars writes the module's variables as a JSON var file (exact
// types, and values never on a command line).
func (r *run) writeVars() error {
	vars := map[string]any{}
	for k, v := range r.cfg.Vars {
		vars[k] = v
	}
	if r.stateDir != "" && declaresVariable(r.dir, "byoc_data_dir") {
		d := filepath.Join(r.stateDir, DataDir)
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		vars["byoc_data_dir"] = d
	}
	b, err := json.Marshal(vars)
	if err != nil {
		return err
	}
	r.varFile = filepath.Join(r.work, "byoc.tfvars.json")
	return os.WriteFile(r.varFile, b, 0o600)
}

type planMode int

const (
	planNormal planMode = iota
	planDestroy
	planRefreshOnly
)

// plan is a saved plan and what it would do.
type plan struct {
	file       string
	json       *tfjson.Plan
	hasChanges bool
	changes    []sdk.PlannedChange
	summary    string
}

// plan runs terraform plan to a saved plan file and reads it back with
// terraform show -json.
func (r *run) plan(ctx context.Context, mode planMode) (*plan, error) {
	pl := &plan{file: filepath.Join(r.work, "tfplan")}
	if (mode == planNormal || mode == planDestroy) && r.job.PlanDir != "" {
		// The agent keeps this directory under the plan's digest, so that
		// an apply the operator approves applies exactly this file.
		pl.file = filepath.Join(r.job.PlanDir, PlanFile)
	}
	opts := []tfexec.PlanOption{tfexec.Out(pl.file), tfexec.VarFile(r.varFile)}
	if r.cfg.Parallelism > 0 {
		opts = append(opts, tfexec.Parallelism(r.cfg.Parallelism))
	}
	what := "plan"
	switch mode {
	case planDestroy:
		opts = append(opts, tfexec.Destroy(true))
		what = "plan -destroy"
	case planRefreshOnly:
		opts = append(opts, tfexec.RefreshOnly(true))
		what = "plan -refresh-only"
	}
	err := r.locked(ctx, what, func() error {
		var err error
		pl.hasChanges, err = r.tf.Plan(ctx, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return r.read(ctx, pl, mode)
}

// approvedPlan reads the saved plan an operator approved (the agent has
// planned again in this job and found the same digest).
func (r *run) approvedPlan(ctx context.Context) (*plan, error) {
	pl := &plan{file: filepath.Join(r.job.PlanDir, PlanFile), hasChanges: true}
	if _, err := os.Stat(pl.file); err != nil {
		return nil, fmt.Errorf("the approved plan %s has no saved Terraform plan: %w", r.job.ApprovedPlanDigest, err)
	}
	r.log.System("terraform: applying the approved plan " + r.job.ApprovedPlanDigest)
	return r.read(ctx, pl, planNormal)
}

// read reads a saved plan back with terraform show -json.
func (r *run) read(ctx context.Context, pl *plan, mode planMode) (*plan, error) {
	var err error
	// show -json and output print values Terraform never shows in its
	// human output (sensitive ones): not for the log.
	r.out.Mute(true)
	pl.json, err = r.tf.ShowPlanFile(ctx, pl.file)
	r.out.Mute(false)
	if err != nil {
		return nil, r.failed(ctx, "show -json", err)
	}
	if err := r.checkVars(pl.json); err != nil {
		return nil, err
	}
	if mode == planRefreshOnly {
		pl.hasChanges = len(pl.json.ResourceDrift) > 0
		pl.changes = changesOf(pl.json.ResourceDrift, true)
		pl.summary = driftSummary(pl.changes)
	} else {
		pl.changes = changesOf(pl.json.ResourceChanges, false)
		pl.summary = planSummary(pl.changes, pl.json)
		if len(pl.changes) == 0 && !outputsChange(pl.json) {
			pl.hasChanges = false
		}
	}
	return pl, nil
}

// checkVars fails when the config sets a variable the module does not
// declare (Terraform only warns about those in a var file).
func (r *run) checkVars(p *tfjson.Plan) error {
	if p.Config == nil || p.Config.RootModule == nil {
		return nil
	}
	declared := p.Config.RootModule.Variables
	var bad []string
	for k := range r.cfg.Vars {
		if _, ok := declared[k]; !ok {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	have := slices.Sorted(func(yield func(string) bool) {
		for k := range declared {
			if k != "byoc_data_dir" && !yield(k) {
				return
			}
		}
	})
	msgs := make([]string, len(bad))
	for i, k := range bad {
		msgs[i] = fmt.Sprintf("config.vars.%s: the module declares no variable %q", k, k)
	}
	return fmt.Errorf("%s (it declares: %s)", strings.Join(msgs, "; "), orNone(have))
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// apply applies exactly the saved plan.
func (r *run) apply(ctx context.Context, pl *plan) error {
	opts := []tfexec.ApplyOption{tfexec.DirOrPlan(pl.file)}
	if r.cfg.Parallelism > 0 {
		opts = append(opts, tfexec.Parallelism(r.cfg.Parallelism))
	}
	return r.locked(ctx, "apply", func() error { return r.tf.Apply(ctx, opts...) })
}

// outputs reads the module's outputs: strings as they are, anything else
// as JSON.
func (r *run) outputs(ctx context.Context) (map[string]string, error) {
	r.out.Mute(true)
	outs, err := r.tf.Output(ctx)
	r.out.Mute(false)
	if err != nil {
		return nil, r.failed(ctx, "output", err)
	}
	res := make(map[string]string, len(outs))
	for k, o := range outs {
		var s string
		if err := json.Unmarshal(o.Value, &s); err == nil {
			res[k] = s
			continue
		}
		var b bytes.Buffer
		if err := json.Compact(&b, o.Value); err != nil {
			return nil, fmt.Errorf("output %s: %w", k, err)
		}
		res[k] = b.String()
	}
	return res, nil
}

// gate evaluates the plan against the job's policies (plugins/policy):
// input.changes are the planned changes, input.plan Terraform's own JSON
// plan (resource_changes, configuration, ...). A deny fails the operation
// before anything is applied; every finding is logged and returned.
func (r *run) gate(ctx context.Context, op string, pl *plan) ([]sdk.PolicyFinding, error) {
	if len(r.job.Policies) == 0 {
		return nil, nil
	}
	raw, err := planJSON(pl)
	if err != nil {
		return nil, err
	}
	return policy.Gate(ctx, r.job, r.log, policy.NewInput(r.job, TypeName, op, pl.changes, raw))
}

// locked runs a Terraform command that may take the state lock, with the
// running marker in the state dir around it, and words its failure.
func (r *run) locked(ctx context.Context, what string, fn func() error) error {
	err := r.withMarker(fn)
	if err != nil && r.recoverLock(ctx, err) {
		r.log.System("terraform: retrying " + what + " after removing the stale lock")
		err = r.withMarker(fn)
	}
	if err != nil {
		return r.failed(ctx, what, err)
	}
	return nil
}

func (r *run) withMarker(fn func() error) error {
	if r.stateDir == "" {
		return fn()
	}
	marker := filepath.Join(r.stateDir, runningMarker)
	_ = os.WriteFile(marker, []byte(r.job.JobID+"\n"), 0o600)
	err := fn()
	if err == nil || !strings.Contains(err.Error(), "signal: killed") {
		// Terraform ended on its own or interrupted: either way it
		// released its lock. Only one killed (here, or with this plugin)
		// leaves the marker.
		os.Remove(marker)
	}
	return err
}

// failed words a Terraform command's failure: an interruption says what
// became of the state; otherwise Terraform's own error text.
func (r *run) failed(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		err := fmt.Errorf("terraform %s interrupted (%v): Terraform stopped after the changes in flight and saved its state; the next run continues from it", what, context.Cause(ctx))
		// The agent reports a cancelled job's own cause, not this error:
		// the log keeps it.
		r.log.System("terraform: " + err.Error())
		return err
	}
	return fmt.Errorf("terraform %s: %s", what, cleanError(err))
}

var blankLines = regexp.MustCompile(`\n\s*\n+`)

// cleanError is Terraform's error output without its box drawing and
// blank lines.
func cleanError(err error) string {
	s := err.Error()
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimRight(strings.TrimLeft(l, "│╷╵ "), " ")
		if l != "" {
			lines = append(lines, l)
		}
	}
	return blankLines.ReplaceAllString(strings.Join(lines, "\n"), "\n")
}
