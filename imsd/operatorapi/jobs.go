package operatorapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/workflow"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

var operations = map[string]bool{"plan": true, "apply": true, "destroy": true, "plan-destroy": true}

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
		return store.Job{}, errs.Field("operation", "must be plan, apply, destroy or plan-destroy, got %q", m.Operation)
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
	// The build agent runs build jobs only, and an install's agent never
	// one (each would refuse it): say so here, before a job waits for
	// an agent that will not run it.
	switch {
	case installID == store.VendorInstallID && m.ComponentType != store.BuildType:
		return store.Job{}, errs.Field("install", "%q is the vendor's build install: its agent runs build jobs only (byoc build), not %q jobs", m.Install, m.ComponentType)
	case installID != store.VendorInstallID && m.ComponentType == store.BuildType:
		return store.Job{}, errs.Field("component_type", "build jobs run on the vendor's build agent only (byoc build), not on install %q", m.Install)
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
	var handovers []dispatch.Handover
	for i, j := range out {
		sess := sessions[i]
		if sess != nil && j.State == store.JobAssigned {
			handovers = append(handovers, dispatch.Handover{Session: sess, Job: j})
			continue
		}
		if sess != nil {
			sess.Release()
		}
		s.hub.Wake(j.InstallID)
	}
	if len(handovers) > 0 {
		// Together: the agent API signs a batch's assignments at once.
		s.hub.DeliverAll(handovers)
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
	selected, err := s.selectedInstalls(ctx, "selector", m.Selector)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	v, err := s.readView(ctx)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	// The query reads only the installs the caller may see, so a scoped
	// caller's pages are full.
	f.InstallIDs = v.restrict(selected)
	jobs, next, err := s.store.ListJobs(ctx, f)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListJobsResponse{NextPageToken: next}
	for _, j := range jobs {
		if !v.visible(j.InstallID) {
			continue // past maxQueryIDs, a page may hold fewer jobs
		}
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
	for _, a := range agents {
		if s.online(a, now) {
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
