package sdk

import (
	"context"
	"errors"
	"time"
)

// ProtocolVersion is the plugin protocol version this SDK speaks.
const ProtocolVersion = 1

// Operation names accepted by [Client.Run].
const (
	OpPlan    = "plan"
	OpApply   = "apply"
	OpDestroy = "destroy"
)

// Plugin is what a component type implements.
//
// Plan, Apply and Destroy may log through the request's Log while they run;
// each line reaches the agent immediately. A non-nil error means the
// operation failed; its message becomes the result's error and, if the
// response's ExitCode is zero, the exit code becomes 1.
type Plugin interface {
	Describe(ctx context.Context, req *DescribeRequest) (*DescribeResponse, error)
	Validate(ctx context.Context, req *ValidateRequest) (*ValidateResponse, error)
	Plan(ctx context.Context, req *PlanRequest) (*PlanResponse, error)
	Apply(ctx context.Context, req *ApplyRequest) (*ApplyResponse, error)
	Destroy(ctx context.Context, req *DestroyRequest) (*DestroyResponse, error)
}

// JobContext tells a plugin which job it runs and where.
type JobContext struct {
	JobID     string
	InstallID string
	Attempt   int
	// WorkDir is a directory the plugin owns for this job.
	WorkDir string
	// Timeout is the job's time limit; zero means none was given.
	Timeout time.Duration
}

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
type DescribeRequest struct{}

// DescribeResponse says what a plugin is.
type DescribeResponse struct {
	Type             string `json:"type"`
	Version          string `json:"version"`
	ProtocolVersions []int  `json:"protocol_versions"`
	// ConfigSchema is a JSON Schema of the component config.
	ConfigSchema string `json:"config_schema,omitempty"`
}

// ValidateRequest asks a plugin to check a component config.
type ValidateRequest struct {
	Config map[string]any
}

// Diagnostic is one problem found in a config.
type Diagnostic struct {
	// Field is the path of the offending config field, such as "steps[0].script".
	Field   string
	Message string
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
}

// RunRequest is what the host sends for plan, apply and destroy.
type RunRequest struct {
	Job    JobContext
	Config map[string]any
	Env    map[string]string
}

// Result is the final outcome of plan, apply or destroy as the host sees it.
type Result struct {
	ExitCode int
	// Error is set when the operation failed.
	Error   string
	Outputs map[string]string
	// Changes summarises a plan.
	Changes string
}

// Err returns the operation's failure as an error, or nil if it succeeded.
func (r *Result) Err() error {
	if r == nil || r.Error == "" {
		return nil
	}
	return errors.New(r.Error)
}
