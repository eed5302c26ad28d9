package operatorapi

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

var rolesToProto = map[access.Role]imsv1.Role{
	access.Admin: imsv1.Role_ROLE_ADMIN, access.Viewer: imsv1.Role_ROLE_VIEWER,
	access.Operator: imsv1.Role_ROLE_OPERATOR, access.Support: imsv1.Role_ROLE_SUPPORT,
}

func roleToProto(r access.Role) imsv1.Role { return rolesToProto[r] }

// roleFromProto returns the role r names.
func roleFromProto(r imsv1.Role) (access.Role, bool) {
	for k, v := range rolesToProto {
		if v == r {
			return k, true
		}
	}
	return "", false
}

func grantToProto(g access.Grant) *imsv1.RoleGrant {
	return &imsv1.RoleGrant{Role: roleToProto(g.Role), Scope: g.Scope.String(), Source: g.Source}
}

func apiTokenToProto(t store.APIToken) *imsv1.ApiToken {
	return &imsv1.ApiToken{Id: t.ID, Name: t.Name, Grant: &imsv1.RoleGrant{Role: roleToProto(access.Role(t.Role)), Scope: t.Scope, Source: "token " + t.Name},
		CreateTime: ts(t.CreatedAt), ExpireTime: ts(t.ExpiresAt), LastUsedTime: ts(t.LastUsedAt), CreatedBy: t.CreatedBy}
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
// online reports whether agent a is connected at now: to this replica, or
// to another (store.Agent.StreamMayBeOpen), within a lease and three
// heartbeats of its last-seen: a replica writes last-seen at the first
// message a lease after its last write, and a loaded database may take a
// heartbeat or two more to commit it.
func (s *Service) online(a store.Agent, now time.Time) bool {
	return s.hub.Connected(a.ID) || a.StreamMayBeOpen(now, s.cfg.LeaseDuration+3*s.cfg.HeartbeatInterval)
}

func (s *Service) agentStatus(agents []store.Agent) *imsv1.AgentStatus {
	if len(agents) == 0 {
		return nil
	}
	now := s.now()
	a := agents[0]
	for _, b := range agents {
		if s.online(b, now) {
			a = b
			break
		}
	}
	connected := s.online(a, now)
	st := &imsv1.AgentStatus{
		AgentId: a.ID, Connected: connected, LastSeenTime: ts(a.LastSeenAt),
		Version: a.Version, Hostname: a.Hostname, EnrollTime: ts(a.EnrolledAt),
		Health: string(a.Health), HealthTime: ts(healthSince(a)), HealthReason: a.HealthReason,
		RevokeTime: ts(a.RevokedAt), RevokeReason: a.RevokedReason,
		KeyRotateTime: ts(a.KeyRotatedAt),
	}
	if len(a.PublicKey) == ed25519.PublicKeySize {
		st.KeyId = agentproto.KeyID(a.PublicKey)
	}
	if len(a.NextPublicKey) == ed25519.PublicKeySize {
		st.NextKeyId = agentproto.KeyID(a.NextPublicKey)
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
	if u := a.Update; u != nil {
		st.Update = &imsv1.AgentUpdate{Mode: u.Mode, Pin: u.Pin, Allow: u.Allow, Window: u.Window,
			LastKind: u.LastKind, LastRelease: u.LastRelease, LastOfferId: u.LastOfferID, LastVersion: u.LastVersion,
			LastReason: u.LastReason, LastTime: ts(u.LastAt), ReportTime: ts(u.ReportedAt), LastCause: u.LastCause}
	}
	if o := a.UpdateOffer; o != nil {
		st.UpdateOffer = &imsv1.AgentUpdateOffer{Id: o.ID, Release: o.Release, OfferedBy: o.OfferedBy, OfferTime: ts(o.OfferedAt),
			WithdrawnBy: o.WithdrawnBy, WithdrawReason: o.WithdrawReason}
		if o.Withdrawn() {
			st.UpdateOffer.WithdrawTime = ts(o.WithdrawnAt)
		}
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

// healthSince is when agent a entered its health: its enrolment until
// the health sweeper first changed it.
func healthSince(a store.Agent) time.Time {
	if a.HealthSince.IsZero() {
		return a.EnrolledAt
	}
	return a.HealthSince
}
