package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	pluginv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/plugin/v1"
)

type structpbStruct = structpb.Struct

// Client is the host's typed view of a running plugin.
//
// Call [Client.Negotiate] first: it agrees on a protocol version and learns
// the plugin's capabilities, and Run then refuses operations the plugin
// does not have with a clear error instead of a transport one.
type Client struct {
	rpc pluginv1.ComponentPluginServiceClient

	mu   sync.Mutex
	desc *Description
}

// NewClient returns a Client that calls the plugin on cc.
func NewClient(cc grpc.ClientConnInterface) *Client {
	return &Client{rpc: pluginv1.NewComponentPluginServiceClient(cc)}
}

// Negotiate describes the plugin, sending the host's protocol version, and
// agrees on the version to use: the lower minor of the same major. A
// plugin of another major version gets an *[IncompatibleError] naming both
// versions. A plugin of protocol 1.0, which predates negotiation, counts as
// 1.0 with the destroy capability.
func (c *Client) Negotiate(ctx context.Context) (*Description, error) {
	r, err := c.rpc.Describe(ctx, &pluginv1.DescribeRequest{HostProtocol: versionToProto(Protocol)})
	if err != nil {
		return nil, err
	}
	d := describeFromProto(r)
	if d.Negotiated, err = negotiate(Protocol, d.Protocol, d.Type); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.desc = d
	c.mu.Unlock()
	return d, nil
}

// Describe asks the plugin what it is, without negotiating.
func (c *Client) Describe(ctx context.Context) (*Description, error) {
	r, err := c.rpc.Describe(ctx, &pluginv1.DescribeRequest{HostProtocol: versionToProto(Protocol)})
	if err != nil {
		return nil, err
	}
	return describeFromProto(r), nil
}

// Validate asks the plugin to check config. Diagnostics name each
// offending field.
func (c *Client) Validate(ctx context.Context, config map[string]any) (*ValidateResponse, error) {
	cfg, err := toStruct(config)
	if err != nil {
		return nil, err
	}
	r, err := c.rpc.Validate(ctx, &pluginv1.ValidateRequest{Config: cfg})
	if err != nil {
		return nil, err
	}
	out := &ValidateResponse{}
	for _, d := range r.GetDiagnostics() {
		out.Diagnostics = append(out.Diagnostics, Diagnostic{Field: d.GetField(), Message: d.GetMessage(), Hint: d.GetHint(), Severity: d.GetSeverity()})
	}
	return out, nil
}

// UnsupportedError says that a plugin lacks an optional operation.
type UnsupportedError struct {
	Type, Op     string
	Capabilities []string
}

func (e *UnsupportedError) Error() string {
	has := "none"
	if len(e.Capabilities) > 0 {
		has = strings.Join(e.Capabilities, ", ")
	}
	name := "this plugin"
	if e.Type != "" {
		name = fmt.Sprintf("component type %q", e.Type)
	}
	return fmt.Sprintf("%s does not implement %s (its optional capabilities: %s)", name, e.Op, has)
}

// supports checks, after Negotiate, that the plugin has what op needs.
func (c *Client) supports(op string) error {
	c.mu.Lock()
	d := c.desc
	c.mu.Unlock()
	if d == nil {
		return nil // not negotiated: let the plugin answer
	}
	capName := ""
	switch op {
	case OpDestroy:
		capName = CapDestroy
	case OpPlanDestroy:
		capName = CapPlanDestroy
	case OpImport:
		capName = CapImport
		if d.Negotiated.Less(ProtocolVersion{1, 4}) {
			return &UnsupportedError{Type: d.Type, Op: op + fmt.Sprintf(" (protocol %s has no import; it needs 1.4)", d.Negotiated), Capabilities: d.Capabilities}
		}
	case OpDrift:
		capName = CapDrift
		if d.Negotiated.Less(ProtocolVersion{1, 1}) {
			return &UnsupportedError{Type: d.Type, Op: op + fmt.Sprintf(" (protocol %s has no drift; it needs 1.1)", d.Negotiated), Capabilities: d.Capabilities}
		}
	}
	if capName != "" && !d.Has(capName) {
		return &UnsupportedError{Type: d.Type, Op: op, Capabilities: d.Capabilities}
	}
	return nil
}

// Run performs op (OpPlan, OpApply, OpDestroy or OpDrift) and calls onLog,
// if not nil, for every log line as it arrives, from the calling goroutine.
//
// A failed operation is reported in the Result (Error and ExitCode) with a
// nil error; Run returns an error only when the call itself failed, or, as
// an *[UnsupportedError], when the plugin lacks op.
func (c *Client) Run(ctx context.Context, op string, req *RunRequest, onLog func(LogEvent)) (*Result, error) {
	if req == nil {
		req = &RunRequest{}
	}
	switch op {
	case OpPlan, OpApply, OpDestroy, OpDrift, OpPlanDestroy:
	case OpImport:
		if strings.TrimSpace(req.ImportID) == "" {
			return nil, errors.New("import: no import id (it names the existing resource to adopt)")
		}
	default:
		return nil, fmt.Errorf("unknown operation %q (want %s, %s, %s, %s, %s or %s)", op, OpPlan, OpApply, OpDestroy, OpDrift, OpPlanDestroy, OpImport)
	}
	if err := c.supports(op); err != nil {
		return nil, err
	}
	cfg, err := toStruct(req.Config)
	if err != nil {
		return nil, err
	}
	job := jobToProto(req.Job)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var res *Result
	switch op {
	case OpPlan, OpPlanDestroy:
		job.Destroy = op == OpPlanDestroy
		var s grpc.ServerStreamingClient[pluginv1.PlanResponse]
		if s, err = c.rpc.Plan(ctx, &pluginv1.PlanRequest{Job: job, Config: cfg, Env: req.Env}); err == nil {
			res, err = drain(op, s, onLog)
		}
	case OpApply:
		var s grpc.ServerStreamingClient[pluginv1.ApplyResponse]
		if s, err = c.rpc.Apply(ctx, &pluginv1.ApplyRequest{Job: job, Config: cfg, Env: req.Env}); err == nil {
			res, err = drain(op, s, onLog)
		}
	case OpDestroy:
		var s grpc.ServerStreamingClient[pluginv1.DestroyResponse]
		if s, err = c.rpc.Destroy(ctx, &pluginv1.DestroyRequest{Job: job, Config: cfg, Env: req.Env}); err == nil {
			res, err = drain(op, s, onLog)
		}
	case OpDrift:
		var s grpc.ServerStreamingClient[pluginv1.DriftResponse]
		if s, err = c.rpc.Drift(ctx, &pluginv1.DriftRequest{Job: job, Config: cfg, Env: req.Env}); err == nil {
			res, err = drain(op, s, onLog)
		}
	case OpImport:
		var s grpc.ServerStreamingClient[pluginv1.ImportResponse]
		if s, err = c.rpc.Import(ctx, &pluginv1.ImportRequest{Job: job, Config: cfg, Env: req.Env, ImportId: req.ImportID}); err == nil {
			res, err = drain(op, s, onLog)
		}
	}
	if status.Code(err) == codes.Unimplemented {
		// Not negotiated, or the plugin announced what it does not serve.
		return nil, &UnsupportedError{Op: op}
	}
	return res, err
}

// event is what the operation responses have in common.
type event interface {
	GetLog() *pluginv1.LogEvent
	GetResult() *pluginv1.Result
}

// drain reads a response stream up to its result.
func drain[R any, P interface {
	*R
	event
}](op string, s grpc.ServerStreamingClient[R], onLog func(LogEvent)) (*Result, error) {
	for {
		msg, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("plugin ended %s without a result", op)
		}
		if err != nil {
			return nil, err
		}
		ev := P(msg)
		if l := ev.GetLog(); l != nil {
			if onLog != nil {
				onLog(LogEvent{Time: l.GetTime().AsTime(), Stream: Stream(l.GetStream()), Text: l.GetText()})
			}
			continue
		}
		if r := ev.GetResult(); r != nil {
			return &Result{
				ExitCode:       int(r.GetExitCode()),
				Error:          r.GetError(),
				Outputs:        r.GetOutputs(),
				Changes:        r.GetChanges(),
				Drifted:        r.GetDrifted(),
				PlannedChanges: plannedFromProto(r.GetPlannedChanges()),
				PolicyFindings: findingsFromProto(r.GetPolicyFindings()),
			}, nil
		}
	}
}

func toStruct(m map[string]any) (*structpb.Struct, error) {
	if m == nil {
		return &structpb.Struct{}, nil
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	return s, nil
}

func jobToProto(j JobContext) *pluginv1.JobContext {
	return &pluginv1.JobContext{
		JobId:          j.JobID,
		InstallId:      j.InstallID,
		Attempt:        int32(j.Attempt),
		WorkDir:        j.WorkDir,
		TimeoutSeconds: int64(j.Timeout / time.Second),
		StateDir:       j.StateDir,
		PlanDir:        j.PlanDir,

		ApprovedPlanDigest: j.ApprovedPlanDigest,
		Component:          j.Component,
		Mode:               j.Mode,
		Policies:           policiesToProto(j.Policies),
	}
}

func jobFromProto(j *pluginv1.JobContext) JobContext {
	return JobContext{
		JobID:     j.GetJobId(),
		InstallID: j.GetInstallId(),
		Attempt:   int(j.GetAttempt()),
		WorkDir:   j.GetWorkDir(),
		StateDir:  j.GetStateDir(),
		Timeout:   time.Duration(j.GetTimeoutSeconds()) * time.Second,
		PlanDir:   j.GetPlanDir(),

		ApprovedPlanDigest: j.GetApprovedPlanDigest(),
		Component:          j.GetComponent(),
		Mode:               j.GetMode(),
		Policies:           policiesFromProto(j.GetPolicies()),
	}
}

func versionToProto(v ProtocolVersion) *pluginv1.ProtocolVersion {
	return &pluginv1.ProtocolVersion{Major: int32(v.Major), Minor: int32(v.Minor)}
}

func versionFromProto(v *pluginv1.ProtocolVersion) ProtocolVersion {
	return ProtocolVersion{Major: int(v.GetMajor()), Minor: int(v.GetMinor())}
}

// describeFromProto reads a description. A 1.0 plugin sends no protocol
// and no capabilities: it speaks the lowest major it lists, minor 0, and
// serves destroy, which 1.0 required.
func describeFromProto(r *pluginv1.DescribeResponse) *Description {
	d := &Description{
		Type: r.GetType(), Version: r.GetVersion(),
		ConfigSchema: r.GetConfigSchema(), OutputsSchema: r.GetOutputsSchema(),
		Capabilities: r.GetCapabilities(),
	}
	if p := r.GetProtocol(); p != nil {
		d.Protocol = versionFromProto(p)
	} else {
		d.Protocol = ProtocolVersion{Major: ProtocolMajor}
		if majors := r.GetProtocolVersions(); len(majors) > 0 {
			d.Protocol.Major = int(majors[0])
			for _, m := range majors {
				if int(m) == ProtocolMajor {
					d.Protocol.Major = ProtocolMajor
				}
			}
		}
		d.Capabilities = []string{CapDestroy}
	}
	d.ProtocolVersions = []ProtocolVersion{d.Protocol}
	return d
}
