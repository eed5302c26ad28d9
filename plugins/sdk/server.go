package sdk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/plugins/sdk/configschema"
	"github.com/byoc-dev/byoc/plugins/sdk/jobconfig"
	pluginv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/plugin/v1"
)

// GRPCPlugin adapts a [Plugin] to go-plugin's gRPC transport. On the plugin
// side Impl serves requests; on the host side GRPCClient returns a *[Client].
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin

	// Impl is the plugin implementation; only the plugin side sets it.
	Impl Plugin
	// stdioSync makes the plugin write StdioSyncLine after each call
	// (PluginMap sets it).
	stdioSync bool
	// interrupted is closed when the host interrupts the plugin (Serve's
	// SIGINT handler); nil: never.
	interrupted <-chan struct{}
	// hostLost is closed when the host's lease on the job ran out
	// (HostLeaseEnv); nil: never.
	hostLost <-chan struct{}
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the component service backed by Impl.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("sdk: GRPCPlugin has no Impl")
	}
	srv := newServer(p.Impl)
	srv.stdioSync = p.stdioSync
	srv.interrupted = p.interrupted
	srv.hostLost = p.hostLost
	pluginv1.RegisterComponentPluginServiceServer(s, srv)
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
	// stdioSync: write StdioSyncLine after each Validate and operation.
	stdioSync bool
	// interrupted: closed when the host interrupts the operations.
	interrupted <-chan struct{}
	// hostLost: closed when the host's lease on the job ran out.
	hostLost <-chan struct{}

	// The config schema is compiled once, on first use.
	schemaOnce sync.Once
	schema     *Schema
	schemaErr  error
}

func newServer(p Plugin) *server { return &server{impl: p} }

// describe builds the full description of the plugin: what the author's
// Describe says plus what the SDK knows.
func describe(ctx context.Context, p Plugin, host ProtocolVersion) (d *Description, err error) {
	defer recoverTo(&err, nil)
	r, err := p.Describe(ctx, &DescribeRequest{HostProtocol: host})
	if err != nil {
		return nil, err
	}
	if r == nil {
		r = &DescribeResponse{}
	}
	d = &Description{
		Type: r.Type, Version: r.Version, ConfigSchema: r.ConfigSchema,
		Protocol:         Protocol,
		ProtocolVersions: []ProtocolVersion{Protocol},
		Capabilities:     append([]string{}, capabilities(p)...),
	}
	// A schema declaring a key the agent takes out of every config would
	// never see its value: refused here, so describe, the agent and
	// sdktest all say so before any job runs.
	if err := jobconfig.CheckSchema(r.ConfigSchema); err != nil {
		return nil, fmt.Errorf("config schema: %w", err)
	}
	if r.EvaluatesPolicies {
		d.Capabilities = append(d.Capabilities, CapPolicy)
	}
	if o, ok := p.(OutputsSchemaProvider); ok {
		s, err := o.OutputsSchema(ctx, &OutputsSchemaRequest{})
		if err != nil {
			return nil, fmt.Errorf("outputs schema: %w", err)
		}
		if s != nil {
			d.OutputsSchema = s.Schema
		}
	}
	return d, nil
}

// configSchema returns the plugin's compiled config schema, or nil if it
// declares none.
func (s *server) configSchema(ctx context.Context) (*Schema, error) {
	s.schemaOnce.Do(func() {
		d, err := describe(ctx, s.impl, Protocol)
		if err != nil {
			s.schemaErr = fmt.Errorf("describe: %w", err)
			return
		}
		if strings.TrimSpace(d.ConfigSchema) == "" {
			return
		}
		s.schema, s.schemaErr = CompileSchema(d.ConfigSchema)
	})
	return s.schema, s.schemaErr
}

// checkConfig validates config against the schema.
func (s *server) checkConfig(ctx context.Context, config map[string]any) ([]Diagnostic, error) {
	sch, err := s.configSchema(ctx)
	if err != nil || sch == nil {
		return nil, err
	}
	return sch.Validate(config), nil
}

func (s *server) Describe(ctx context.Context, req *pluginv1.DescribeRequest) (*pluginv1.DescribeResponse, error) {
	d, err := describe(ctx, s.impl, versionFromProto(req.GetHostProtocol()))
	if err != nil {
		return nil, err
	}
	out := &pluginv1.DescribeResponse{
		Type: d.Type, Version: d.Version, ConfigSchema: d.ConfigSchema, OutputsSchema: d.OutputsSchema,
		Protocol:     versionToProto(d.Protocol),
		Capabilities: d.Capabilities,
	}
	for _, v := range d.ProtocolVersions {
		out.ProtocolVersions = append(out.ProtocolVersions, int32(v.Major))
	}
	return out, nil
}

func (s *server) Validate(ctx context.Context, req *pluginv1.ValidateRequest) (resp *pluginv1.ValidateResponse, err error) {
	defer s.syncStdio()
	defer recoverTo(&err, nil)
	config := req.GetConfig().AsMap()
	diags, err := s.checkConfig(ctx, config)
	if err != nil {
		return nil, err
	}
	// The plugin's own checks run even when the schema found errors, so
	// an author sees every problem at once; a Validate that cannot cope
	// with a config its schema refuses (an error or a panic) adds nothing
	// to the schema's diagnostics then.
	r, verr := s.validate(ctx, config)
	switch {
	case verr != nil && len(configschema.Errors(diags)) == 0:
		return nil, verr
	case verr == nil && r != nil:
		// Where the schema found a field wrong, its word stands: a
		// plugin checking the same in Validate would say it twice.
		schemaErrs := configschema.Errors(diags)
		for _, d := range r.Diagnostics {
			if !slices.ContainsFunc(schemaErrs, func(e Diagnostic) bool { return e.Field == d.Field }) {
				diags = append(diags, d)
			}
		}
	}
	out := &pluginv1.ValidateResponse{}
	for _, d := range diags {
		out.Diagnostics = append(out.Diagnostics, &pluginv1.Diagnostic{Field: d.Field, Message: d.Message, Hint: d.Hint, Severity: d.Severity})
	}
	return out, nil
}

// validate calls the plugin's Validate, a panic made an error.
func (s *server) validate(ctx context.Context, config map[string]any) (r *ValidateResponse, err error) {
	defer recoverTo(&err, nil)
	return s.impl.Validate(ctx, &ValidateRequest{Config: config})
}

// opRequest is what the plan, apply, destroy and drift requests share.
type opRequest interface {
	GetJob() *pluginv1.JobContext
	GetConfig() *structpbStruct
	GetEnv() map[string]string
}

// run checks the config against the schema, then calls fn.
func (s *server) run(ctx context.Context, req opRequest, log Logger, fn func(JobContext, map[string]any, map[string]string, Logger) (*pluginv1.Result, error)) (*pluginv1.Result, error) {
	config := req.GetConfig().AsMap()
	diags, err := s.checkConfig(ctx, config)
	if err != nil {
		return nil, err
	}
	if errs := configschema.Errors(diags); len(errs) > 0 {
		return nil, DiagnosticsError(errs)
	}
	job, err := upgradeState(ctx, s.impl, jobFromProto(req.GetJob()), log)
	if err != nil {
		return nil, err
	}
	return fn(job, config, req.GetEnv(), log)
}

// DiagnosticsError joins diagnostics into one error: "invalid config:
// steps[0].script: is required; shell: must be a string".
func DiagnosticsError(diags []Diagnostic) error {
	msgs := make([]string, len(diags))
	for i, d := range diags {
		msgs[i] = d.String()
	}
	return errors.New("invalid config: " + strings.Join(msgs, "; "))
}

func (s *server) Plan(req *pluginv1.PlanRequest, stream grpc.ServerStreamingServer[pluginv1.PlanResponse]) error {
	return serveOp(s, stream,
		func(l *pluginv1.LogEvent) *pluginv1.PlanResponse {
			return &pluginv1.PlanResponse{Event: &pluginv1.PlanResponse_Log{Log: l}}
		},
		func(r *pluginv1.Result) *pluginv1.PlanResponse {
			return &pluginv1.PlanResponse{Event: &pluginv1.PlanResponse_Result{Result: r}}
		},
		func(ctx context.Context, log Logger) (*pluginv1.Result, error) {
			return s.run(ctx, req, log, func(job JobContext, cfg map[string]any, env map[string]string, log Logger) (*pluginv1.Result, error) {
				var r *PlanResponse
				var err error
				if req.GetJob().GetDestroy() {
					dp, ok := s.impl.(DestroyPlanner)
					if !ok {
						return nil, status.Error(codes.Unimplemented, "the plugin does not plan destroys")
					}
					r, err = dp.PlanDestroy(ctx, &PlanRequest{Job: job, Config: cfg, Env: env, Log: log})
				} else {
					r, err = s.impl.Plan(ctx, &PlanRequest{Job: job, Config: cfg, Env: env, Log: log})
				}
				if r == nil {
					return &pluginv1.Result{}, err
				}
				planned, perr := plannedToProto(r.PlannedChanges)
				if err == nil {
					err = perr
				}
				return &pluginv1.Result{ExitCode: int32(r.ExitCode), Outputs: r.Outputs, Changes: r.Changes, PlannedChanges: planned,
					PolicyFindings: findingsToProto(r.PolicyFindings)}, err
			})
		})
}

func (s *server) Apply(req *pluginv1.ApplyRequest, stream grpc.ServerStreamingServer[pluginv1.ApplyResponse]) error {
	return serveOp(s, stream,
		func(l *pluginv1.LogEvent) *pluginv1.ApplyResponse {
			return &pluginv1.ApplyResponse{Event: &pluginv1.ApplyResponse_Log{Log: l}}
		},
		func(r *pluginv1.Result) *pluginv1.ApplyResponse {
			return &pluginv1.ApplyResponse{Event: &pluginv1.ApplyResponse_Result{Result: r}}
		},
		func(ctx context.Context, log Logger) (*pluginv1.Result, error) {
			return s.run(ctx, req, log, func(job JobContext, cfg map[string]any, env map[string]string, log Logger) (*pluginv1.Result, error) {
				r, err := s.impl.Apply(ctx, &ApplyRequest{Job: job, Config: cfg, Env: env, Log: log})
				if r == nil {
					return &pluginv1.Result{}, err
				}
				return &pluginv1.Result{ExitCode: int32(r.ExitCode), Outputs: r.Outputs, PolicyFindings: findingsToProto(r.PolicyFindings)}, err
			})
		})
}

func (s *server) Destroy(req *pluginv1.DestroyRequest, stream grpc.ServerStreamingServer[pluginv1.DestroyResponse]) error {
	d, ok := s.impl.(Destroyer)
	if !ok {
		return status.Error(codes.Unimplemented, "this plugin does not implement destroy")
	}
	return serveOp(s, stream,
		func(l *pluginv1.LogEvent) *pluginv1.DestroyResponse {
			return &pluginv1.DestroyResponse{Event: &pluginv1.DestroyResponse_Log{Log: l}}
		},
		func(r *pluginv1.Result) *pluginv1.DestroyResponse {
			return &pluginv1.DestroyResponse{Event: &pluginv1.DestroyResponse_Result{Result: r}}
		},
		func(ctx context.Context, log Logger) (*pluginv1.Result, error) {
			return s.run(ctx, req, log, func(job JobContext, cfg map[string]any, env map[string]string, log Logger) (*pluginv1.Result, error) {
				r, err := d.Destroy(ctx, &DestroyRequest{Job: job, Config: cfg, Env: env, Log: log})
				if r == nil {
					return &pluginv1.Result{}, err
				}
				return &pluginv1.Result{ExitCode: int32(r.ExitCode), Outputs: r.Outputs, PolicyFindings: findingsToProto(r.PolicyFindings)}, err
			})
		})
}

func (s *server) Drift(req *pluginv1.DriftRequest, stream grpc.ServerStreamingServer[pluginv1.DriftResponse]) error {
	d, ok := s.impl.(Drifter)
	if !ok {
		return status.Error(codes.Unimplemented, "this plugin does not implement drift")
	}
	return serveOp(s, stream,
		func(l *pluginv1.LogEvent) *pluginv1.DriftResponse {
			return &pluginv1.DriftResponse{Event: &pluginv1.DriftResponse_Log{Log: l}}
		},
		func(r *pluginv1.Result) *pluginv1.DriftResponse {
			return &pluginv1.DriftResponse{Event: &pluginv1.DriftResponse_Result{Result: r}}
		},
		func(ctx context.Context, log Logger) (*pluginv1.Result, error) {
			return s.run(ctx, req, log, func(job JobContext, cfg map[string]any, env map[string]string, log Logger) (*pluginv1.Result, error) {
				r, err := d.Drift(ctx, &DriftRequest{Job: job, Config: cfg, Env: env, Log: log})
				if r == nil {
					return &pluginv1.Result{}, err
				}
				planned, perr := plannedToProto(r.PlannedChanges)
				if err == nil {
					err = perr
				}
				return &pluginv1.Result{ExitCode: int32(r.ExitCode), Outputs: r.Outputs, Changes: r.Changes, Drifted: r.Drifted,
					PlannedChanges: planned}, err
			})
		})
}

func (s *server) Import(req *pluginv1.ImportRequest, stream grpc.ServerStreamingServer[pluginv1.ImportResponse]) error {
	im, ok := s.impl.(Importer)
	if !ok {
		return status.Error(codes.Unimplemented, "this plugin does not implement import")
	}
	return serveOp(s, stream,
		func(l *pluginv1.LogEvent) *pluginv1.ImportResponse {
			return &pluginv1.ImportResponse{Event: &pluginv1.ImportResponse_Log{Log: l}}
		},
		func(r *pluginv1.Result) *pluginv1.ImportResponse {
			return &pluginv1.ImportResponse{Event: &pluginv1.ImportResponse_Result{Result: r}}
		},
		func(ctx context.Context, log Logger) (*pluginv1.Result, error) {
			return s.run(ctx, req, log, func(job JobContext, cfg map[string]any, env map[string]string, log Logger) (*pluginv1.Result, error) {
				id := req.GetImportId()
				if strings.TrimSpace(id) == "" {
					return nil, errors.New("import: no import id (it names the existing resource to adopt)")
				}
				r, err := im.Import(ctx, &ImportRequest{Job: job, Config: cfg, Env: env, ID: id, Log: log})
				if r == nil {
					return &pluginv1.Result{}, err
				}
				if err == nil && r.ExitCode == 0 && r.State != nil {
					// What Import found becomes the component's state,
					// whole, at the plugin's state version.
					if serr := SaveState(job, r.State); serr != nil {
						err = fmt.Errorf("import: %w", serr)
					}
				}
				return &pluginv1.Result{ExitCode: int32(r.ExitCode), Outputs: r.Outputs, PolicyFindings: findingsToProto(r.PolicyFindings)}, err
			})
		})
}

// serveOp runs one streaming operation: it hands fn a Logger that sends log
// events on stream, then sends the final result built from fn's return.
// A panic in fn fails the operation; its stack trace goes to the log.
func serveOp[R any](
	s *server,
	stream grpc.ServerStreamingServer[R],
	wrapLog func(*pluginv1.LogEvent) *R,
	wrapResult func(*pluginv1.Result) *R,
	fn func(context.Context, Logger) (*pluginv1.Result, error),
) error {
	log := &streamLogger{send: func(e *pluginv1.LogEvent) error { return stream.Send(wrapLog(e)) }}
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	if s.interrupted != nil || s.hostLost != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-s.interrupted:
				cancel(ErrInterrupted)
			case <-s.hostLost:
				cancel(ErrHostLeaseLost)
			case <-stop:
			}
		}()
	}
	res, err := func() (res *pluginv1.Result, err error) {
		defer recoverTo(&err, log)
		return fn(ctx, log)
	}()
	// A plugin may leak goroutines that keep logging; they must not write
	// to a stream that is finished.
	log.close()
	// What the operation printed reaches the host before its result.
	s.syncStdio()
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

// syncStdio writes StdioSyncLine when the plugin is served by go-plugin.
func (s *server) syncStdio() {
	if s.stdioSync {
		writeStdioSync()
	}
}

// recoverTo turns a panic in plugin code into an error, so that a bug in one
// operation is reported as a failure rather than as a crashed plugin. The
// stack trace goes to log's system stream when there is one (an
// operation), else to the plugin's stderr (which the agent puts in the
// job's log too).
func recoverTo(err *error, log *streamLogger) {
	r := recover()
	if r == nil {
		return
	}
	stack := strings.TrimRight(string(debug.Stack()), "\n")
	*err = fmt.Errorf("plugin panic: %v (the stack trace is in the job log)", r)
	if log != nil {
		log.System(fmt.Sprintf("plugin panic: %v", r))
		for _, line := range strings.Split(stack, "\n") {
			log.System(line)
		}
		return
	}
	fmt.Fprintf(os.Stderr, "plugin panic: %v\n%s\n", r, stack)
}
