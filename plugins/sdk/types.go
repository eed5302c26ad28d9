package sdk

import (
	"context"
	"errors"
	"time"
)

// Operation names accepted by [Client.Run].
const (
	OpPlan    = "plan"
	OpApply   = "apply"
	OpDestroy = "destroy"
	OpDrift   = "drift"
	// OpPlanDestroy is the plan of a destroy: what Destroy would remove,
	// for an operator to approve (the Plan call with JobContext.Destroy
	// set, served by a [DestroyPlanner]).
	OpPlanDestroy = "plan-destroy"
	// OpImport adopts an existing resource as the component's state
	// (protocol 1.4, served by an [Importer]).
	OpImport = "import"
)

// IsPlan reports whether op makes a plan: OpPlan or OpPlanDestroy.
func IsPlan(op string) bool { return op == OpPlan || op == OpPlanDestroy }

// Plugin is what every component type implements.
//
// Plan and Apply (and the optional operations) may log through the
// request's Log while they run; each line reaches the agent immediately.
// A non-nil error means the operation failed; its message becomes the
// result's error and, if the response's ExitCode is zero, the exit code
// becomes 1. A panic is reported as a failed operation.
//
// Optional capabilities are separate interfaces, found at run time by type
// assertion and announced to the host in Describe: [Destroyer],
// [DestroyPlanner], [Drifter], [Importer], [OutputsSchemaProvider].
type Plugin interface {
	// Describe says what the plugin is. The SDK adds the protocol version
	// and the capabilities.
	Describe(ctx context.Context, req *DescribeRequest) (*DescribeResponse, error)
	// Validate checks a config beyond what its schema says. It is called
	// even for a config the schema refuses, so that every problem is
	// reported in one round: do not assume the schema's types (an error
	// or a panic then only drops your diagnostics). Return warnings with
	// Severity SeverityWarning: the agent logs them and runs the job.
	Validate(ctx context.Context, req *ValidateRequest) (*ValidateResponse, error)
	Plan(ctx context.Context, req *PlanRequest) (*PlanResponse, error)
	Apply(ctx context.Context, req *ApplyRequest) (*ApplyResponse, error)
}

// Destroyer is a plugin that can remove what Apply created. The host
// refuses a destroy job for a type without it.
type Destroyer interface {
	Destroy(ctx context.Context, req *DestroyRequest) (*DestroyResponse, error)
}

// DestroyPlanner is a plugin that can say what its Destroy would remove,
// without removing anything: with approval required, an operator
// approves this plan before a deprovision runs, and the host plans
// again right before Destroy and destroys only if the plan is the same
// (as for applies). Report each object Destroy removes as a
// PlannedChange with Action ActionDelete. Save what Destroy needs in
// req.Job.PlanDir, like a Plan (Terraform: plan -destroy -out). Without
// it the host plans a destroy as one change, "delete COMPONENT", which
// names nothing it removes.
type DestroyPlanner interface {
	PlanDestroy(ctx context.Context, req *PlanRequest) (*PlanResponse, error)
}

// Drifter is a plugin that can tell whether a component still matches its
// config without changing it.
type Drifter interface {
	Drift(ctx context.Context, req *DriftRequest) (*DriftResponse, error)
}

// Importer is a plugin that can adopt a resource that already exists
// (made by hand, or by another tool) as the component's state, like
// terraform import. req.ID names the resource in a form the type
// defines and documents (a path, "ADDR=ID" pairs, ...). Import changes
// nothing outside the state directory: it reads the resource, keeps
// what later operations need (return it as State, or save it yourself),
// and returns the outputs an apply would. After it, the component counts
// as deployed, and the next Plan must show no change when the resource
// matches the config, else the changes that would make it match. The
// host refuses an import job for a type without it.
type Importer interface {
	Import(ctx context.Context, req *ImportRequest) (*ImportResponse, error)
}

// OutputsSchemaProvider is a plugin that declares the JSON Schema of the
// outputs Apply returns.
type OutputsSchemaProvider interface {
	OutputsSchema(ctx context.Context, req *OutputsSchemaRequest) (*OutputsSchemaResponse, error)
}

// capabilities lists the optional interfaces p implements.
func capabilities(p Plugin) []string {
	var caps []string
	if _, ok := p.(Destroyer); ok {
		caps = append(caps, CapDestroy)
	}
	if _, ok := p.(Drifter); ok {
		caps = append(caps, CapDrift)
	}
	if _, ok := p.(DestroyPlanner); ok {
		caps = append(caps, CapPlanDestroy)
	}
	if _, ok := p.(OutputsSchemaProvider); ok {
		caps = append(caps, CapOutputsSchema)
	}
	if _, ok := p.(Importer); ok {
		caps = append(caps, CapImport)
	}
	return caps
}

// JobContext tells a plugin which job it runs and where.
type JobContext struct {
	// StateVersion is, for a StateUpgrader, its StateVersion: what
	// SaveState records (set by the SDK, not sent by the host).
	StateVersion int

	JobID     string
	InstallID string
	Attempt   int
	// WorkDir is a directory the plugin owns for this job attempt only:
	// the agent creates it empty (STATE/jobs/<job>-<attempt>/) and deletes
	// it when the attempt ends, whatever the outcome. It is the plugin's
	// working directory, HOME and TMPDIR. Never keep anything there that a
	// later job needs.
	WorkDir string
	// StateDir (protocol 1.2) is the component's persistent state
	// directory on the agent (STATE/components/<component>/): it outlives
	// jobs and agent restarts, only one job of the component runs with it
	// at a time (the agent holds a lock on it), and nothing in it is sent
	// to imsd. Keep what a later plan, apply, drift check or destroy of the
	// same component needs there, such as local Terraform state. It is
	// empty when the job belongs to no component (an action run) or the
	// agent speaks protocol 1.1; a plugin that needs it should fail
	// clearly then.
	StateDir string
	// Timeout is the job's time limit; zero means none was given.
	Timeout time.Duration
	// PlanDir (protocol 1.3) is where the plan artifact lives, inside
	// StateDir under [PlanDirName]. In Plan it is an empty directory the
	// plugin may save its plan into (terraform plan -out=PlanDir/tfplan);
	// once the plan succeeds the agent keeps it under the plan's digest,
	// STATE_DIR/.byoc-plans/<hex>/. In the Apply of a plan an operator
	// approved it is that directory of the approved plan, so the plugin
	// can apply exactly what was saved. Empty otherwise (no state
	// directory, an apply without approval, destroy, drift).
	PlanDir string
	// ApprovedPlanDigest (protocol 1.3) is, in the Apply of a plan an
	// operator approved, that plan's digest ("sha256:<hex>", [PlanDigest]).
	// The host has already made a fresh plan in the same job and found
	// the same digest, so Plan runs twice for an approved apply: Plan must
	// change nothing and report the same changes for the same state.
	ApprovedPlanDigest string
	// Component (protocol 1.3) is the name of the install's component the
	// job is for; empty for a job of no component (an action run).
	Component string
	// Mode (protocol 1.3) is the permission mode the job runs in:
	// "provision", "maintenance", "deprovision" or "break_glass".
	Mode string
	// Policies (protocol 1.3) are the rego policies a plan must pass
	// before anything is applied: the vendor's from the app config (those
	// for this component's type) and the customer's from the agent's own
	// configuration. A plugin with EvaluatesPolicies evaluates them with
	// plugins/policy and fails an apply that one denies.
	Policies []PolicyModule
}

// PlanDirName is the directory inside a component's state directory that
// the agent keeps plan artifacts in (JobContext.PlanDir is one of its
// subdirectories). A plugin writes there only into PlanDir. The agent
// removes the artifacts after each apply or destroy of the component,
// and keeps the 8 newest after a plan.
const PlanDirName = ".byoc-plans"

// Logger streams lines back to the agent as log events. Each call sends one
// line immediately. It is safe for concurrent use.
type Logger interface {
	Stdout(text string)
	Stderr(text string)
	System(text string)
}

// Stream identifies where a log line came from.
type Stream int32

// Stream values, as numbered by the protocol.
const (
	StreamStdout Stream = 1
	StreamStderr Stream = 2
	StreamSystem Stream = 3
)

// String returns the stream's name.
func (s Stream) String() string {
	switch s {
	case StreamStdout:
		return "stdout"
	case StreamStderr:
		return "stderr"
	case StreamSystem:
		return "system"
	}
	return "unknown"
}

// LogEvent is one log line received from a plugin.
type LogEvent struct {
	Time   time.Time
	Stream Stream
	Text   string
}

// DescribeRequest asks a plugin what it is.
type DescribeRequest struct {
	// HostProtocol is the host's protocol version; zero when the plugin
	// is run as "byoc-plugin-x describe".
	HostProtocol ProtocolVersion
}

// DescribeResponse says what a plugin is.
type DescribeResponse struct {
	// Type is the component type, the <type> of byoc-plugin-<type>.
	Type string
	// Version is the plugin's own version.
	Version string
	// ConfigSchema is a JSON Schema of the component config. The SDK checks
	// every config against it before calling Validate, Plan, Apply, Destroy
	// or Drift, and reports each problem with the path of its field.
	ConfigSchema string
	// EvaluatesPolicies says that the plugin evaluates the job's Policies
	// against its plans (protocol 1.3): the SDK announces the capability
	// CapPolicy. The agent says in the job log that the policies were not
	// evaluated for a type without it.
	EvaluatesPolicies bool
}

// ValidateRequest asks a plugin to check a component config.
type ValidateRequest struct {
	Config map[string]any
}

// ValidateResponse lists the problems found; none means the config is valid.
type ValidateResponse struct {
	Diagnostics []Diagnostic
}

// PlanRequest asks a plugin to describe what Apply would change.
type PlanRequest struct {
	Job    JobContext
	Config map[string]any
	Env    map[string]string
	Log    Logger
}

// PlanResponse is the outcome of a plan.
type PlanResponse struct {
	ExitCode int
	Outputs  map[string]string
	// Changes summarises the plan for a human.
	Changes string
	// PlannedChanges are the plan's changes, one per object (protocol
	// 1.2); sensitive values are masked before they leave the plugin.
	PlannedChanges []PlannedChange
	// PolicyFindings are what the job's policies said of the plan
	// (protocol 1.3); return them with the error when one denies.
	PolicyFindings []PolicyFinding
}

// ApplyRequest asks a plugin to make the component match its config.
type ApplyRequest struct {
	Job    JobContext
	Config map[string]any
	Env    map[string]string
	Log    Logger
}

// ApplyResponse is the outcome of an apply.
type ApplyResponse struct {
	ExitCode int
	Outputs  map[string]string
	// PolicyFindings are what the job's policies said of the plan
	// (protocol 1.3); return them with the error when one denies.
	PolicyFindings []PolicyFinding
}

// DestroyRequest asks a plugin to remove the component.
type DestroyRequest struct {
	Job    JobContext
	Config map[string]any
	Env    map[string]string
	Log    Logger
}

// DestroyResponse is the outcome of a destroy.
type DestroyResponse struct {
	ExitCode int
	Outputs  map[string]string
	// PolicyFindings are what the job's policies said of the plan
	// (protocol 1.3); return them with the error when one denies.
	PolicyFindings []PolicyFinding
}

// DriftRequest asks a plugin whether the component still matches its
// config. It must not change anything.
type DriftRequest struct {
	Job    JobContext
	Config map[string]any
	Env    map[string]string
	Log    Logger
}

// DriftResponse is the outcome of a drift check.
type DriftResponse struct {
	// Drifted reports that the component no longer matches its config.
	Drifted bool
	// Changes says what differs, for a human.
	Changes  string
	ExitCode int
	Outputs  map[string]string
	// PlannedChanges are what an apply would change to repair the drift,
	// one per object (protocol 1.2).
	PlannedChanges []PlannedChange
}

// ImportRequest asks a plugin to adopt an existing resource.
type ImportRequest struct {
	Job    JobContext
	Config map[string]any
	Env    map[string]string
	// ID names the resource to adopt, in the type's own form; never
	// empty (the host refuses an import without one).
	ID  string
	Log Logger
}

// ImportResponse is the outcome of an import.
type ImportResponse struct {
	ExitCode int
	Outputs  map[string]string
	// State, when not nil, is kept as the component's state (SaveState,
	// with the plugin's state version) once Import succeeds; a plugin
	// that keeps its state otherwise (Terraform's own state file) leaves
	// it nil.
	State any
	// PolicyFindings are what the job's policies said of the import
	// (agents from the release that evaluates policies on imports hand
	// them over); return them with the error when one denies.
	PolicyFindings []PolicyFinding
}

// OutputsSchemaRequest asks for the schema of a plugin's outputs.
type OutputsSchemaRequest struct{}

// OutputsSchemaResponse holds the JSON Schema of a plugin's outputs.
type OutputsSchemaResponse struct {
	Schema string
}

// RunRequest is what the host sends for plan, apply, destroy and drift.
type RunRequest struct {
	Job    JobContext
	Config map[string]any
	Env    map[string]string
	// ImportID names the resource an OpImport adopts.
	ImportID string
}

// Result is the final outcome of plan, apply or destroy as the host sees it.
type Result struct {
	ExitCode int
	// Error is set when the operation failed.
	Error   string
	Outputs map[string]string
	// Changes summarises a plan or a drift.
	Changes string
	// Drifted is the verdict of a drift check.
	Drifted bool
	// PlannedChanges are a plan's or a drift's changes, as the plugin
	// sent them (sensitive values masked).
	PlannedChanges []PlannedChange
	// PolicyFindings are what the policies said of a plan, apply or
	// destroy (protocol 1.3).
	PolicyFindings []PolicyFinding
}

// Err returns the operation's failure as an error, or nil if it succeeded.
func (r *Result) Err() error {
	if r == nil || r.Error == "" {
		return nil
	}
	return errors.New(r.Error)
}
