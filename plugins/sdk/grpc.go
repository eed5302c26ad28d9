package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pluginv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/plugin/v1"
)

// GRPCPlugin adapts a [Plugin] to go-plugin's gRPC transport. On the plugin
// side Impl serves requests; on the host side GRPCClient returns a *[Client].
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin

	// Impl is the plugin implementation; only the plugin side sets it.
	Impl Plugin
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the component service backed by Impl.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("sdk: GRPCPlugin has no Impl")
	}
	pluginv1.RegisterComponentPluginServiceServer(s, &server{impl: p.Impl})
	return nil
}

// GRPCClient returns a *[Client] for the plugin on the other end of c.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewClient(c), nil
}

// server implements the generated gRPC service on top of a Plugin.
type server struct {
	pluginv1.UnimplementedComponentPluginServiceServer
	impl Plugin
}

func (s *server) Describe(ctx context.Context, _ *pluginv1.DescribeRequest) (resp *pluginv1.DescribeResponse, err error) {
	defer recoverTo(&err)
	r, err := s.impl.Describe(ctx, &DescribeRequest{})
	if err != nil {
		return nil, err
	}
	return describeToProto(r), nil
}

func (s *server) Validate(ctx context.Context, req *pluginv1.ValidateRequest) (resp *pluginv1.ValidateResponse, err error) {
	defer recoverTo(&err)
	r, err := s.impl.Validate(ctx, &ValidateRequest{Config: req.GetConfig().AsMap()})
	if err != nil {
		return nil, err
	}
	out := &pluginv1.ValidateResponse{}
	if r != nil {
		for _, d := range r.Diagnostics {
			out.Diagnostics = append(out.Diagnostics, &pluginv1.Diagnostic{Field: d.Field, Message: d.Message})
		}
	}
	return out, nil
}

func (s *server) Plan(req *pluginv1.PlanRequest, stream grpc.ServerStreamingServer[pluginv1.PlanResponse]) error {
	return serveOp(stream,
		func(l *pluginv1.LogEvent) *pluginv1.PlanResponse {
			return &pluginv1.PlanResponse{Event: &pluginv1.PlanResponse_Log{Log: l}}
		},
		func(r *pluginv1.Result) *pluginv1.PlanResponse {
			return &pluginv1.PlanResponse{Event: &pluginv1.PlanResponse_Result{Result: r}}
		},
		func(ctx context.Context, log Logger) (*pluginv1.Result, error) {
			r, err := s.impl.Plan(ctx, &PlanRequest{
				Job: jobFromProto(req.GetJob()), Config: req.GetConfig().AsMap(), Env: req.GetEnv(), Log: log,
			})
			if r == nil {
				return &pluginv1.Result{}, err
			}
			return &pluginv1.Result{ExitCode: int32(r.ExitCode), Outputs: r.Outputs, Changes: r.Changes}, err
		})
}

func (s *server) Apply(req *pluginv1.ApplyRequest, stream grpc.ServerStreamingServer[pluginv1.ApplyResponse]) error {
	return serveOp(stream,
		func(l *pluginv1.LogEvent) *pluginv1.ApplyResponse {
			return &pluginv1.ApplyResponse{Event: &pluginv1.ApplyResponse_Log{Log: l}}
		},
		func(r *pluginv1.Result) *pluginv1.ApplyResponse {
			return &pluginv1.ApplyResponse{Event: &pluginv1.ApplyResponse_Result{Result: r}}
		},
		func(ctx context.Context, log Logger) (*pluginv1.Result, error) {
			r, err := s.impl.Apply(ctx, &ApplyRequest{
				Job: jobFromProto(req.GetJob()), Config: req.GetConfig().AsMap(), Env: req.GetEnv(), Log: log,
			})
			if r == nil {
				return &pluginv1.Result{}, err
			}
			return &pluginv1.Result{ExitCode: int32(r.ExitCode), Outputs: r.Outputs}, err
		})
}

func (s *server) Destroy(req *pluginv1.DestroyRequest, stream grpc.ServerStreamingServer[pluginv1.DestroyResponse]) error {
	return serveOp(stream,
		func(l *pluginv1.LogEvent) *pluginv1.DestroyResponse {
			return &pluginv1.DestroyResponse{Event: &pluginv1.DestroyResponse_Log{Log: l}}
		},
		func(r *pluginv1.Result) *pluginv1.DestroyResponse {
			return &pluginv1.DestroyResponse{Event: &pluginv1.DestroyResponse_Result{Result: r}}
		},
		func(ctx context.Context, log Logger) (*pluginv1.Result, error) {
			r, err := s.impl.Destroy(ctx, &DestroyRequest{
				Job: jobFromProto(req.GetJob()), Config: req.GetConfig().AsMap(), Env: req.GetEnv(), Log: log,
			})
			if r == nil {
				return &pluginv1.Result{}, err
			}
			return &pluginv1.Result{ExitCode: int32(r.ExitCode), Outputs: r.Outputs}, err
		})
}

// serveOp runs one streaming operation: it hands fn a Logger that sends log
// events on stream, then sends the final result built from fn's return.
func serveOp[R any](
	stream grpc.ServerStreamingServer[R],
	wrapLog func(*pluginv1.LogEvent) *R,
	wrapResult func(*pluginv1.Result) *R,
	fn func(context.Context, Logger) (*pluginv1.Result, error),
) error {
	log := &streamLogger{send: func(e *pluginv1.LogEvent) error { return stream.Send(wrapLog(e)) }}
	res, err := func() (res *pluginv1.Result, err error) {
		defer recoverTo(&err)
		return fn(stream.Context(), log)
	}()
	// A plugin may leak goroutines that keep logging; they must not write
	// to a stream that is finished.
	log.close()
	if res == nil {
		res = &pluginv1.Result{}
	}
	if err != nil {
		res.Error = validUTF8(err.Error())
		if res.ExitCode == 0 {
			res.ExitCode = 1
		}
	}
	return stream.Send(wrapResult(res))
}

// streamLogger is the Logger given to plugin operations.
type streamLogger struct {
	mu     sync.Mutex
	closed bool
	send   func(*pluginv1.LogEvent) error
}

func (l *streamLogger) Stdout(text string) { l.emit(StreamStdout, text) }
func (l *streamLogger) Stderr(text string) { l.emit(StreamStderr, text) }
func (l *streamLogger) System(text string) { l.emit(StreamSystem, text) }

func (l *streamLogger) emit(s Stream, text string) {
	e := &pluginv1.LogEvent{Time: timestamppb.Now(), Stream: int32(s), Text: validUTF8(text)}
	// gRPC streams allow one sender at a time, and the order of lines matters.
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	// A failed send means the host has gone; the operation's context is
	// cancelled as well, so there is nothing useful to do with the error.
	_ = l.send(e)
}

func (l *streamLogger) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// validUTF8 makes text safe for a proto3 string field, which must be UTF-8;
// script output need not be.
func validUTF8(text string) string {
	return strings.ToValidUTF8(text, "\uFFFD")
}

// recoverTo turns a panic in plugin code into an error, so that a bug in one
// operation is reported as a failure rather than as a crashed plugin.
func recoverTo(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("plugin panic: %v", r)
	}
}

// Client is the host's typed view of a running plugin.
type Client struct {
	rpc pluginv1.ComponentPluginServiceClient
}

// NewClient returns a Client that calls the plugin on cc.
func NewClient(cc grpc.ClientConnInterface) *Client {
	return &Client{rpc: pluginv1.NewComponentPluginServiceClient(cc)}
}

// Describe asks the plugin what it is.
func (c *Client) Describe(ctx context.Context) (*DescribeResponse, error) {
	r, err := c.rpc.Describe(ctx, &pluginv1.DescribeRequest{})
	if err != nil {
		return nil, err
	}
	return describeFromProto(r), nil
}

// Validate asks the plugin to check config.
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
		out.Diagnostics = append(out.Diagnostics, Diagnostic{Field: d.GetField(), Message: d.GetMessage()})
	}
	return out, nil
}

// Run performs op (OpPlan, OpApply or OpDestroy) and calls onLog, if not
// nil, for every log line as it arrives, from the calling goroutine.
//
// A failed operation is reported in the Result (Error and ExitCode) with a
// nil error; Run returns an error only when the call itself failed.
func (c *Client) Run(ctx context.Context, op string, req *RunRequest, onLog func(LogEvent)) (*Result, error) {
	if req == nil {
		req = &RunRequest{}
	}
	cfg, err := toStruct(req.Config)
	if err != nil {
		return nil, err
	}
	job := jobToProto(req.Job)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	switch op {
	case OpPlan:
		s, err := c.rpc.Plan(ctx, &pluginv1.PlanRequest{Job: job, Config: cfg, Env: req.Env})
		if err != nil {
			return nil, err
		}
		return drain(op, s, onLog)
	case OpApply:
		s, err := c.rpc.Apply(ctx, &pluginv1.ApplyRequest{Job: job, Config: cfg, Env: req.Env})
		if err != nil {
			return nil, err
		}
		return drain(op, s, onLog)
	case OpDestroy:
		s, err := c.rpc.Destroy(ctx, &pluginv1.DestroyRequest{Job: job, Config: cfg, Env: req.Env})
		if err != nil {
			return nil, err
		}
		return drain(op, s, onLog)
	}
	return nil, fmt.Errorf("unknown operation %q (want %s, %s or %s)", op, OpPlan, OpApply, OpDestroy)
}

// event is what the plan, apply and destroy responses have in common.
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
				ExitCode: int(r.GetExitCode()),
				Error:    r.GetError(),
				Outputs:  r.GetOutputs(),
				Changes:  r.GetChanges(),
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
	}
}

func jobFromProto(j *pluginv1.JobContext) JobContext {
	return JobContext{
		JobID:     j.GetJobId(),
		InstallID: j.GetInstallId(),
		Attempt:   int(j.GetAttempt()),
		WorkDir:   j.GetWorkDir(),
		Timeout:   time.Duration(j.GetTimeoutSeconds()) * time.Second,
	}
}

func describeToProto(r *DescribeResponse) *pluginv1.DescribeResponse {
	out := &pluginv1.DescribeResponse{}
	if r == nil {
		return out
	}
	out.Type, out.Version, out.ConfigSchema = r.Type, r.Version, r.ConfigSchema
	for _, v := range r.ProtocolVersions {
		out.ProtocolVersions = append(out.ProtocolVersions, int32(v))
	}
	return out
}

func describeFromProto(r *pluginv1.DescribeResponse) *DescribeResponse {
	out := &DescribeResponse{Type: r.GetType(), Version: r.GetVersion(), ConfigSchema: r.GetConfigSchema()}
	for _, v := range r.GetProtocolVersions() {
		out.ProtocolVersions = append(out.ProtocolVersions, int(v))
	}
	return out
}
