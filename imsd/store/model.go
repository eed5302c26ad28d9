package store

import (
	"encoding/json"
	"maps"
	"slices"
	"time"
)

// Role is what an operator API token may do.
type Role string

// The roles.
const (
	RoleAdmin    Role = "admin"
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
	RoleSupport  Role = "support"
)

// JobState is where a job is in its life.
type JobState string

// The job states. Succeeded, failed, cancelled, timed out and refused are
// terminal: a job in one of them never changes again. Refused is a job
// its agent would not run because the permission mode it needs is turned
// off in the customer's account; it is never retried.
const (
	JobQueued    JobState = "queued"
	JobAssigned  JobState = "assigned"
	JobRunning   JobState = "running"
	JobSucceeded JobState = "succeeded"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
	JobTimedOut  JobState = "timed_out"
	JobRefused   JobState = "refused"
)

// Terminal reports whether s is a final state.
func (s JobState) Terminal() bool {
	switch s {
	case JobSucceeded, JobFailed, JobCancelled, JobTimedOut, JobRefused:
		return true
	}
	return false
}

// Mode is a permission mode: what a job needs the customer to allow.
type Mode string

// The permission modes.
const (
	ModeProvision   Mode = "provision"
	ModeMaintenance Mode = "maintenance"
	ModeDeprovision Mode = "deprovision"
	ModeBreakGlass  Mode = "break_glass"
)

// Valid reports whether m is one of the permission modes.
func (m Mode) Valid() bool {
	switch m {
	case ModeProvision, ModeMaintenance, ModeDeprovision, ModeBreakGlass:
		return true
	}
	return false
}

// Permissions is a customer's permission state as their agent reports it.
// imsd only records it: the customer sets it on the agent's side.
type Permissions struct {
	Provision   bool `json:"provision"`
	Maintenance bool `json:"maintenance"`
	Deprovision bool `json:"deprovision"`
	BreakGlass  bool `json:"break_glass"`
	// DisabledAll is the kill switch: every job is refused.
	DisabledAll bool `json:"disabled_all,omitempty"`
	// ChangedAt is when the customer last changed it (zero: defaults).
	ChangedAt time.Time `json:"changed_at,omitzero"`
	// Windows are the customer's maintenance windows (agentd window set);
	// imsd holds window-bound jobs while none is open.
	Windows []string `json:"windows,omitempty"`
	// Telemetry is the customer's telemetry setting (agentd telemetry
	// set): what of the app's telemetry their agent forwards.
	Telemetry TelemetrySetting `json:"telemetry,omitzero"`
}

// TelemetrySetting is the customer's telemetry setting as the agent
// reported it; imsd cannot change it.
type TelemetrySetting struct {
	// Mode is off (""), metrics or metrics,logs.
	Mode         string   `json:"mode,omitempty"`
	RedactLabels []string `json:"redact_labels,omitempty"`
	RedactFields []string `json:"redact_fields,omitempty"`
	DropMetrics  []string `json:"drop_metrics,omitempty"`
}

// Equal reports whether t and o say the same.
func (t TelemetrySetting) Equal(o TelemetrySetting) bool {
	return t.Mode == o.Mode && slices.Equal(t.RedactLabels, o.RedactLabels) && slices.Equal(t.RedactFields, o.RedactFields) &&
		slices.Equal(t.DropMetrics, o.DropMetrics)
}

// Equal reports whether p and q say the same (times compared as instants).
func (p Permissions) Equal(q Permissions) bool {
	return p.Provision == q.Provision && p.Maintenance == q.Maintenance && p.Deprovision == q.Deprovision &&
		p.BreakGlass == q.BreakGlass && p.DisabledAll == q.DisabledAll && p.ChangedAt.Equal(q.ChangedAt) &&
		slices.Equal(p.Windows, q.Windows) && p.Telemetry.Equal(q.Telemetry)
}

// APIToken is an operator credential. Only the SHA-256 of its secret is stored.
type APIToken struct {
	ID        string
	Name      string
	Role      Role
	CreatedAt time.Time
	// Scope is what the role is granted on: "" (everything),
	// install:NAME, app:NAME or selector:SELECTOR (access.ParseScope).
	Scope string
	// ExpiresAt is when the token stops working; zero: never.
	ExpiresAt time.Time
	// LastUsedAt is when the token was last used (updated at most about
	// once a minute); zero: never.
	LastUsedAt time.Time
	// CreatedBy is the actor that created the token.
	CreatedBy string
}

// App is a vendor application. The config format arrives in a later issue;
// for now an app is a name.
type App struct {
	ID          string
	Name        string
	Description string
	CreatedAt   time.Time
}

// Install is one instance of an app in one customer account.
type Install struct {
	ID     string
	AppID  string
	Name   string
	Inputs map[string]string
	// Labels are key=value pairs (Kubernetes' syntax) that selectors pick
	// installs by (internal/labels).
	Labels    map[string]string
	CreatedAt time.Time
	// State is where the install is in its lifecycle; workflows move it.
	State InstallState
	// AppRevision is the app revision the install last applied in full
	// (0: none yet).
	AppRevision int64
	Settings    InstallSettings
	// Health is the result of the install's latest health-check action run.
	Health InstallHealth
}

// HealthState is what an install's latest health check said.
type HealthState string

// The health states; "" means no health check has ended yet.
const (
	HealthUnknown   HealthState = ""
	HealthHealthy   HealthState = "healthy"
	HealthUnhealthy HealthState = "unhealthy"
)

// InstallHealth is the result of an install's latest health-check action
// run: when it ended, and for an unhealthy install the run's error.
type InstallHealth struct {
	State      HealthState
	At         time.Time
	Error      string
	WorkflowID string
}

// InstallState is where an install is in its lifecycle.
type InstallState string

// The install states.
const (
	InstallNew            InstallState = "new"
	InstallProvisioning   InstallState = "provisioning"
	InstallActive         InstallState = "active"
	InstallFailed         InstallState = "failed"
	InstallDeprovisioning InstallState = "deprovisioning"
	InstallDeprovisioned  InstallState = "deprovisioned"
)

// InstallSettings are an install's own settings beside its inputs.
type InstallSettings struct {
	// Parallelism caps how many steps of one workflow run at once; 0 means
	// the app's install_defaults.parallelism.
	Parallelism int `json:"parallelism,omitempty"`
	// RequireApproval overrides install_defaults.require_approval when set.
	RequireApproval *bool `json:"require_approval,omitempty"`
	// Overrides are per-component config merged over the app's, by
	// component name.
	Overrides map[string]map[string]any `json:"overrides,omitempty"`
	// Source is the installs/*.toml file the install is managed from, or "".
	Source string `json:"source,omitempty"`
	// Windows are the vendor's maintenance windows of the install
	// (installs/NAME.toml window =, internal/window's syntax): imsd holds
	// window-bound jobs while none is open. None: no restriction.
	Windows []string `json:"windows,omitempty"`
}

// EnrollmentToken is a single-use, expiring credential that lets one agent
// enrol for one install. Only the SHA-256 of its secret is stored.
type EnrollmentToken struct {
	Hash      string
	InstallID string
	ExpiresAt time.Time
	CreatedAt time.Time
}

// Agent is an enrolled agentd, bound to exactly one install by its Ed25519
// public key.
type Agent struct {
	ID         string
	InstallID  string
	PublicKey  []byte
	Hostname   string
	Version    string
	EnrolledAt time.Time
	// LastSeenAt is zero until the agent first connects.
	LastSeenAt time.Time
	// DisconnectedAt is when the replica holding the agent's last stream
	// recorded its end; zero while a stream is open (or its replica died
	// before it could say).
	DisconnectedAt time.Time
	// ConflictAt is when imsd last saw two processes share this agent's
	// identity (zero: never), and Conflict what it saw.
	ConflictAt time.Time
	Conflict   string
	// Permissions is the customer's permission state the agent last
	// reported (nil: never), at PermissionsAt.
	Permissions   *Permissions
	PermissionsAt time.Time
	// Build, at enrolment, asks for the vendor's build agent: the token
	// must be a build agent token (and an install's token otherwise).
	// Not stored: a build agent is one of the vendor install.
	Build bool
	// Stack is what the agent last reported of its install stack (nil:
	// never, or it runs without one).
	Stack *StackReport
	// Health is the agent's health as the health sweeper last recorded
	// it, since HealthSince (zero: since enrolment), for HealthReason.
	Health       Health
	HealthSince  time.Time
	HealthReason string
	// ConnectedAt is when its latest stream said hello (zero: never).
	ConnectedAt time.Time
	// Condition is what it last reported of its own condition (nil: never).
	Condition *AgentCondition
	// AckedKeyID is imsd's signing key the agent last acknowledged
	// trusting, at AckedKeyAt ("": none yet).
	AckedKeyID string
	AckedKeyAt time.Time
	// RevokedAt is when the agent was revoked (zero: it is not), for
	// RevokedReason.
	RevokedAt     time.Time
	RevokedReason string
	// NextPublicKey is the agent's next key while a rotation of its own
	// key is under way (nil: none): accepted beside PublicKey until the
	// agent's first hello under it. KeyRotatedAt is when its last
	// rotation completed (zero: never).
	NextPublicKey []byte
	KeyRotatedAt  time.Time
	// Update is the update policy and latest update decision the agent
	// last reported (nil: never); UpdateOffer the agent release last
	// offered to it (nil: none).
	Update      *AgentUpdate
	UpdateOffer *UpdateOffer
	// Plugins are the plugin releases the agent last reported pinned, with
	// its verification of each (nil: never reported).
	Plugins *PluginReport
}

// PluginReport is the plugin releases an agent's pin file names, as the
// agent reported them at ReportedAt.
type PluginReport struct {
	Releases   []PluginRelease `json:"releases"`
	ReportedAt time.Time       `json:"reported_at"`
}

// PluginRelease is one pinned plugin release: Verdict is "verified"
// (installed, signed by KeyID), "refused" (for Reason) or "" (pinned,
// not installed yet); CheckedAt when the agent checked it.
type PluginRelease struct {
	Type      string    `json:"type"`
	Release   string    `json:"release"`
	Version   string    `json:"version,omitempty"`
	Verdict   string    `json:"verdict,omitempty"`
	KeyID     string    `json:"key_id,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	CheckedAt time.Time `json:"checked_at,omitzero"`
}

// SameReleases reports whether r and o list the same releases, their
// report times aside.
func (r PluginReport) SameReleases(o PluginReport) bool {
	return slices.EqualFunc(r.Releases, o.Releases, func(a, b PluginRelease) bool {
		return a.Type == b.Type && a.Release == b.Release && a.Version == b.Version && a.Verdict == b.Verdict &&
			a.KeyID == b.KeyID && a.Reason == b.Reason && a.CheckedAt.Equal(b.CheckedAt)
	})
}

// AgentUpdate is an agent's update policy (kept and enforced by the
// agent: agentd update policy) and its latest update decision.
type AgentUpdate struct {
	Mode   string `json:"mode"`
	Pin    string `json:"pin,omitempty"`
	Allow  string `json:"allow,omitempty"`
	Window string `json:"window,omitempty"`
	// LastKind is applied, deferred, refused, failed, confirmed or
	// rolled_back ("": none); LastCause what refused, failed, deferred or
	// rolled it back (policy, signature, download, self_check, window, ...).
	LastKind    string    `json:"last_kind,omitempty"`
	LastCause   string    `json:"last_cause,omitempty"`
	LastRelease string    `json:"last_release,omitempty"`
	LastOfferID string    `json:"last_offer_id,omitempty"`
	LastVersion string    `json:"last_version,omitempty"`
	LastReason  string    `json:"last_reason,omitempty"`
	LastAt      time.Time `json:"last_at,omitzero"`
	// ReportedAt is when imsd recorded it.
	ReportedAt time.Time `json:"reported_at"`
}

// SameReport reports whether u and o say the same, their report times
// aside; SameDecision whether their latest decisions are the same.
func (u AgentUpdate) SameReport(o AgentUpdate) bool {
	u.ReportedAt, o.ReportedAt = time.Time{}, time.Time{}
	return u.Mode == o.Mode && u.Pin == o.Pin && u.Allow == o.Allow && u.Window == o.Window && u.SameDecision(o)
}

// SameDecision: see SameReport.
func (u AgentUpdate) SameDecision(o AgentUpdate) bool {
	return u.LastKind == o.LastKind && u.LastCause == o.LastCause && u.LastRelease == o.LastRelease && u.LastOfferID == o.LastOfferID &&
		u.LastVersion == o.LastVersion && u.LastReason == o.LastReason && u.LastAt.Equal(o.LastAt)
}

// Summary is the policy in one short phrase, as install list shows it:
// manual, "pin 1.4.2", ">=1.4 <2 Sun 03:00-05:00 UTC".
func (u AgentUpdate) Summary() string {
	s := "manual"
	switch u.Mode {
	case "pin":
		s = "pin " + u.Pin
	case "allow":
		s = u.Allow
	}
	if u.Window != "" {
		s += " " + u.Window
	}
	return s
}

// UpdateOffer is an agent release imsd offers an agent (byoc agent update).
type UpdateOffer struct {
	ID        string    `json:"id"`
	Release   string    `json:"release"`
	OfferedBy string    `json:"offered_by"`
	OfferedAt time.Time `json:"offered_at"`
	// WithdrawnAt is when imsd took the offer back (zero: it stands), by
	// WithdrawnBy for WithdrawReason: the agent is told (a signed
	// withdrawal) until its report answers the offer, and drops it if it
	// has not applied it.
	WithdrawnAt    time.Time `json:"withdrawn_at,omitzero"`
	WithdrawnBy    string    `json:"withdrawn_by,omitempty"`
	WithdrawReason string    `json:"withdraw_reason,omitempty"`
}

// Withdrawn says whether imsd took the offer back.
func (o *UpdateOffer) Withdrawn() bool { return o != nil && !o.WithdrawnAt.IsZero() }

// StackReport is what an agent reports of its install stack: the
// customer-provided inputs (a non-sensitive one's value, "set" for a
// sensitive one that has a value; unset ones are missing) and the
// stack's outputs. imsd only shows it: the agent resolves the inputs.
type StackReport struct {
	Format  string            `json:"format"`
	Stack   string            `json:"stack,omitempty"`
	Inputs  map[string]string `json:"inputs,omitempty"`
	Outputs map[string]string `json:"outputs,omitempty"`
	// ReportedAt is when imsd recorded it.
	ReportedAt time.Time `json:"reported_at"`
}

// Equal reports whether r and o say the same, their times aside.
func (r StackReport) Equal(o StackReport) bool {
	return r.Format == o.Format && r.Stack == o.Stack && maps.Equal(r.Inputs, o.Inputs) && maps.Equal(r.Outputs, o.Outputs)
}

// Job is one unit of work for one install's agent, handed out under a lease.
type Job struct {
	ID            string
	InstallID     string
	ComponentType string
	Operation     string
	// Config is the component config as a JSON object.
	Config      []byte
	State       JobState
	Attempt     int
	MaxAttempts int
	Timeout     time.Duration
	// FencingToken changes with every assignment; every write back must
	// carry the current one.
	FencingToken    int64
	AgentID         string
	LeaseDeadline   time.Time
	CancelRequested bool
	CancelReason    string
	CreatedAt       time.Time
	StartedAt       time.Time
	EndedAt         time.Time
	ExitCode        int
	Error           string
	Outputs         map[string]string
	CreatedBy       string
	// Mode is the permission mode the job needs ("" when enqueued means
	// maintenance).
	Mode Mode
	// Component is the name of the install's component the job is for
	// (a workflow step's component); empty for a job of no component.
	Component string
	// PlannedChanges are what a plan or drift check found to change.
	PlannedChanges []PlannedChange
	// PlanDigest is the digest of the plan the job made, as its agent
	// reported it (rpc/agentproto.PlanDigest).
	PlanDigest string
	// WindowBound marks a job (of a release) that may run only while the
	// install's maintenance windows are open: imsd holds it until the
	// vendor's and the customer's are (ClaimJobsHolding), and the agent
	// refuses it outside the customer's. It is signed.
	WindowBound bool
	// ApprovedPlanDigest is, on the apply of an approved plan, the digest
	// the approval bound: the agent applies only a fresh plan with it.
	ApprovedPlanDigest string
	// PolicyFindings are what the job's policies said of its plan.
	PolicyFindings []PolicyFinding
	// ReleaseID is the release whose workflow made the job, if any.
	ReleaseID string
}

// PolicyFinding is one message of a policy's deny or warn rule, as the
// agent reported it.
type PolicyFinding struct {
	// Policy is the policy's file; Source "vendor" or "customer".
	Policy string `json:"policy"`
	Source string `json:"source"`
	// Level is "deny" or "warn".
	Level   string `json:"level"`
	Message string `json:"message"`
}

// PlannedChange is one change a plan would make to one object, as the
// agent reported it.
type PlannedChange struct {
	Address string `json:"address"`
	// Action is "create", "update", "delete" or "replace".
	Action string `json:"action"`
	// Before and After are JSON values; nil for none.
	Before  json.RawMessage `json:"before,omitempty"`
	After   json.RawMessage `json:"after,omitempty"`
	Summary string          `json:"summary,omitempty"`
}

// Lease names a job an agent holds and the fencing token it holds it with.
type Lease struct {
	JobID        string
	FencingToken int64
}

// Writer identifies who writes back to a job: the agent and the fencing
// token of its lease.
type Writer struct {
	AgentID      string
	FencingToken int64
}

// Result is how a job ended on its agent.
type Result struct {
	State          JobState // one of the terminal states
	ExitCode       int
	Error          string
	Outputs        map[string]string
	PlannedChanges []PlannedChange
	// PlanDigest is the digest of the plan the job made.
	PlanDigest     string
	PolicyFindings []PolicyFinding
	// Drifted is a drift check's verdict (ignored for other jobs).
	Drifted bool
	// Verifications are what the agent's supply-chain policy verified
	// of the job's artifact (stored as its component's latest).
	Verifications []ArtifactVerification
	// Build, set for a succeeded build job of the vendor install, is
	// recorded with the finish (BuildFromOutputs).
	Build *Build
	// ByIMSD is set when imsd ends the job itself, in its agent's stead:
	// an assignment it could not build (a stored config past the job
	// config limits). The audit record's actor is then imsd, not the
	// agent, whose lease the write still needs.
	ByIMSD bool
}

// LogLine is one line of a job's log. (Attempt, Seq) is unique per job, so
// a line resent after a reconnect is stored once.
type LogLine struct {
	Attempt int
	Seq     int64
	Time    time.Time
	Stream  int // 1 stdout, 2 stderr, 3 system
	Text    string
}

// JobFilter selects jobs for ListJobs.
type JobFilter struct {
	InstallID string
	// InstallIDs, when not nil, keeps only the jobs of these installs (an
	// empty list keeps none): what a label selector picked.
	InstallIDs []string
	States     []JobState
	// Limit is at most 1000; 0 means 100.
	Limit int
	// Cursor continues a listing; it is the NextCursor of the previous page.
	Cursor string
}

// ExpiredJob is a job the lease sweeper changed, and how.
type ExpiredJob struct {
	Job Job
	// Requeued is true when the job went back to the queue for another attempt.
	Requeued bool
}

// StreamMayBeOpen reports whether agent a's stream may be open on some
// replica at now: no replica recorded the end of the stream its last
// hello began, and it was heard within window. A replica writes last-seen
// at least once a lease while a stream lives (window is a lease and a few
// heartbeats); the window alone closes a stream whose replica died
// before it could record the end.
func (a Agent) StreamMayBeOpen(now time.Time, window time.Duration) bool {
	return a.DisconnectedAt.IsZero() && !a.LastSeenAt.IsZero() && now.Sub(a.LastSeenAt) < window
}
