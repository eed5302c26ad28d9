// Package operatorapi serves byoc.ims.v1.OperatorService: the API the byoc
// CLI and TUI use to manage apps, installs and jobs and to follow job logs.
// It validates every request before touching the store, so a bad request
// changes nothing and its error names the offending field.
package operatorapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/release"
	"github.com/byoc-dev/byoc/imsd/rpcerr"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/workflow"
	"github.com/byoc-dev/byoc/internal/labels"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// Defaults and limits for requests.
const (
	DefaultJobTimeout     = time.Hour
	MaxJobTimeout         = 24 * time.Hour
	DefaultMaxAttempts    = 3
	MaxMaxAttempts        = 10
	DefaultEnrollTokenTTL = 24 * time.Hour
	MaxEnrollTokenTTL     = 30 * 24 * time.Hour
	MaxConfigBytes        = 256 << 10
	MaxInputs             = 200
	MaxInputValueBytes    = config.MaxInputValueBytes
	logPage               = 500
)

// Config tunes the service.
type Config struct {
	// HeartbeatInterval is what agents are told; an agent unseen for three
	// intervals counts as disconnected on other replicas.
	HeartbeatInterval time.Duration
	// LeaseDuration is the lease of a job handed to a connected agent at
	// enqueue; zero never hands jobs over at enqueue, leaving every job
	// for the agents to claim.
	LeaseDuration time.Duration
	// LeaseGrace is added to a lease before imsd may hand the job out
	// again (agentapi.Config.LeaseGrace).
	LeaseGrace time.Duration
	// FollowPoll bounds how long a log follower waits without a wake-up
	// before it re-reads the database (a safety net, not the normal path).
	FollowPoll time.Duration
	// FleetPoll is how often a fleet watcher re-reads the database without
	// a wake-up: it catches heartbeats and other replicas' changes.
	FleetPoll time.Duration
	// FleetCoalesce is the least time between two re-reads of one fleet
	// watcher, so a burst of changes costs one read.
	FleetCoalesce time.Duration
	// BreakGlassRequestTTL is how long a break-glass request stays
	// pending (default 30m).
	BreakGlassRequestTTL time.Duration
	// Engine runs workflows; the service queues them and wakes it.
	Engine *workflow.Engine
	// Releases creates and rolls out releases.
	Releases *release.Engine
	// SigningKeyID is the id of imsd's job signing key, which every
	// enrolment token carries (auth.NewEnrollToken).
	SigningKeyID string
}

// Service implements imsv1connect.OperatorServiceHandler.
type Service struct {
	imsv1connect.UnimplementedOperatorServiceHandler
	store *store.Store
	hub   *dispatch.Hub
	cfg   Config
	now   func() time.Time
	log   *slog.Logger
	// sensitive caches which inputs are sensitive, per app (sensitive.go).
	sensitive sensitiveNames
}

// New returns the operator service.
func New(st *store.Store, hub *dispatch.Hub, cfg Config, now func() time.Time, log *slog.Logger) *Service {
	if cfg.FollowPoll == 0 {
		cfg.FollowPoll = 2 * time.Second
	}
	if cfg.FleetPoll == 0 {
		cfg.FleetPoll = 5 * time.Second
	}
	if cfg.BreakGlassRequestTTL == 0 {
		cfg.BreakGlassRequestTTL = 30 * time.Minute
	}
	if cfg.FleetCoalesce == 0 {
		cfg.FleetCoalesce = 100 * time.Millisecond
	}
	return &Service{store: st, hub: hub, cfg: cfg, now: now, log: log}
}

func (s *Service) err(ctx context.Context, err error) error { return rpcerr.ToConnect(ctx, s.log, err) }

var (
	nameRE     = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	inputKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	typeRE     = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
)

func checkName(field, v string) error {
	if v == "" {
		return errs.Field(field, "is required")
	}
	if !nameRE.MatchString(v) {
		return errs.Field(field, "%q is not a valid name: use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit", v)
	}
	return nil
}

func checkInputs(field string, in map[string]string) error {
	if len(in) > MaxInputs {
		return errs.Field(field, "has %d entries; at most %d are allowed", len(in), MaxInputs)
	}
	for k, v := range in {
		if !inputKeyRE.MatchString(k) {
			return errs.Field(field+"["+k+"]", "is not a valid input name: use letters, digits and '_', not starting with a digit")
		}
		if len(v) > MaxInputValueBytes {
			return errs.Field(field+"["+k+"]", "is %d bytes; at most %d are allowed", len(v), MaxInputValueBytes)
		}
	}
	return nil
}

func ttl(field string, seconds int64) (time.Duration, error) {
	switch {
	case seconds == 0:
		return DefaultEnrollTokenTTL, nil
	case seconds < 0:
		return 0, errs.Field(field, "must not be negative")
	case seconds > int64(MaxEnrollTokenTTL/time.Second):
		return 0, errs.Field(field, "must be at most %d (30 days)", int64(MaxEnrollTokenTTL/time.Second))
	}
	return time.Duration(seconds) * time.Second, nil
}

// WhoAmI describes the caller's token.
func (s *Service) WhoAmI(ctx context.Context, _ *connect.Request[imsv1.WhoAmIRequest]) (*connect.Response[imsv1.WhoAmIResponse], error) {
	t := callerFrom(ctx)
	return connect.NewResponse(&imsv1.WhoAmIResponse{TokenId: t.ID, Name: t.Name, Role: roleToProto(t.Role)}), nil
}

// CreateApiToken mints an operator token.
func (s *Service) CreateApiToken(ctx context.Context, req *connect.Request[imsv1.CreateApiTokenRequest]) (*connect.Response[imsv1.CreateApiTokenResponse], error) {
	if err := checkName("name", req.Msg.Name); err != nil {
		return nil, s.err(ctx, err)
	}
	role, ok := map[imsv1.Role]store.Role{imsv1.Role_ROLE_ADMIN: store.RoleAdmin, imsv1.Role_ROLE_VIEWER: store.RoleViewer}[req.Msg.Role]
	if !ok {
		return nil, s.err(ctx, errs.Field("role", "must be ROLE_ADMIN or ROLE_VIEWER"))
	}
	secret, tok, err := CreateToken(ctx, s.store, req.Msg.Name, role, s.now())
	if err != nil {
		return nil, s.err(ctx, err)
	}
	s.log.InfoContext(ctx, "api token created", "token", tok.ID, "name", tok.Name, "role", tok.Role, "by", callerFrom(ctx).Name)
	return connect.NewResponse(&imsv1.CreateApiTokenResponse{TokenId: tok.ID, Token: secret}), nil
}

// CreateToken mints and stores an API token and returns its secret.
func CreateToken(ctx context.Context, st *store.Store, name string, role store.Role, now time.Time) (string, store.APIToken, error) {
	secret := auth.NewSecret(auth.APITokenPrefix)
	tok := store.APIToken{ID: auth.NewID("tok_"), Name: name, Role: role, CreatedAt: now}
	if err := st.CreateAPIToken(ctx, tok, auth.Hash(secret)); err != nil {
		return "", store.APIToken{}, fmt.Errorf("create api token: %w", err)
	}
	return secret, tok, nil
}

// CreateApp creates an app.
func (s *Service) CreateApp(ctx context.Context, req *connect.Request[imsv1.CreateAppRequest]) (*connect.Response[imsv1.CreateAppResponse], error) {
	m := req.Msg
	if err := checkName("name", m.Name); err != nil {
		return nil, s.err(ctx, err)
	}
	if len(m.Description) > 1024 {
		return nil, s.err(ctx, errs.Field("description", "is longer than 1024 bytes"))
	}
	a := store.App{ID: auth.NewID("app_"), Name: m.Name, Description: m.Description, CreatedAt: s.now()}
	if err := s.store.CreateApp(ctx, a); err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.CreateAppResponse{App: appToProto(a)}), nil
}

// ListApps lists every app.
func (s *Service) ListApps(ctx context.Context, _ *connect.Request[imsv1.ListAppsRequest]) (*connect.Response[imsv1.ListAppsResponse], error) {
	apps, err := s.store.ListApps(ctx)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListAppsResponse{}
	for _, a := range apps {
		out.Apps = append(out.Apps, appToProto(a))
	}
	return connect.NewResponse(out), nil
}

// GetApp returns one app.
func (s *Service) GetApp(ctx context.Context, req *connect.Request[imsv1.GetAppRequest]) (*connect.Response[imsv1.GetAppResponse], error) {
	if req.Msg.IdOrName == "" {
		return nil, s.err(ctx, errs.Field("id_or_name", "is required"))
	}
	a, err := s.store.GetApp(ctx, req.Msg.IdOrName)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.GetAppResponse{App: appToProto(a)}), nil
}

// CreateInstall creates an install and its first enrolment token.
func (s *Service) CreateInstall(ctx context.Context, req *connect.Request[imsv1.CreateInstallRequest]) (*connect.Response[imsv1.CreateInstallResponse], error) {
	m := req.Msg
	if m.App == "" {
		return nil, s.err(ctx, errs.Field("app", "is required"))
	}
	if err := checkName("name", m.Name); err != nil {
		return nil, s.err(ctx, err)
	}
	if err := checkInputs("inputs", m.Inputs); err != nil {
		return nil, s.err(ctx, err)
	}
	if err := labels.Validate(m.Labels); err != nil {
		return nil, s.err(ctx, errs.Field("labels", "%v", err))
	}
	life, err := ttl("enrollment_token_ttl_seconds", m.EnrollmentTokenTtlSeconds)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	app, err := s.store.GetApp(ctx, m.App)
	if errs.Is(err, errs.NotFound) {
		return nil, s.err(ctx, errs.Field("app", "no app named %q; create it with `byoc app create`", m.App))
	}
	if err != nil {
		return nil, s.err(ctx, err)
	}
	now := s.now()
	in := store.Install{ID: auth.NewID("ins_"), AppID: app.ID, Name: m.Name, Inputs: m.Inputs, Labels: m.Labels, CreatedAt: now}
	if in.Inputs == nil {
		in.Inputs = map[string]string{}
	}
	secret, hash := auth.NewEnrollToken(s.cfg.SigningKeyID)
	et := store.EnrollmentToken{Hash: hash, InstallID: in.ID, ExpiresAt: now.Add(life), CreatedAt: now}
	if err := s.store.CreateInstall(ctx, in, et); err != nil {
		return nil, s.err(ctx, err)
	}
	s.hub.FleetChanged()
	s.log.InfoContext(ctx, "install created", "install", in.ID, "name", in.Name, "app", app.Name, "by", callerFrom(ctx).Name)
	return connect.NewResponse(&imsv1.CreateInstallResponse{
		Install:         s.installToProto(ctx, in),
		EnrollmentToken: &imsv1.EnrollmentToken{Token: secret, ExpireTime: timestamppb.New(et.ExpiresAt)},
	}), nil
}

// ListInstalls lists installs, optionally of one app.
func (s *Service) ListInstalls(ctx context.Context, req *connect.Request[imsv1.ListInstallsRequest]) (*connect.Response[imsv1.ListInstallsResponse], error) {
	sel, err := parseSelector("selector", req.Msg.Selector)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	appID := ""
	if req.Msg.App != "" {
		app, err := s.store.GetApp(ctx, req.Msg.App)
		if errs.Is(err, errs.NotFound) {
			return nil, s.err(ctx, errs.Field("app", "no app named %q", req.Msg.App))
		}
		if err != nil {
			return nil, s.err(ctx, err)
		}
		appID = app.ID
	}
	ins, err := s.store.ListInstalls(ctx, appID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	ins = matchInstalls(ins, sel)
	out := &imsv1.ListInstallsResponse{}
	mask := s.inputMasker()
	for _, in := range ins {
		out.Installs = append(out.Installs, s.installToProtoMasked(ctx, in, mask))
	}
	return connect.NewResponse(out), nil
}

// GetInstall returns one install with its agent's status.
func (s *Service) GetInstall(ctx context.Context, req *connect.Request[imsv1.GetInstallRequest]) (*connect.Response[imsv1.GetInstallResponse], error) {
	if req.Msg.IdOrName == "" {
		return nil, s.err(ctx, errs.Field("id_or_name", "is required"))
	}
	in, err := s.store.GetInstall(ctx, req.Msg.IdOrName)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.GetInstallResponse{Install: s.installToProto(ctx, in)}), nil
}

// CreateEnrollmentToken issues a new enrolment token for an install.
func (s *Service) CreateEnrollmentToken(ctx context.Context, req *connect.Request[imsv1.CreateEnrollmentTokenRequest]) (*connect.Response[imsv1.CreateEnrollmentTokenResponse], error) {
	if req.Msg.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	life, err := ttl("ttl_seconds", req.Msg.TtlSeconds)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	in, err := s.store.GetInstall(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	now := s.now()
	secret, hash := auth.NewEnrollToken(s.cfg.SigningKeyID)
	et := store.EnrollmentToken{Hash: hash, InstallID: in.ID, ExpiresAt: now.Add(life), CreatedAt: now}
	if err := s.store.CreateEnrollmentToken(ctx, et); err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.CreateEnrollmentTokenResponse{
		EnrollmentToken: &imsv1.EnrollmentToken{Token: secret, ExpireTime: timestamppb.New(et.ExpiresAt)},
	}), nil
}

var operations = map[string]bool{"plan": true, "apply": true, "destroy": true}

// EnqueueJob queues one job for one install's agent.
func (s *Service) EnqueueJob(ctx context.Context, req *connect.Request[imsv1.EnqueueJobRequest]) (*connect.Response[imsv1.EnqueueJobResponse], error) {
	var key *store.EnqueueKey
	if k := req.Msg.IdempotencyKey; k != "" {
		if err := checkIdempotencyKey("idempotency_key", k); err != nil {
			return nil, s.err(ctx, err)
		}
		m := proto.CloneOf(req.Msg)
		m.IdempotencyKey = ""
		var err error
		if key, err = s.enqueueKey("EnqueueJob", callerFrom(ctx).Name, k, m); err != nil {
			return nil, s.err(ctx, err)
		}
	}
	j, err := s.newJob(ctx, req.Msg, configJSON)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	jobs, err := s.enqueue(ctx, []store.Job{j}, false, key)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.EnqueueJobResponse{Job: enqueuedToProto(jobs[0], req.Msg.Config)}), nil
}

// EnqueueJobs queues up to store.MaxEnqueueBatch jobs, all or none.
func (s *Service) EnqueueJobs(ctx context.Context, req *connect.Request[imsv1.EnqueueJobsRequest]) (*connect.Response[imsv1.EnqueueJobsResponse], error) {
	m := req.Msg
	switch {
	case len(m.Jobs) == 0:
		return nil, s.err(ctx, errs.Field("jobs", "is required"))
	case len(m.Jobs) > store.MaxEnqueueBatch:
		return nil, s.err(ctx, errs.Field("jobs", "%d jobs; at most %d in one call", len(m.Jobs), store.MaxEnqueueBatch))
	}
	var key *store.EnqueueKey
	if k := m.IdempotencyKey; k != "" {
		if err := checkIdempotencyKey("idempotency_key", k); err != nil {
			return nil, s.err(ctx, err)
		}
		// The key is hashed out of the request it identifies, and put
		// back: the request is the handler's own.
		m.IdempotencyKey = ""
		var err error
		key, err = s.enqueueKey("EnqueueJobs", callerFrom(ctx).Name, k, m)
		m.IdempotencyKey = k
		if err != nil {
			return nil, s.err(ctx, err)
		}
	}
	jobs := make([]store.Job, len(m.Jobs))
	configs := &batchConfigs{seen: map[string]encodedConfig{}, field: make([][]byte, len(m.Jobs))}
	for i, r := range m.Jobs {
		if r.IdempotencyKey != "" {
			return nil, s.err(ctx, errs.Field(fmt.Sprintf("jobs[%d].idempotency_key", i), "must be empty: a batch has one key, the request's idempotency_key"))
		}
		j, err := s.newJob(ctx, r, func(cfg *structpb.Struct) ([]byte, error) { return configs.encode(i, cfg) })
		if err != nil {
			return nil, s.err(ctx, errs.Prefix(fmt.Sprintf("jobs[%d]", i), err))
		}
		jobs[i] = j
	}
	jobs, err := s.enqueue(ctx, jobs, true, key)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	// JSON encoders drop unknown fields: a JSON client gets Structs. So
	// does a config that lists sensitive values, which the answer masks.
	asJSON := strings.Contains(req.Header().Get("Content-Type"), "json")
	out := &imsv1.EnqueueJobsResponse{Jobs: make([]*imsv1.Job, len(jobs))}
	for i, j := range jobs {
		if cfg := m.Jobs[i].Config; asJSON || cfg.GetFields()[workflow.SensitiveKey] != nil {
			out.Jobs[i] = enqueuedToProto(j, cfg)
			continue
		}
		// The config the caller sent, as the field encoded above: the
		// answer copies it instead of marshalling each Struct again.
		p := jobFields(j)
		p.ProtoReflect().SetUnknown(configs.field[i])
		out.Jobs[i] = p
	}
	return connect.NewResponse(out), nil
}

// jobConfigField is Job.config's field number.
var jobConfigField = (&imsv1.Job{}).ProtoReflect().Descriptor().Fields().ByName("config").Number()

// configJSON checks a job's config against the limits every agent
// enforces (checkConfig) and returns it as stored: JSON, "{}" for none.
func configJSON(cfg *structpb.Struct) ([]byte, error) {
	if cfg == nil {
		return []byte("{}"), nil
	}
	if err := checkConfig("config", cfg); err != nil {
		return nil, err
	}
	return cfg.MarshalJSON()
}

// checkConfig refuses a config an agent would refuse
// (agentproto.CheckConfig: its depth, size, key and item counts, key
// lengths, and values JSON has no room for), with an invalid-argument
// error naming the value's path under field.
func checkConfig(field string, cfg *structpb.Struct) error {
	err := agentproto.CheckConfig(plainStruct(cfg))
	if ce := (*agentproto.ConfigError)(nil); errors.As(err, &ce) {
		return errs.Field(field+ce.Path, "%s", ce.Problem)
	}
	return err
}

// plainStruct is cfg as Go values, for agentproto.CheckConfig. Unlike
// Struct.AsMap it keeps what JSON cannot carry as it is (AsMap turns NaN
// into the string "NaN"), so that the check sees it: a number that is
// not finite stays a float64, and a Value with no kind set stays itself.
func plainStruct(cfg *structpb.Struct) map[string]any {
	out := make(map[string]any, len(cfg.GetFields()))
	for k, v := range cfg.GetFields() {
		out[k] = plainValue(v)
	}
	return out
}

func plainValue(v *structpb.Value) any {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return nil
	case *structpb.Value_NumberValue:
		return k.NumberValue
	case *structpb.Value_StringValue:
		return k.StringValue
	case *structpb.Value_BoolValue:
		return k.BoolValue
	case *structpb.Value_StructValue:
		return plainStruct(k.StructValue)
	case *structpb.Value_ListValue:
		out := make([]any, len(k.ListValue.GetValues()))
		for i, x := range k.ListValue.GetValues() {
			out[i] = plainValue(x)
		}
		return out
	}
	return v
}

// batchConfigs encodes the configs of one EnqueueJobs call. A fleet-wide
// run repeats one config in every job, and encoding it as JSON (protojson)
// was most of the call's own CPU: each config is encoded to binary
// protobuf, deterministically, and configs with equal bytes share one
// encoding. The binary form, as Job's config field, is what the answer
// sends back.
type batchConfigs struct {
	seen  map[string]encodedConfig // by deterministic wire bytes
	field [][]byte                 // by job: its config as Job's config field
}

type encodedConfig struct{ json, field []byte }

// encode returns job i's config as stored, and keeps it as a field.
func (b *batchConfigs) encode(i int, cfg *structpb.Struct) ([]byte, error) {
	wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	e, ok := b.seen[string(wire)]
	if !ok {
		// A config seen before in this batch was checked then.
		if e.json, err = configJSON(cfg); err != nil {
			return nil, err
		}
		e.field = protowire.AppendBytes(protowire.AppendTag(nil, jobConfigField, protowire.BytesType), wire)
		b.seen[string(wire)] = e
	}
	b.field[i] = e.field
	return e.json, nil
}

// newJob checks an enqueue request and makes the job it asks for, its
// config stored as encode returns it.
func (s *Service) newJob(ctx context.Context, m *imsv1.EnqueueJobRequest, encode func(*structpb.Struct) ([]byte, error)) (store.Job, error) {
	if m.Install == "" {
		return store.Job{}, errs.Field("install", "is required")
	}
	if m.ComponentType == "" {
		return store.Job{}, errs.Field("component_type", "is required")
	}
	if !typeRE.MatchString(m.ComponentType) {
		return store.Job{}, errs.Field("component_type", "%q is not a valid type name", m.ComponentType)
	}
	if !operations[m.Operation] {
		return store.Job{}, errs.Field("operation", "must be plan, apply or destroy, got %q", m.Operation)
	}
	timeout := DefaultJobTimeout
	switch {
	case m.TimeoutSeconds < 0:
		return store.Job{}, errs.Field("timeout_seconds", "must not be negative")
	case m.TimeoutSeconds > int64(MaxJobTimeout/time.Second):
		return store.Job{}, errs.Field("timeout_seconds", "must be at most %d (24 hours)", int64(MaxJobTimeout/time.Second))
	case m.TimeoutSeconds > 0:
		timeout = time.Duration(m.TimeoutSeconds) * time.Second
	}
	mode := store.ModeMaintenance
	if m.Mode != "" {
		if mode = store.Mode(m.Mode); !mode.Valid() {
			return store.Job{}, errs.Field("mode", "must be provision, maintenance, deprovision or break_glass, got %q", m.Mode)
		}
	}
	attempts := DefaultMaxAttempts
	switch {
	case m.MaxAttempts < 0 || m.MaxAttempts > MaxMaxAttempts:
		return store.Job{}, errs.Field("max_attempts", "must be between 1 and %d", MaxMaxAttempts)
	case m.MaxAttempts > 0:
		attempts = int(m.MaxAttempts)
	}
	config, err := encode(m.Config)
	if err != nil {
		if e := (*errs.Error)(nil); errors.As(err, &e) {
			return store.Job{}, e
		}
		return store.Job{}, errs.Field("config", "cannot be encoded as JSON: %v", err)
	}
	if len(config) > MaxConfigBytes {
		return store.Job{}, errs.Field("config", "is %d bytes as JSON; at most %d are allowed", len(config), MaxConfigBytes)
	}
	installID, err := s.store.InstallID(ctx, m.Install)
	if errs.Is(err, errs.NotFound) {
		return store.Job{}, errs.Field("install", "no install named %q", m.Install)
	}
	if err != nil {
		return store.Job{}, err
	}
	now := s.now()
	return store.Job{
		ID:            auth.NewSortableID("job_", now),
		InstallID:     installID,
		ComponentType: m.ComponentType,
		Operation:     m.Operation,
		Config:        config,
		State:         store.JobQueued,
		MaxAttempts:   attempts,
		Timeout:       timeout,
		CreatedAt:     now,
		CreatedBy:     callerFrom(ctx).Name,
		Mode:          mode,
		WindowBound:   m.WindowBound,
	}, nil
}

// enqueue stores jobs and gets them to agents: each straight to a
// connected agent of its install with a free slot when there is one
// (stored assigned, no claim needed), else queued, waking the install's
// agents to claim it. batch stores them in one transaction (EnqueueJobs);
// a single job takes the store's one-statement path. With a key, the jobs
// and the key are stored in one transaction; a request the key already
// stored returns that request's jobs and hands nothing out.
func (s *Service) enqueue(ctx context.Context, jobs []store.Job, batch bool, key *store.EnqueueKey) ([]store.Job, error) {
	news := make([]store.NewJob, len(jobs))
	sessions := make([]*dispatch.Session, len(jobs))
	for i, j := range jobs {
		news[i].Job = j
		if s.cfg.LeaseDuration <= 0 || j.WindowBound {
			// A window-bound job waits in the queue: its install's claim
			// decides whether the maintenance windows are open.
			continue
		}
		if sess := s.hub.Reserve(j.InstallID); sess != nil {
			sessions[i] = sess
			news[i].AgentID, news[i].LeaseUntil = sess.AgentID, j.CreatedAt.Add(s.cfg.LeaseDuration+s.cfg.LeaseGrace)
		}
	}
	var out []store.Job
	var err error
	replayed := false
	switch {
	case key != nil:
		out, replayed, err = s.store.EnqueueJobsKeyed(ctx, *key, news)
	case batch:
		out, err = s.store.EnqueueJobs(ctx, news)
	case news[0].AgentID != "":
		var j store.Job
		j, _, err = s.store.EnqueueAssigned(ctx, news[0].Job, news[0].AgentID, news[0].LeaseUntil)
		out = []store.Job{j}
	default:
		err = s.store.EnqueueJob(ctx, news[0].Job)
		out = []store.Job{news[0].Job}
	}
	if err != nil || replayed {
		for _, sess := range sessions {
			if sess != nil {
				sess.Release()
			}
		}
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	delivered := false
	for i, j := range out {
		sess := sessions[i]
		if sess != nil && j.State == store.JobAssigned {
			sess.Deliver(j)
			delivered = true
			continue
		}
		if sess != nil {
			sess.Release()
		}
		s.hub.Wake(j.InstallID)
	}
	if delivered {
		s.hub.FleetChanged()
	}
	return out, nil
}

var statesFromProto = map[imsv1.JobState]store.JobState{
	imsv1.JobState_JOB_STATE_QUEUED:    store.JobQueued,
	imsv1.JobState_JOB_STATE_ASSIGNED:  store.JobAssigned,
	imsv1.JobState_JOB_STATE_RUNNING:   store.JobRunning,
	imsv1.JobState_JOB_STATE_SUCCEEDED: store.JobSucceeded,
	imsv1.JobState_JOB_STATE_FAILED:    store.JobFailed,
	imsv1.JobState_JOB_STATE_CANCELLED: store.JobCancelled,
	imsv1.JobState_JOB_STATE_TIMED_OUT: store.JobTimedOut,
	imsv1.JobState_JOB_STATE_REFUSED:   store.JobRefused,
}

// ListJobs lists jobs, newest first.
func (s *Service) ListJobs(ctx context.Context, req *connect.Request[imsv1.ListJobsRequest]) (*connect.Response[imsv1.ListJobsResponse], error) {
	m := req.Msg
	f := store.JobFilter{Limit: int(m.PageSize), Cursor: m.PageToken}
	if m.PageSize < 0 || m.PageSize > 1000 {
		return nil, s.err(ctx, errs.Field("page_size", "must be between 0 and 1000"))
	}
	for i, st := range m.States {
		v, ok := statesFromProto[st]
		if !ok {
			return nil, s.err(ctx, errs.Field(fmt.Sprintf("states[%d]", i), "is not a job state"))
		}
		f.States = append(f.States, v)
	}
	if m.Install != "" {
		in, err := s.store.GetInstall(ctx, m.Install)
		if errs.Is(err, errs.NotFound) {
			return nil, s.err(ctx, errs.Field("install", "no install named %q", m.Install))
		}
		if err != nil {
			return nil, s.err(ctx, err)
		}
		f.InstallID = in.ID
	}
	var err error
	if f.InstallIDs, err = s.selectedInstalls(ctx, "selector", m.Selector); err != nil {
		return nil, s.err(ctx, err)
	}
	jobs, next, err := s.store.ListJobs(ctx, f)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListJobsResponse{NextPageToken: next}
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, s.jobToProto(ctx, j))
	}
	return connect.NewResponse(out), nil
}

// GetJob returns one job, saying why it waits if it does.
func (s *Service) GetJob(ctx context.Context, req *connect.Request[imsv1.GetJobRequest]) (*connect.Response[imsv1.GetJobResponse], error) {
	if req.Msg.Id == "" {
		return nil, s.err(ctx, errs.Field("id", "is required"))
	}
	j, err := s.store.GetJob(ctx, req.Msg.Id)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	pj := s.jobToProto(ctx, j)
	pj.PendingReason = s.pendingReason(ctx, j)
	// Only here: a plan may hold many changes, which lists do without.
	pj.PlannedChanges = s.plannedToProto(ctx, j)
	pj.PlanDigest, pj.ApprovedPlanDigest = j.PlanDigest, j.ApprovedPlanDigest
	for _, f := range j.PolicyFindings {
		pj.PolicyFindings = append(pj.PolicyFindings, &imsv1.PolicyFinding{Policy: f.Policy, Source: f.Source, Level: f.Level, Message: f.Message})
	}
	// The plan's changes and findings come from the agent: what of them
	// does not encode is left out, said so, rather than failing the get.
	if _, err := proto.Marshal(pj); err != nil {
		s.log.WarnContext(ctx, "a stored job's plan cannot be shown", "job", j.ID, "err", err)
		pj.PlannedChanges, pj.PolicyFindings = nil, nil
		pj.Error = strings.TrimPrefix(pj.Error+"; imsd cannot show this job's planned changes and policy findings: "+strings.ToValidUTF8(err.Error(), "\uFFFD"), "; ")
	}
	return connect.NewResponse(&imsv1.GetJobResponse{Job: pj}), nil
}

// plannedToProto is a job's planned changes as messages.
func (s *Service) plannedToProto(ctx context.Context, j store.Job) []*imsv1.PlannedChange {
	var out []*imsv1.PlannedChange
	for _, c := range j.PlannedChanges {
		p := &imsv1.PlannedChange{Address: c.Address, Action: c.Action, Summary: c.Summary}
		for _, v := range []struct {
			in  json.RawMessage
			out **structpb.Value
		}{{c.Before, &p.Before}, {c.After, &p.After}} {
			if len(v.in) == 0 {
				continue
			}
			// A value nested deeper than clients decode would fail the
			// whole get: it is left out, and the summary says so.
			if d := jsonDepth(v.in); d > agentproto.MaxConfigDepth+1 {
				s.log.WarnContext(ctx, "planned change value nested too deep to show", "job", j.ID, "address", c.Address, "depth", d)
				p.Summary = strings.TrimPrefix(p.Summary+"; imsd cannot show a value of this change: it is nested "+strconv.Itoa(d)+" levels deep", "; ")
				continue
			}
			val := &structpb.Value{}
			if err := val.UnmarshalJSON(v.in); err != nil {
				s.log.WarnContext(ctx, "planned change value is not JSON", "job", j.ID, "address", c.Address, "err", err)
				continue
			}
			*v.out = val
		}
		out = append(out, p)
	}
	return out
}

// pendingReason explains, in words an operator can act on, why a job that
// is not running yet waits.
func (s *Service) pendingReason(ctx context.Context, j store.Job) string {
	why := s.pendingWhy(ctx, j)
	if why == "" || j.State != store.JobQueued {
		return why
	}
	if agents, err := s.store.AgentsForInstall(ctx, j.InstallID); err == nil && len(agents) > 0 {
		if note := modeNote(agents[0].Permissions, j.Mode); note != "" {
			why += "; " + note
		}
	}
	return why
}

// modeNote warns, from the permission state an agent last reported, that
// it will refuse a job of mode m ("" when it would not).
func modeNote(p *store.Permissions, m store.Mode) string {
	if p == nil {
		return ""
	}
	off := map[store.Mode]bool{store.ModeProvision: !p.Provision, store.ModeMaintenance: !p.Maintenance,
		store.ModeDeprovision: !p.Deprovision, store.ModeBreakGlass: !p.BreakGlass}
	switch {
	case p.DisabledAll:
		return "the customer has disabled all jobs (as the agent last reported): it will refuse this one unless they enable them first"
	case off[m]:
		return fmt.Sprintf("the customer has %s turned off (as the agent last reported): the agent will refuse this job unless they turn it on first", m)
	}
	return ""
}

// pendingWhy is pendingReason without the note on permissions.
func (s *Service) pendingWhy(ctx context.Context, j store.Job) string {
	now := s.now()
	switch j.State {
	case store.JobAssigned:
		return fmt.Sprintf("assigned to agent %s (attempt %d of %d), waiting for it to start; the lease expires in %s",
			j.AgentID, j.Attempt, j.MaxAttempts, j.LeaseDeadline.Sub(now).Round(time.Second))
	case store.JobQueued:
	default:
		return ""
	}
	agents, err := s.store.AgentsForInstall(ctx, j.InstallID)
	if err != nil {
		return "cannot tell: " + err.Error()
	}
	if len(agents) == 0 {
		return fmt.Sprintf("no agent has enrolled for install %s yet: run agentd with the install's enrolment token (`byoc install token`)", j.InstallID)
	}
	stale := 3 * s.cfg.HeartbeatInterval
	for _, a := range agents {
		if s.hub.Connected(a.ID) || (!a.LastSeenAt.IsZero() && now.Sub(a.LastSeenAt) < stale) {
			ahead, _, err := s.store.ListJobs(ctx, store.JobFilter{InstallID: j.InstallID, States: []store.JobState{store.JobAssigned, store.JobRunning}, Limit: 1000})
			if err == nil && len(ahead) > 0 {
				return fmt.Sprintf("agent %s is connected and busy with %d job(s); this job starts when one ends", a.ID, len(ahead))
			}
			return fmt.Sprintf("agent %s is connected; the job is being handed to it", a.ID)
		}
	}
	a := agents[0]
	if a.LastSeenAt.IsZero() {
		return fmt.Sprintf("agent %s enrolled %s ago but has never connected", a.ID, now.Sub(a.EnrolledAt).Round(time.Second))
	}
	return fmt.Sprintf("agent %s is not connected (last seen %s ago); the job starts when it reconnects", a.ID, now.Sub(a.LastSeenAt).Round(time.Second))
}

// CancelJob cancels a queued job or asks the agent to stop a running one.
func (s *Service) CancelJob(ctx context.Context, req *connect.Request[imsv1.CancelJobRequest]) (*connect.Response[imsv1.CancelJobResponse], error) {
	if req.Msg.Id == "" {
		return nil, s.err(ctx, errs.Field("id", "is required"))
	}
	reason := req.Msg.Reason
	if reason == "" {
		reason = "cancelled by " + callerFrom(ctx).Name
	}
	if len(reason) > 1024 {
		return nil, s.err(ctx, errs.Field("reason", "is longer than 1024 bytes"))
	}
	j, err := s.store.RequestCancel(ctx, req.Msg.Id, reason, callerFrom(ctx).Name, s.now())
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if !j.State.Terminal() && j.AgentID != "" {
		s.hub.Cancel(j.AgentID, dispatch.CancelRequest{JobID: j.ID, Reason: reason})
	}
	s.hub.NotifyLog(j.ID)
	s.hub.FleetChanged()
	s.log.InfoContext(ctx, "job cancel requested", "job", j.ID, "state", j.State, "by", callerFrom(ctx).Name)
	return connect.NewResponse(&imsv1.CancelJobResponse{Job: s.jobToProto(ctx, j)}), nil
}

// StreamJobLogs replays a job's log and, when following, streams new lines
// until the job has ended and every line it wrote has been sent.
func (s *Service) StreamJobLogs(ctx context.Context, req *connect.Request[imsv1.StreamJobLogsRequest], out *connect.ServerStream[imsv1.StreamJobLogsResponse]) error {
	m := req.Msg
	if m.JobId == "" {
		return s.err(ctx, errs.Field("job_id", "is required"))
	}
	if m.AfterAttempt < 0 || m.AfterSeq < 0 {
		return s.err(ctx, errs.Field("after_seq", "must not be negative"))
	}
	backwards := m.BeforeSeq != 0 || m.BeforeAttempt != 0
	switch {
	case m.BeforeAttempt < 0 || m.BeforeSeq < 0:
		return s.err(ctx, errs.Field("before_seq", "must not be negative"))
	case backwards && m.BeforeSeq == 0:
		return s.err(ctx, errs.Field("before_seq", "is required with before_attempt"))
	case backwards && m.Follow:
		return s.err(ctx, errs.Field("follow", "cannot be combined with before_seq"))
	case backwards && (m.AfterAttempt != 0 || m.AfterSeq != 0):
		return s.err(ctx, errs.Field("before_seq", "cannot be combined with after_seq"))
	case m.Tail < 0 || m.Tail > 10000:
		return s.err(ctx, errs.Field("tail", "must be between 0 and 10000"))
	case m.Tail > 0 && (backwards || m.AfterAttempt != 0 || m.AfterSeq != 0):
		return s.err(ctx, errs.Field("tail", "cannot be combined with after_seq or before_seq"))
	case m.Limit < 0 || m.Limit > 10000:
		return s.err(ctx, errs.Field("limit", "must be between 0 and 10000"))
	case m.Limit > 0 && m.Follow:
		return s.err(ctx, errs.Field("limit", "cannot be combined with follow"))
	}
	if _, err := s.store.GetJob(ctx, m.JobId); err != nil {
		return s.err(ctx, err)
	}
	attempt, seq := int(m.AfterAttempt), m.AfterSeq
	if backwards || m.Tail > 0 {
		limit := int(m.Limit)
		if m.Tail > 0 {
			limit = int(m.Tail)
		}
		lines, err := s.store.ListLogsBefore(ctx, m.JobId, int(m.BeforeAttempt), m.BeforeSeq, limit)
		if err != nil {
			return s.err(ctx, err)
		}
		for len(lines) > 0 {
			n := min(len(lines), logPage)
			if err := out.Send(&imsv1.StreamJobLogsResponse{Lines: linesToProto(lines[:n])}); err != nil {
				return err
			}
			last := lines[n-1]
			attempt, seq = last.Attempt, last.Seq
			lines = lines[n:]
		}
		if backwards {
			return nil
		}
		// A tail goes on like any stream, after its last line.
	}
	for {
		// Take the signal before reading, so a line written between the
		// read and the wait still wakes us.
		signal := s.hub.LogSignal(m.JobId)
		job, err := s.store.GetJob(ctx, m.JobId)
		if err != nil {
			return s.err(ctx, err)
		}
		left := int(m.Limit) // a forward page: at most this many lines
		for {
			page := logPage
			if m.Limit > 0 {
				if left == 0 {
					return nil
				}
				page = min(page, left)
			}
			lines, err := s.store.ListLogs(ctx, m.JobId, attempt, seq, page)
			if err != nil {
				return s.err(ctx, err)
			}
			if len(lines) == 0 {
				break
			}
			left -= len(lines)
			resp := &imsv1.StreamJobLogsResponse{Lines: linesToProto(lines)}
			if err := out.Send(resp); err != nil {
				return err
			}
			last := lines[len(lines)-1]
			attempt, seq = last.Attempt, last.Seq
			if len(lines) < page {
				break
			}
		}
		// The job was read before its lines: if it had ended then, every
		// line it will ever have has now been sent.
		if !m.Follow || job.State.Terminal() {
			if m.Follow {
				return out.Send(&imsv1.StreamJobLogsResponse{Job: s.jobToProto(ctx, job)})
			}
			return nil
		}
		t := time.NewTimer(s.cfg.FollowPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-signal:
		case <-t.C:
		}
		t.Stop()
	}
}

func linesToProto(lines []store.LogLine) []*imsv1.LogLine {
	out := make([]*imsv1.LogLine, len(lines))
	for i, l := range lines {
		out[i] = &imsv1.LogLine{Attempt: int32(l.Attempt), Seq: l.Seq, Time: timestamppb.New(l.Time), Stream: imsv1.LogStream(l.Stream), Text: l.Text}
	}
	return out
}

// WatchInstalls sends a snapshot of the fleet, then the installs that
// changed. It re-reads the fleet when the hub says something changed (at
// most every FleetCoalesce) and every FleetPoll, and sends only what differs
// from what this stream sent before.
func (s *Service) WatchInstalls(ctx context.Context, req *connect.Request[imsv1.WatchInstallsRequest], out *connect.ServerStream[imsv1.WatchInstallsResponse]) error {
	sel, err := parseSelector("selector", req.Msg.Selector)
	if err != nil {
		return s.err(ctx, err)
	}
	appID := ""
	if req.Msg.App != "" {
		app, err := s.store.GetApp(ctx, req.Msg.App)
		if errs.Is(err, errs.NotFound) {
			return s.err(ctx, errs.Field("app", "no app named %q", req.Msg.App))
		}
		if err != nil {
			return s.err(ctx, err)
		}
		appID = app.ID
	}
	var sent map[string]*imsv1.InstallStatus
	for {
		signal := s.hub.FleetSignal()
		read := time.Now()
		cur, err := s.fleet(ctx, appID, sel)
		if err != nil {
			return s.err(ctx, err)
		}
		resp := &imsv1.WatchInstallsResponse{Snapshot: sent == nil}
		for id, st := range cur {
			if old, ok := sent[id]; sent == nil || !ok || !proto.Equal(old, st) {
				resp.Installs = append(resp.Installs, st)
			}
		}
		for id := range sent {
			if _, ok := cur[id]; !ok {
				resp.RemovedInstallIds = append(resp.RemovedInstallIds, id)
			}
		}
		if resp.Snapshot || len(resp.Installs) > 0 || len(resp.RemovedInstallIds) > 0 {
			sort.Slice(resp.Installs, func(i, j int) bool { return resp.Installs[i].Install.Name < resp.Installs[j].Install.Name })
			if err := out.Send(resp); err != nil {
				return err
			}
		}
		sent = cur
		t := time.NewTimer(s.cfg.FleetPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-signal:
		case <-t.C:
		}
		t.Stop()
		// Let a burst of changes settle into one read.
		if wait := s.cfg.FleetCoalesce - time.Since(read); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
}

// fleet reads every install's status, keyed by install id.
func (s *Service) fleet(ctx context.Context, appID string, sel labels.Selector) (map[string]*imsv1.InstallStatus, error) {
	fs, err := s.store.Fleet(ctx, appID)
	if err != nil {
		return nil, err
	}
	apps, err := s.store.ListApps(ctx)
	if err != nil {
		return nil, err
	}
	appNames := make(map[string]string, len(apps))
	for _, a := range apps {
		appNames[a.ID] = a.Name
	}
	out := make(map[string]*imsv1.InstallStatus, len(fs.Installs))
	mask := s.inputMasker()
	for _, in := range matchInstalls(fs.Installs, sel) {
		p := &imsv1.Install{Id: in.ID, AppId: in.AppID, Name: in.Name, Inputs: mask.inputs(ctx, in), CreateTime: ts(in.CreatedAt),
			State: string(in.State), AppRevision: in.AppRevision, Settings: settingsToProto(in.Settings), Labels: in.Labels}
		p.Agent = s.agentStatus(fs.Agents[in.ID])
		out[in.ID] = &imsv1.InstallStatus{
			Install: p, AppName: appNames[in.AppID],
			QueuedJobs: int32(fs.Queued[in.ID]), RunningJobs: int32(fs.Active[in.ID]),
		}
	}
	return out, nil
}

func roleToProto(r store.Role) imsv1.Role {
	switch r {
	case store.RoleAdmin:
		return imsv1.Role_ROLE_ADMIN
	case store.RoleViewer:
		return imsv1.Role_ROLE_VIEWER
	}
	return imsv1.Role_ROLE_UNSPECIFIED
}

func appToProto(a store.App) *imsv1.App {
	return &imsv1.App{Id: a.ID, Name: a.Name, Description: a.Description, CreateTime: ts(a.CreatedAt)}
}

func (s *Service) installToProto(ctx context.Context, in store.Install) *imsv1.Install {
	return s.installToProtoMasked(ctx, in, s.inputMasker())
}

// installToProtoMasked is installToProto for one of several installs of
// an answer, which share mask.
func (s *Service) installToProtoMasked(ctx context.Context, in store.Install, mask *inputMasker) *imsv1.Install {
	p := &imsv1.Install{Id: in.ID, AppId: in.AppID, Name: in.Name, Inputs: mask.inputs(ctx, in), CreateTime: ts(in.CreatedAt),
		State: string(in.State), AppRevision: in.AppRevision, Settings: settingsToProto(in.Settings), Health: healthToProto(in.Health),
		Labels: in.Labels}
	agents, err := s.store.AgentsForInstall(ctx, in.ID)
	if err != nil {
		return p
	}
	p.Agent = s.agentStatus(agents)
	return p
}

// agentStatus describes an install's agent: the connected one, or else the
// newest. It is nil when no agent has enrolled.
func (s *Service) agentStatus(agents []store.Agent) *imsv1.AgentStatus {
	if len(agents) == 0 {
		return nil
	}
	a := agents[0]
	for _, b := range agents {
		if s.hub.Connected(b.ID) {
			a = b
			break
		}
	}
	connected := s.hub.Connected(a.ID) || (!a.LastSeenAt.IsZero() && s.now().Sub(a.LastSeenAt) < 3*s.cfg.HeartbeatInterval)
	st := &imsv1.AgentStatus{
		AgentId: a.ID, Connected: connected, LastSeenTime: ts(a.LastSeenAt),
		Version: a.Version, Hostname: a.Hostname, EnrollTime: ts(a.EnrolledAt),
	}
	if !a.ConflictAt.IsZero() && s.now().Sub(a.ConflictAt) < ConflictShownFor {
		st.IdentityConflict, st.IdentityConflictTime = a.Conflict, ts(a.ConflictAt)
	}
	if p := a.Permissions; p != nil {
		st.Permissions = &imsv1.Permissions{Provision: p.Provision, Maintenance: p.Maintenance, Deprovision: p.Deprovision,
			BreakGlass: p.BreakGlass, DisabledAll: p.DisabledAll, ChangeTime: ts(p.ChangedAt), ReportTime: ts(a.PermissionsAt),
			Windows: p.Windows}
	}
	if r := a.Stack; r != nil {
		st.Stack = &imsv1.StackReport{Format: r.Format, Stack: r.Stack, Inputs: r.Inputs, Outputs: r.Outputs, ReportTime: ts(r.ReportedAt)}
	}
	return st
}

// ConflictShownFor is how long after imsd last saw two processes share an
// agent's identity the install's agent status still says so (imsd sees it
// again at least once a minute while it goes on).
const ConflictShownFor = 10 * time.Minute

var statesToProto = func() map[store.JobState]imsv1.JobState {
	m := make(map[store.JobState]imsv1.JobState, len(statesFromProto))
	for k, v := range statesFromProto {
		m[v] = k
	}
	return m
}()

// jobToProto is a stored job as a message that every client can decode,
// whatever the row holds: a list or a get never fails because of one row
// (shownJob).
func (s *Service) jobToProto(ctx context.Context, j store.Job) *imsv1.Job {
	p, err := shownJob(j)
	if err != nil {
		s.log.WarnContext(ctx, "a stored job cannot be shown in full", "job", j.ID, "err", err)
	}
	return p
}

// shownJob is j as a message, and what could not be shown of it. A row
// imsd no longer enqueues (a config past agentproto's limits, stored by
// an older imsd or written to the database by hand) is still shown: a
// config that is not a JSON object, or is nested deeper than any client
// decodes (protobuf's decoders stop at 10,000 nested messages, and a
// config level is three), is left out, and a row whose other fields do
// not encode (a string that is not UTF-8) is shown with its id, install,
// state and times only. Either way the job's error says so, with why.
func shownJob(j store.Job) (*imsv1.Job, error) {
	p := jobFields(j)
	if _, err := proto.Marshal(p); err != nil {
		err = fmt.Errorf("this job's stored record cannot be shown: %w", err)
		return &imsv1.Job{
			Id: strings.ToValidUTF8(j.ID, "\uFFFD"), InstallId: strings.ToValidUTF8(j.InstallID, "\uFFFD"),
			State: statesToProto[j.State], Attempt: int32(j.Attempt), MaxAttempts: int32(j.MaxAttempts),
			CreateTime: ts(j.CreatedAt), StartTime: ts(j.StartedAt), EndTime: ts(j.EndedAt),
			Error: err.Error(),
		}, err
	}
	if len(j.Config) == 0 {
		return p, nil
	}
	var err error
	if d := jsonDepth(j.Config); d > agentproto.MaxConfigDepth+1 {
		err = fmt.Errorf("its config is nested %d levels deep, past the limit of %d", d-1, agentproto.MaxConfigDepth)
	} else if p.Config, err = maskedConfigJSON(j.Config); err != nil {
		p.Config = nil
		err = fmt.Errorf("its config is not a JSON object: %w", err)
	}
	if err != nil {
		// The error may quote the bytes it choked on.
		note := "imsd cannot show this job's config: " + strings.ToValidUTF8(err.Error(), "\uFFFD")
		if p.Error != "" {
			note = p.Error + "; " + note
		}
		p.Error = note
	}
	return p, err
}

// jsonDepth is how deeply b's arrays and objects nest (1 for a flat
// object), read from the bytes alone, strings skipped; for bytes that are
// not JSON it may be anything.
func jsonDepth(b []byte) int {
	depth, most, inString := 0, 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			most = max(most, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return most
}

// enqueuedToProto is jobToProto for a job just enqueued from a request
// with config cfg, which is what the stored config decodes to: the
// answer reuses it rather than decoding the JSON again.
func enqueuedToProto(j store.Job, cfg *structpb.Struct) *imsv1.Job {
	p := jobFields(j)
	p.Config = maskedConfig(cfg)
	if cfg == nil {
		p.Config = &structpb.Struct{}
	}
	return p
}

// jobFields is a job's message without its config.
func jobFields(j store.Job) *imsv1.Job {
	return &imsv1.Job{
		Id: j.ID, InstallId: j.InstallID, ComponentType: j.ComponentType, Operation: j.Operation,
		State: statesToProto[j.State], Attempt: int32(j.Attempt), MaxAttempts: int32(j.MaxAttempts),
		TimeoutSeconds: int64(j.Timeout / time.Second), AgentId: j.AgentID,
		CreateTime: ts(j.CreatedAt), StartTime: ts(j.StartedAt), EndTime: ts(j.EndedAt),
		LeaseExpireTime: ts(j.LeaseDeadline), CancelRequested: j.CancelRequested,
		ExitCode: int32(j.ExitCode), Error: j.Error, Outputs: j.Outputs, CreatedBy: j.CreatedBy,
		Mode: string(j.Mode), Component: j.Component, ReleaseId: j.ReleaseID, WindowBound: j.WindowBound,
	}
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
