// Package agentapi serves byoc.agent.v1.AgentService: enrolment, and the one
// long-lived stream each agent holds. On that stream imsd hands out jobs under
// leases and accepts acks, logs and results only from the agent that holds
// the
// current lease, identified by the job's fencing token.
package agentapi

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/rpcerr"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/telemetry"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// Limits on what an agent may send. An agent splits longer output itself;
// a line over the limit is a protocol violation that ends the stream.
const (
	MaxLogLineBytes = 64 << 10
	MaxLogBatch     = 1000
	// MaxLogBatchBytes is the most log text an agent sends in one batch
	// (agentd's maxBatchBytes), well under the 16 MiB imsd reads in one
	// message. An imported results file's job log is held to one
	// batch's limits (operatorapi's importedLog).
	MaxLogBatchBytes = 4 << 20
)

// Config holds the lease timing.
type Config struct {
	// LeaseDuration is how long an assignment stays valid without a heartbeat.
	LeaseDuration time.Duration
	// LeaseGrace is how long past the end of a lease imsd still waits
	// before the job may be handed out again: the agent counts the lease
	// from before imsd renewed it and stops the job itself when it ends,
	// and the grace covers clock rates and the plugin's stop. The lease
	// deadline stored for a job is the end of the lease plus the grace.
	LeaseGrace time.Duration
	// HeartbeatInterval is how often agents are told to heartbeat.
	HeartbeatInterval time.Duration
	// HelloTimeout bounds the wait for an agent's signed hello.
	HelloTimeout time.Duration
	// SigningKey signs every assignment; its public key is what an
	// enrolment returns.
	SigningKey auth.SigningKey
	// KeyChain endorses SigningKey through its rotations
	// (auth.RotateSigningKey); every welcome and enrolment carries it.
	KeyChain []agentproto.Endorsement
	// Retired are the retirements of SigningKey's predecessors (imsd key
	// retire); every challenge carries them.
	Retired []agentproto.Retirement
	// Version is imsd's own version: agents outside the version-skew
	// window it serves (agentproto.AgentVersionServed) are refused.
	Version string
	// Registry, when set, is the vendor registry: image and build jobs
	// carry a one-time grant for it (grants.go).
	Registry *RegistryConfig
	// MaxHellos bounds the hellos served at once (admission.go; default
	// DefaultMaxHellos).
	MaxHellos int
	// Telemetry, when set, holds the app telemetry agents forward
	// (telemetry.go); TelemetryConfig returns the app's telemetry
	// declaration for an install (nil: none), sent to an agent whose
	// customer turned telemetry on.
	Telemetry       *telemetry.Store
	TelemetryConfig func(ctx context.Context, installID string) (*agentv1.TelemetryConfig, error)
	// SensitiveEnv returns the values of a debug job's sensitive
	// arguments, which imsd holds in memory only (workflow.SensitiveValues).
	SensitiveEnv func(jobID string) (map[string]string, bool)
}

// Observer receives events worth a metric. All methods must be cheap.
type Observer interface {
	Connected(delta int)
	Picked(latency time.Duration)
	Finished(state store.JobState)
	// IdentityConflict counts a hello refused because another process
	// of the same agent holds its stream.
	IdentityConflict()
}

// Service implements agentv1connect.AgentServiceHandler.
type Service struct {
	store *store.Store
	hub   *dispatch.Hub
	cfg   Config
	now   func() time.Time
	log   *slog.Logger
	obs   Observer
	// chain is cfg.KeyChain as sent in welcomes and enrolments; retired
	// cfg.Retired as sent in challenges.
	chain   []*agentv1.KeyEndorsement
	retired []*agentv1.KeyRetirement

	// instances remembers, per agent, the processes seen holding its
	// stream, to tell two processes sharing one identity (conflict.go).
	instMu    sync.Mutex
	instances map[string]*instanceRecord
	// admit bounds the hellos served at once (admission.go).
	admit *admission
	// streams counts the streams being served (Drain).
	streams sync.WaitGroup
}

// Drain waits until every stream being served has ended (its end
// recorded) or ctx ends, and reports whether they all did. The server
// calls it after cutting the connections, before closing the store.
func (s *Service) Drain(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { s.streams.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// New returns the agent service.
func New(st *store.Store, hub *dispatch.Hub, cfg Config, now func() time.Time, log *slog.Logger, obs Observer) *Service {
	if cfg.SigningKey.Private == nil {
		panic("agentapi: Config.SigningKey is required: every assignment is signed")
	}
	chain := make([]*agentv1.KeyEndorsement, len(cfg.KeyChain))
	for i, e := range cfg.KeyChain {
		chain[i] = &agentv1.KeyEndorsement{SignerPublicKey: e.Signer, PublicKey: e.Key, Signature: e.Signature}
	}
	retired := make([]*agentv1.KeyRetirement, len(cfg.Retired))
	for i, r := range cfg.Retired {
		retired[i] = &agentv1.KeyRetirement{Signer: r.Signer, Key: r.Key, Signature: r.Signature}
	}
	s := &Service{store: st, hub: hub, cfg: cfg, now: now, log: log, obs: obs, chain: chain, retired: retired, admit: newAdmission(cfg.MaxHellos)}
	if hub != nil {
		// An enqueue's hand-overs are built and signed together.
		hub.SetDeliverAll(s.deliverAll)
	}
	return s
}

// Enroll binds a new agent identity to the install of a single-use token.
func (s *Service) Enroll(ctx context.Context, req *connect.Request[agentv1.EnrollRequest]) (*connect.Response[agentv1.EnrollResponse], error) {
	m := req.Msg
	switch {
	case m.EnrollmentToken == "":
		return nil, s.err(ctx, errs.Field("enrollment_token", "is required"))
	case len(m.PublicKey) != 32:
		return nil, s.err(ctx, errs.Field("public_key", "must be a 32-byte Ed25519 public key, got %d bytes", len(m.PublicKey)))
	case m.Role != "" && m.Role != "install" && m.Role != "build":
		return nil, s.err(ctx, errs.Field("role", "must be %q or %q, got %q", "install", "build", m.Role))
	case len(m.Hostname) > 255:
		return nil, s.err(ctx, errs.Field("hostname", "is longer than 255 bytes"))
	case len(m.Version) > 100:
		return nil, s.err(ctx, errs.Field("version", "is longer than 100 bytes"))
	}
	now := s.now()
	// Only the token's secret part is hashed: the key id after it is for
	// the agent, which checks the public key below against it.
	a, err := s.store.Enroll(ctx, auth.EnrollTokenHash(m.EnrollmentToken), store.Agent{
		ID:         auth.NewID("agt_"),
		PublicKey:  m.PublicKey,
		Hostname:   m.Hostname,
		Version:    m.Version,
		EnrolledAt: now,
		Build:      m.Role == "build",
	}, now)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	s.log.InfoContext(ctx, "agent enrolled", "agent", a.ID, "install", a.InstallID, "hostname", a.Hostname)
	return connect.NewResponse(&agentv1.EnrollResponse{AgentId: a.ID, InstallId: a.InstallID, ImsdPublicKey: s.cfg.SigningKey.Public, KeyChain: s.chain}), nil
}

// reclaimAfter is the lease deadline stored for a lease renewed at now:
// the job may be handed out again only after it.
func (s *Service) reclaimAfter(now time.Time) time.Time {
	return now.Add(s.cfg.LeaseDuration + s.cfg.LeaseGrace)
}

func (s *Service) err(ctx context.Context, err error) error { return rpcerr.ToConnect(ctx, s.log, err) }
