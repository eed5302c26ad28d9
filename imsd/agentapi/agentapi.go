// Package agentapi serves byoc.agent.v1.AgentService: enrolment, and the one
// long-lived stream each agent holds. On that stream imsd hands out jobs under
// leases and accepts acks, logs and results only from the agent that holds the
// current lease, identified by the job's fencing token.
package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/rpcerr"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// Limits on what an agent may send. An agent splits longer output itself;
// a line over the limit is a protocol violation that ends the stream.
const (
	MaxLogLineBytes = 64 << 10
	MaxLogBatch     = 1000
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
	// Registry, when set, is the vendor registry: image and build jobs
	// carry a one-time grant for it (grants.go).
	Registry *RegistryConfig
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
	// chain is cfg.KeyChain as sent in welcomes and enrolments.
	chain []*agentv1.KeyEndorsement

	// instances remembers, per agent, the processes seen holding its
	// stream, to tell two processes sharing one identity (conflict.go).
	instMu    sync.Mutex
	instances map[string]*instanceRecord
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
	return &Service{store: st, hub: hub, cfg: cfg, now: now, log: log, obs: obs, chain: chain}
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

type stream = connect.BidiStream[agentv1.ConnectRequest, agentv1.ConnectResponse]

// Stream is one agent stream as Serve sees it: the connect-go handler's
// (Connect, below) or imsd's own agent-wire server's (package agentwire).
type Stream interface {
	// Send sends one message. It may be called from any goroutine, but
	// not from two at once (conn.mu serialises sends).
	Send(*agentv1.ConnectResponse) error
	// Flush sends at once what earlier Sends left pending: agentwire holds
	// the answers to messages that arrived together until the handler
	// next waits for the agent, and a message sent from another goroutine
	// (an assignment, a cancellation) must not wait for that.
	Flush() error
	// Receive returns the next message. With limit > 0, a wait of more
	// than limit ends it with an error matching os.ErrDeadlineExceeded,
	// after which the stream is unusable. io.EOF (or an error wrapping it,
	// or a cancellation) means the agent went away.
	Receive(limit time.Duration) (*agentv1.ConnectRequest, error)
}

// Connect runs one agent stream served by connect-go (the gRPC protocol,
// gRPC-Web, and Connect clients whose connection was not routed to the
// agent-wire server) through Serve.
func (s *Service) Connect(ctx context.Context, st *stream) error {
	body := bodyFrom(ctx)
	if body == nil {
		// Without the body there is no way to end a read blocked on a
		// silent agent: the hello timeout and the idle cut-off need it.
		return connect.NewError(connect.CodeInternal, errors.New("agent stream handler mounted without agentapi.KeepBody"))
	}
	json := strings.Contains(st.RequestHeader().Get("Content-Type"), "json")
	return s.Serve(ctx, &bidiStream{st: st, body: body, json: json})
}

// Serve runs one agent stream until the agent goes away, a newer stream of
// the same agent replaces it, or the agent breaks the protocol. ctx ends
// when the stream does.
func (s *Service) Serve(ctx context.Context, st Stream) error {
	c, err := s.open(ctx, st)
	if c == nil {
		return err
	}
	defer s.close(ctx, c)
	if err != nil {
		return err
	}
	return c.run(ctx)
}

// open runs the stream up to the welcome: challenge, hello, signature
// check, registration with the hub, re-attached jobs. It returns a nil
// conn if the stream ended before registration; otherwise close must
// follow. It is kept apart from run, so that the stack an idle stream
// waits on holds only run's small frame.
//
//go:noinline
func (s *Service) open(ctx context.Context, st Stream) (*conn, error) {
	nonce := auth.NewNonce()
	if err := st.Send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Challenge{Challenge: &agentv1.Challenge{Nonce: nonce}}}); err != nil {
		return nil, err
	}
	m, err := st.Receive(s.cfg.HelloTimeout)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("hello: none within %s", s.cfg.HelloTimeout))
		}
		return nil, ignoreEOF(err)
	}
	hello := m.GetHello()
	if hello == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("hello: the first message on the stream must be a hello"))
	}
	// Database work and signature checks grow a goroutine's stack, and the
	// stream's own goroutine then sits idle for days with whatever stack
	// it has: they run on a short-lived goroutine (as does the welcome).
	var agent store.Agent
	var verified bool
	err = onOwnStack(func() error {
		var err error
		agent, err = s.store.GetAgent(ctx, hello.AgentId)
		verified = err == nil && agentproto.VerifyChallenge(agent.PublicKey, agent.ID, nonce, hello.Signature)
		return err
	})
	if err != nil && !errs.Is(err, errs.NotFound) {
		return nil, s.err(ctx, err)
	}
	if !verified {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("hello: unknown agent or bad signature; enrol again with a new enrolment token"))
	}
	if a, ok := st.(interface{ authenticated() }); ok {
		a.authenticated()
	}
	if hello.Capacity < 1 || hello.Capacity > 1000 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("hello.capacity: must be between 1 and 1000, got %d", hello.Capacity))
	}
	if len(hello.Instance) > 64 || len(hello.Hostname) > 255 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("hello.instance or hello.hostname: too long (64 and 255 bytes at most)"))
	}
	if err := s.checkInstance(ctx, agent, hello); err != nil {
		return nil, err
	}

	c := &conn{
		svc:      s,
		st:       st,
		agent:    agent,
		capacity: int(hello.Capacity),
		// What is stored now: a reconnecting agent whose permissions did
		// not change costs no write.
		perms:     agent.Permissions,
		auditCopy: hello.AuditCopy,
		auditSeq:  hello.AuditSeq,
	}
	c.ctx = ctx
	c.sess = s.hub.Register(agent.ID, agent.InstallID, dispatch.Handlers{
		Wake:     c.wake,
		Cancel:   c.cancel,
		Replaced: func() { c.replaced.Store(true) },
		Reserve:  c.reserve,
		Release:  func() { c.free.Add(1) },
		Deliver:  c.deliver,
	})
	s.obs.Connected(1)
	return c, c.welcome(ctx, hello)
}

// close unregisters a stream that open registered.
func (s *Service) close(ctx context.Context, c *conn) {
	s.hub.Unregister(c.sess)
	if c.lastHeard.After(c.lastSeen) {
		// The stream has ended, and its context with it; the write is
		// still owed, bounded on its own.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := s.store.TouchAgent(wctx, c.agent.ID, c.lastHeard); err != nil {
			c.logger().WarnContext(ctx, "touch agent at disconnect", "err", err)
		}
		cancel()
	}
	c.mu.Lock()
	c.dead = true // no send after the handler returns
	c.mu.Unlock()
	s.obs.Connected(-1)
	c.logger().InfoContext(ctx, "agent disconnected")
}

// run reads the stream after the welcome. From here the stream's own
// goroutine reads it, so an idle agent costs imsd one goroutine (plus, on
// the connect-go path, the HTTP/2 connection's own). Wake-ups and
// cancellations arrive through the hub's handlers. An agent silent for
// three heartbeats is cut off by the stream's Receive limit; on the
// connect-go path a dead connection is also found by HTTP/2 pings.
func (c *conn) run(ctx context.Context) error {
	idleLimit := 3 * c.svc.cfg.HeartbeatInterval
	for {
		m, err := c.st.Receive(idleLimit)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("no message from the agent for %s", idleLimit))
			}
			return ignoreEOF(err)
		}
		if c.replaced.Load() {
			return connect.NewError(connect.CodeAborted, errors.New("replaced by a newer stream of the same agent"))
		}
		c.mu.Lock()
		err = c.handle(ctx, m)
		c.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// bidiStream adapts connect-go's handler stream to Stream. A Receive
// limit closes the request body (KeepBody) when it passes, the one way to
// end a read blocked on an agent that went silent without closing its
// connection.
type bidiStream struct {
	st *stream
	// json is set when the stream's codec is JSON.
	json bool
	body *preauthBody
	cut  *time.Timer
	idle atomic.Bool
}

func (b *bidiStream) Send(m *agentv1.ConnectResponse) error {
	if b.json {
		if err := decodeConfig(m); err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
	}
	return b.st.Send(m)
}

// authenticated lifts the limit on what the agent may send.
func (b *bidiStream) authenticated() { b.body.lift() }

// Flush does nothing: connect-go sends each message at once.
func (b *bidiStream) Flush() error { return nil }

func (b *bidiStream) Receive(limit time.Duration) (*agentv1.ConnectRequest, error) {
	if limit <= 0 {
		return b.st.Receive()
	}
	if b.cut == nil {
		b.cut = time.AfterFunc(limit, func() { b.idle.Store(true); b.body.Close() })
	} else {
		b.cut.Reset(limit)
	}
	m, err := b.st.Receive()
	b.cut.Stop()
	if err != nil && b.idle.Load() {
		return nil, fmt.Errorf("receive: %w", os.ErrDeadlineExceeded)
	}
	return m, err
}

// conn is the state of one authenticated agent stream. mu guards the
// fields below it and serialises sends on the stream.
type conn struct {
	svc      *Service
	st       Stream
	ctx      context.Context
	agent    store.Agent
	sess     *dispatch.Session
	capacity int

	replaced atomic.Bool
	// claiming and wakePending run at most one claim goroutine per stream.
	claiming, wakePending atomic.Bool
	// free counts the job slots neither in flight nor reserved: capacity
	// less len(inflight) less the slots taken by a claim running now or
	// reserved for a job handed over at enqueue (dispatch.Hub.Reserve).
	// It is zero until the welcome; changes to inflight adjust it.
	free atomic.Int32

	mu       sync.Mutex
	dead     bool
	inflight map[string]int64 // job id -> fencing token
	// perms is the permission state last recorded for this agent (nil:
	// none yet on this stream).
	perms    *store.Permissions
	lastSeen time.Time
	// lastHeard is when the agent's last hello or heartbeat arrived; only
	// the stream's own goroutine (handle, close) reads or writes it.
	lastHeard time.Time
	// lastForced is when the queue was last read without a hub mark.
	lastForced time.Time
	// auditCopy is set when the agent keeps a copy of its install's audit
	// chain (Hello.audit_copy); auditSeq is the last record sent to it
	// (or that it held at its hello). audit.go.
	auditCopy bool
	auditSeq  int64
	// lastAudit is when a heartbeat last sent the agent its records;
	// auditDirty is set when a result added records since.
	lastAudit  time.Time
	auditDirty bool
}

// welcome re-attaches the jobs the agent says it runs, answers the hello and
// hands out what is queued. It runs on a short-lived goroutine: the database
// work grows a goroutine's stack, and the stream's own goroutine then sits
// idle for days with whatever stack it has.
func (c *conn) welcome(ctx context.Context, hello *agentv1.Hello) error {
	return onOwnStack(func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.welcomeLocked(ctx, hello)
	})
}

// onOwnStack runs f on a goroutine of its own and waits for it, so that
// the stack f grows is not the caller's.
func onOwnStack(f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return <-done
}

func (c *conn) welcomeLocked(ctx context.Context, hello *agentv1.Hello) error {
	s := c.svc
	now := s.now()
	renewed, lost, err := s.store.RenewLeases(ctx, c.agent.ID, leases(hello.Running), s.reclaimAfter(now))
	if err != nil {
		return s.err(ctx, err)
	}
	tokens := make(map[string]int64, len(hello.Running))
	for _, r := range hello.Running {
		tokens[r.JobId] = r.FencingToken
	}
	for _, id := range renewed {
		c.track(id, tokens[id])
	}
	c.free.Add(int32(c.capacity - len(c.inflight)))
	if err := c.send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Welcome{Welcome: &agentv1.Welcome{
		InstallId:           c.agent.InstallID,
		HeartbeatIntervalMs: s.cfg.HeartbeatInterval.Milliseconds(),
		LeaseDurationMs:     s.cfg.LeaseDuration.Milliseconds(),
		Reattached:          renewed,
		Lost:                lost,
		KeyChain:            s.chain,
	}}}); err != nil {
		return err
	}
	if err := c.sendAudit(ctx); err != nil {
		return err
	}
	// A job cancelled while its agent was away learns of it now.
	for _, id := range renewed {
		if j, err := s.store.GetJob(ctx, id); err == nil && j.CancelRequested {
			if err := c.send(cancelMsg(id, j.CancelReason)); err != nil {
				return err
			}
		}
	}
	c.logger().InfoContext(ctx, "agent connected", "reattached", len(renewed), "lost", len(lost))
	c.touch(ctx, now)
	c.reportPermissions(ctx, hello.Permissions, now)
	c.reportStack(ctx, hello.Stack, now)
	c.lastForced = now
	return c.claim(ctx, true)
}

// wake is the hub's Wake handler: it starts the claim goroutine unless one
// is running, which then claims again for a wake that came meanwhile.
func (c *conn) wake() {
	c.wakePending.Store(true)
	if !c.claiming.CompareAndSwap(false, true) {
		return
	}
	go func() {
		for {
			for c.wakePending.Swap(false) {
				c.mu.Lock()
				err := c.claim(c.ctx, false)
				if !c.dead {
					// Not the stream's goroutine: send the assignments now.
					if ferr := c.st.Flush(); err == nil {
						err = ferr
					}
				}
				c.mu.Unlock()
				if err != nil {
					c.logger().DebugContext(c.ctx, "claim after wake-up", "err", err)
				}
			}
			c.claiming.Store(false)
			// A wake between the last Swap and the Store above found the
			// flag still set and returned; pick it up here.
			if !c.wakePending.Load() || !c.claiming.CompareAndSwap(false, true) {
				return
			}
		}
	}()
}

// reserve is the hub's Reserve handler: it takes a free slot, if any.
func (c *conn) reserve() bool {
	for {
		n := c.free.Load()
		if n <= 0 {
			return false
		}
		if c.free.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// takeSlots takes every free slot for a claim and returns how many; the
// claim gives back what it does not use.
func (c *conn) takeSlots() int {
	for {
		n := c.free.Load()
		if n <= 0 {
			return 0
		}
		if c.free.CompareAndSwap(n, 0) {
			return int(n)
		}
	}
}

// track records a job in flight; the map is made on the first job, so an
// agent that never ran one does not hold it.
func (c *conn) track(jobID string, token int64) {
	if c.inflight == nil {
		c.inflight = make(map[string]int64)
	}
	c.inflight[jobID] = token
}

// logger is the service's logger with the agent's attributes. It is made
// at each (rare) use rather than kept: an idle stream need not hold it.
func (c *conn) logger() *slog.Logger {
	return c.svc.log.With("agent", c.agent.ID, "install", c.agent.InstallID)
}

// drop forgets a job in flight and frees its slot.
func (c *conn) drop(jobID string) {
	if _, ok := c.inflight[jobID]; ok {
		delete(c.inflight, jobID)
		c.free.Add(1)
	}
}

// deliver is the hub's Deliver handler: it sends a job handed over at
// enqueue, in the slot reserve took. It returns at once; the send waits
// for the stream's lock on a goroutine of its own, so the enqueue's
// answer does not wait for this agent's writes.
func (c *conn) deliver(j store.Job) {
	go func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.dead {
			return // the lease expires and the sweeper requeues the job
		}
		c.track(j.ID, j.FencingToken)
		a, err := c.svc.assignment(c.ctx, j, c.agent.InstallID)
		if err != nil {
			c.logger().ErrorContext(c.ctx, "encode assignment", "job", j.ID, "err", err)
			return
		}
		if err := c.sendNow(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Assignment{Assignment: a}}); err != nil {
			c.logger().DebugContext(c.ctx, "send assignment", "job", j.ID, "err", err)
			return
		}
		c.picked(j)
	}()
}

// cancel is the hub's Cancel handler.
func (c *conn) cancel(req dispatch.CancelRequest) {
	go func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.inflight[req.JobID]; ok {
			if err := c.sendNow(cancelMsg(req.JobID, req.Reason)); err != nil {
				c.logger().WarnContext(c.ctx, "send cancel", "job", req.JobID, "err", err)
			}
		}
	}()
}

func (c *conn) send(m *agentv1.ConnectResponse) error {
	if c.dead {
		return errors.New("stream closed")
	}
	return c.st.Send(m)
}

// sendNow is send for a goroutine other than the stream's own: the message
// leaves at once, with whatever was pending before it.
func (c *conn) sendNow(m *agentv1.ConnectResponse) error {
	if err := c.send(m); err != nil {
		return err
	}
	return c.st.Flush()
}

func (c *conn) touch(ctx context.Context, now time.Time) {
	c.lastHeard = now
	// Touch at most once per lease duration: last-seen is for people, the
	// lease deadline is what the protocol relies on. While the stream is
	// live people are shown "connected", not this time; close records the
	// last message's, so an agent that went away shows when it was heard.
	if now.Sub(c.lastSeen) < c.svc.cfg.LeaseDuration {
		return
	}
	if err := c.svc.store.TouchAgent(ctx, c.agent.ID, now); err != nil {
		c.logger().WarnContext(ctx, "touch agent", "err", err)
		return
	}
	c.lastSeen = now
}

// reportPermissions records the permission state the agent reported, when
// it differs from what is recorded (read with the agent at the hello,
// then what this stream wrote).
// imsd only shows it; it never decides a job by it, the agent does. An
// agent that reports none (an older agentd) leaves it as it was. c.mu is
// held.
func (c *conn) reportPermissions(ctx context.Context, p *agentv1.Permissions, now time.Time) {
	if p == nil {
		return
	}
	sp := store.Permissions{Provision: p.Provision, Maintenance: p.Maintenance, Deprovision: p.Deprovision,
		BreakGlass: p.BreakGlass, DisabledAll: p.DisabledAll}
	if p.ChangeTime != nil {
		sp.ChangedAt = p.ChangeTime.AsTime()
	}
	if c.perms != nil && c.perms.Equal(sp) {
		return
	}
	if err := c.svc.store.SetAgentPermissions(ctx, c.agent.ID, sp, now); err != nil {
		c.logger().WarnContext(ctx, "record permissions", "err", err)
		return
	}
	if c.perms != nil || p.ChangeTime != nil {
		c.logger().InfoContext(ctx, "customer changed permissions", "provision", sp.Provision, "maintenance", sp.Maintenance,
			"deprovision", sp.Deprovision, "break_glass", sp.BreakGlass, "disabled_all", sp.DisabledAll)
	}
	c.perms = &sp
	c.svc.hub.FleetChanged()
}

// reportStack records what the agent reported of its install stack in its
// hello, when it differs from what is recorded (a reconnect with the same
// stack costs no write). An agent without a stack reports none and leaves
// the record as it was. c.mu is held.
func (c *conn) reportStack(ctx context.Context, p *agentv1.StackReport, now time.Time) {
	if p == nil {
		return
	}
	r := store.StackReport{Format: p.Format, Stack: p.Stack, Inputs: p.Inputs, Outputs: p.Outputs}
	if c.agent.Stack != nil && c.agent.Stack.Equal(r) {
		return
	}
	if err := c.svc.store.SetAgentStack(ctx, c.agent.ID, r, now); err != nil {
		c.logger().WarnContext(ctx, "record install stack", "err", err)
		return
	}
	c.logger().InfoContext(ctx, "agent reported its install stack", "format", r.Format, "stack", r.Stack, "inputs", len(r.Inputs))
	c.agent.Stack = &r
	c.svc.hub.FleetChanged()
}

// claim hands out queued jobs of the install up to the agent's free
// capacity. With force unset it first asks the hub whether anything may be
// queued, which saves a database round trip after most finished jobs.
// c.mu is held.
func (c *conn) claim(ctx context.Context, force bool) error {
	s := c.svc
	for {
		if c.dead {
			return nil
		}
		free := c.takeSlots()
		if free <= 0 {
			return nil
		}
		if !s.hub.TakeQueued(c.agent.InstallID) && !force {
			c.free.Add(int32(free))
			return nil
		}
		now := s.now()
		jobs, err := s.store.ClaimJobs(ctx, c.agent.InstallID, store.Writer{AgentID: c.agent.ID}, free, s.reclaimAfter(now), now)
		c.free.Add(int32(free - len(jobs)))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.logger().ErrorContext(ctx, "claim jobs", "err", err)
			return nil // the next wake or heartbeat tries again
		}
		if len(jobs) > 0 {
			s.hub.FleetChanged()
		}
		for _, j := range jobs {
			c.track(j.ID, j.FencingToken)
			a, err := c.svc.assignment(ctx, j, c.agent.InstallID)
			if err != nil {
				c.logger().ErrorContext(ctx, "encode assignment", "job", j.ID, "err", err)
				continue
			}
			if err := c.send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Assignment{Assignment: a}}); err != nil {
				return err
			}
			c.picked(j)
		}
		if len(jobs) < free {
			return nil
		}
		// The queue may hold more than this agent can take: let the
		// install's other agents look too.
		s.hub.Wake(c.agent.InstallID)
		force = false
	}
}

func (c *conn) handle(ctx context.Context, m *agentv1.ConnectRequest) error {
	s := c.svc
	now := s.now()
	switch msg := m.Msg.(type) {
	case *agentv1.ConnectRequest_Heartbeat:
		c.touch(ctx, now)
		c.reportPermissions(ctx, msg.Heartbeat.Permissions, now)
		renewed, lost, err := s.store.RenewLeases(ctx, c.agent.ID, leases(msg.Heartbeat.Running), s.reclaimAfter(now))
		if err != nil {
			return s.err(ctx, err)
		}
		if len(msg.Heartbeat.Running) > 0 {
			// The agent counts its own lease from confirmed renewals.
			if err := c.send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Renewed{Renewed: &agentv1.LeasesRenewed{
				HeartbeatSeq: msg.Heartbeat.Seq, JobIds: renewed,
			}}}); err != nil {
				return err
			}
		}
		for _, id := range lost {
			c.drop(id)
			if err := c.send(rejected(0, id, connect.CodeFailedPrecondition.String(), fmt.Sprintf("lease on job %s was lost; stop it", id))); err != nil {
				return err
			}
		}
		// A cancellation requested through another imsd replica reaches
		// the agent here. A single SQLite imsd delivers every cancellation
		// through the hub, so it skips these reads.
		if s.store.Dialect() == store.DialectSQLite {
			renewed = nil
		}
		for _, id := range renewed {
			j, err := s.store.GetJob(ctx, id)
			if err == nil && j.CancelRequested {
				if err := c.send(cancelMsg(id, j.CancelReason)); err != nil {
					return err
				}
			}
		}
		// The agent's copy of the chain keeps up: at the first heartbeat
		// after a result (one read for every job that ended since), else
		// once a minute, which spares a read per idle agent and heartbeat.
		if c.auditDirty || now.Sub(c.lastAudit) > time.Minute {
			c.lastAudit, c.auditDirty = now, false
			if err := c.sendAudit(ctx); err != nil {
				return err
			}
		}
		// Catch up on a wake-up that was lost, at most once a minute: the
		// hub's mark is exact within one imsd, and PostgreSQL replicas
		// relay enqueues to each other with NOTIFY.
		force := now.Sub(c.lastForced) > time.Minute
		if force {
			c.lastForced = now
		}
		return c.claim(ctx, force)
	case *agentv1.ConnectRequest_Ack:
		a := msg.Ack
		if err := s.store.AckJob(ctx, a.JobId, store.Writer{AgentID: c.agent.ID, FencingToken: a.FencingToken}, s.reclaimAfter(now), now); err != nil {
			return c.reject(ctx, a.WriteId, a.JobId, a.FencingToken, err)
		}
		// The agent starts the job only once it holds the record of this
		// ack in its own copy of the chain: it goes first.
		if err := c.sendAudit(ctx); err != nil {
			return err
		}
		return c.send(accepted(a.WriteId))
	case *agentv1.ConnectRequest_Logs:
		l := msg.Logs
		if len(l.Lines) > MaxLogBatch {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("logs.lines: %d lines exceed the %d-line batch limit", len(l.Lines), MaxLogBatch))
		}
		lines := make([]store.LogLine, len(l.Lines))
		for i, ln := range l.Lines {
			if len(ln.Text) > MaxLogLineBytes {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("logs.lines[%d].text: %d bytes exceed the %d-byte limit; split long lines", i, len(ln.Text), MaxLogLineBytes))
			}
			if ln.Seq < 1 {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("logs.lines[%d].seq: must be 1 or more, got %d", i, ln.Seq))
			}
			if ln.Stream < 1 || ln.Stream > 3 {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("logs.lines[%d].stream: must be 1 (stdout), 2 (stderr) or 3 (system), got %d", i, ln.Stream))
			}
			lines[i] = store.LogLine{Seq: ln.Seq, Time: ln.Time.AsTime(), Stream: int(ln.Stream), Text: ln.Text}
		}
		if err := s.store.AppendLogs(ctx, l.JobId, store.Writer{AgentID: c.agent.ID, FencingToken: l.FencingToken}, lines); err != nil {
			return c.reject(ctx, l.WriteId, l.JobId, l.FencingToken, err)
		}
		s.hub.NotifyLog(l.JobId)
		return c.send(accepted(l.WriteId))
	case *agentv1.ConnectRequest_Result:
		r := msg.Result
		state, ok := outcomes[r.Outcome]
		if !ok {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("result.outcome: must be succeeded, failed, cancelled, timed_out or refused, got %v", r.Outcome))
		}
		if len(r.Error) > MaxLogLineBytes {
			r.Error = r.Error[:MaxLogLineBytes]
		}
		plan, err := plannedChanges(r.PlannedChanges)
		if err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		if err := checkPlanDigest(r); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		findings, err := policyFindings(r.PolicyFindings)
		if err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		res := store.Result{State: state, ExitCode: int(r.ExitCode), Error: r.Error, Outputs: r.Outputs, PlannedChanges: plan,
			PlanDigest: r.PlanDigest, PolicyFindings: findings, Drifted: r.Drifted}
		if state == store.JobSucceeded && c.agent.InstallID == store.VendorInstallID && r.Outputs[store.BuildOutDigest] != "" {
			// The build agent's result: the store records the build if
			// the job is a build job.
			b, err := store.BuildFromOutputs(r.JobId, r.Outputs, now)
			if err != nil {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("result.%w", err))
			}
			res.Build = &b
		}
		changed, err := s.store.FinishJob(ctx, r.JobId, store.Writer{AgentID: c.agent.ID, FencingToken: r.FencingToken}, res, now)
		if err != nil {
			return c.reject(ctx, r.WriteId, r.JobId, r.FencingToken, err)
		}
		c.drop(r.JobId)
		if changed { // not a result resent after a lost reply
			if r.Outcome == agentv1.Outcome_OUTCOME_REFUSED && strings.HasPrefix(r.Error, RefusedPrefix) {
				// The agent refused the assignment itself: a signature
				// that did not verify, a replay, or the customer's
				// permission state. Worth an operator's eye either way.
				c.logger().ErrorContext(ctx, "agent refused a job", "job", r.JobId, "error", r.Error)
			}
			s.obs.Finished(state)
			s.hub.NotifyLog(r.JobId)
			s.hub.FleetChanged()
		}
		if err := c.send(accepted(r.WriteId)); err != nil {
			return err
		}
		// The job's end reaches the agent's copy at the next heartbeat
		// (or ack): a read per result cost a third of a job's CPU.
		c.auditDirty = true
		return c.claim(ctx, false)
	case *agentv1.ConnectRequest_Hello:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("hello: sent twice on one stream"))
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("message: empty or of an unknown kind"))
	}
}

// RefusedPrefix starts the error of a result by which an agent refuses
// an assignment it would not run (agentd/agent: unsigned, tampered,
// expired, replayed or signed by an unknown key, or a permission mode
// the customer has off); the outcome is REFUSED.
const RefusedPrefix = "refused: "

// reject answers a refused write. Refusals are per job and leave the stream
// open; a stale or foreign writer must stop the job.
func (c *conn) reject(ctx context.Context, writeID uint64, jobID string, token int64, err error) error {
	switch errs.CodeOf(err) {
	case errs.Conflict, errs.NotFound, errs.PermissionDenied, errs.Invalid:
		// Only the attempt written for loses its slot: a write under
		// another token (an agent refusing a forged assignment that names
		// a job it runs) leaves the job it runs counted.
		if t, ok := c.inflight[jobID]; ok && t == token {
			c.drop(jobID)
		}
		c.logger().WarnContext(ctx, "write refused", "job", jobID, "err", err)
		return c.send(rejected(writeID, jobID, rpcerr.CodeName(err), err.Error()))
	}
	return c.svc.err(ctx, err)
}

var outcomes = map[agentv1.Outcome]store.JobState{
	agentv1.Outcome_OUTCOME_SUCCEEDED: store.JobSucceeded,
	agentv1.Outcome_OUTCOME_FAILED:    store.JobFailed,
	agentv1.Outcome_OUTCOME_CANCELLED: store.JobCancelled,
	agentv1.Outcome_OUTCOME_TIMED_OUT: store.JobTimedOut,
	agentv1.Outcome_OUTCOME_REFUSED:   store.JobRefused,
}

// checkPlanDigest refuses a result whose plan digest is malformed or,
// when it carries the plan's changes, is not theirs: an approval binds
// the digest, so it must be the digest of what the operator is shown.
func checkPlanDigest(r *agentv1.JobResult) error {
	if r.PlanDigest == "" {
		return nil
	}
	if _, ok := agentproto.PlanDigestHex(r.PlanDigest); !ok {
		return fmt.Errorf("result.plan_digest: %q is not sha256: and 64 lowercase hex digits", r.PlanDigest)
	}
	if len(r.PlannedChanges) == 0 {
		return nil // an approved apply reports the digest of its fresh plan only
	}
	in := make([]agentproto.PlanChange, len(r.PlannedChanges))
	for i, c := range r.PlannedChanges {
		in[i] = agentproto.PlanChange{Address: c.Address, Action: c.Action, Summary: c.Summary}
		if c.Before != nil {
			in[i].Before = c.Before.AsInterface()
		}
		if c.After != nil {
			in[i].After = c.After.AsInterface()
		}
	}
	d, err := agentproto.PlanDigest(in)
	if err != nil {
		return fmt.Errorf("result.planned_changes: %w", err)
	}
	if d != r.PlanDigest {
		return fmt.Errorf("result.plan_digest: %s is not the digest of the result's planned_changes (%s)", r.PlanDigest, d)
	}
	return nil
}

// MaxPlannedChanges bounds the planned changes stored with a job; beyond
// it, one more change says how many were left out.
const MaxPlannedChanges = 1000

// plannedChanges converts a result's planned changes for the store.
func plannedChanges(in []*agentv1.PlannedChange) ([]store.PlannedChange, error) {
	var out []store.PlannedChange
	for i, c := range in {
		if i == MaxPlannedChanges {
			out = append(out, store.PlannedChange{Address: "(more)", Action: "update",
				Summary: fmt.Sprintf("%d more changes were not stored", len(in)-i)})
			break
		}
		p := store.PlannedChange{Address: c.Address, Action: c.Action, Summary: c.Summary}
		for _, v := range []struct {
			name string
			in   *structpb.Value
			out  *json.RawMessage
		}{{"before", c.Before, &p.Before}, {"after", c.After, &p.After}} {
			if v.in == nil {
				continue
			}
			b, err := v.in.MarshalJSON()
			if err != nil {
				return nil, fmt.Errorf("result.planned_changes[%d].%s: %w", i, v.name, err)
			}
			*v.out = b
		}
		out = append(out, p)
	}
	return out, nil
}

// MaxPolicyFindings bounds the policy findings stored with a job; beyond
// it, one more warning says how many were left out.
const MaxPolicyFindings = 1000

// policyFindings checks and converts a result's policy findings for the
// store.
func policyFindings(in []*agentv1.PolicyFinding) ([]store.PolicyFinding, error) {
	var out []store.PolicyFinding
	for i, f := range in {
		if i == MaxPolicyFindings {
			out = append(out, store.PolicyFinding{Policy: "(more)", Source: "customer", Level: "warn",
				Message: fmt.Sprintf("%d more policy findings were not stored", len(in)-i)})
			break
		}
		switch {
		case f.Level != "deny" && f.Level != "warn":
			return nil, fmt.Errorf("result.policy_findings[%d].level: must be deny or warn, got %q", i, f.Level)
		case f.Source != "vendor" && f.Source != "customer":
			return nil, fmt.Errorf("result.policy_findings[%d].source: must be vendor or customer, got %q", i, f.Source)
		}
		msg, pol := f.Message, f.Policy
		if len(msg) > MaxLogLineBytes {
			msg = msg[:MaxLogLineBytes]
		}
		if len(pol) > 1024 {
			pol = pol[:1024]
		}
		// A cut may split a character; proto strings must be UTF-8.
		out = append(out, store.PolicyFinding{Policy: strings.ToValidUTF8(pol, "\uFFFD"), Source: f.Source, Level: f.Level,
			Message: strings.ToValidUTF8(msg, "\uFFFD")})
	}
	return out, nil
}

func leases(running []*agentv1.RunningJob) []store.Lease {
	out := make([]store.Lease, len(running))
	for i, r := range running {
		out[i] = store.Lease{JobID: r.JobId, FencingToken: r.FencingToken}
	}
	return out
}

// picked records the pickup latency of a first attempt sent to the agent:
// enqueue to assignment sent.
func (c *conn) picked(j store.Job) {
	if j.Attempt == 1 && !j.CreatedAt.IsZero() {
		c.svc.obs.Picked(c.svc.now().Sub(j.CreatedAt))
	}
}

// assignment is the message that hands job j to an agent, signed with
// imsd's key (agentproto.JobClaims). Its config travels as raw field
// bytes (configField). The signature stays valid for a lease and its
// grace from now: no longer than imsd waits for the ack before it may
// hand the job out again.
func (s *Service) assignment(ctx context.Context, j store.Job, installID string) (*agentv1.JobAssignment, error) {
	field, digest, err := configField(j.Config)
	if err != nil {
		return nil, err
	}
	grant, grantClaims, err := s.grant(ctx, j, installID)
	if err != nil {
		return nil, fmt.Errorf("registry grant: %w", err)
	}
	a := &agentv1.JobAssignment{
		JobId:          j.ID,
		FencingToken:   j.FencingToken,
		Attempt:        int32(j.Attempt),
		ComponentType:  j.ComponentType,
		Operation:      j.Operation,
		TimeoutSeconds: int64(j.Timeout / time.Second),
		InstallId:      installID,
		Mode:           string(j.Mode),
		Component:      j.Component,
		RegistryGrant:  grant,

		ApprovedPlanDigest: j.ApprovedPlanDigest,
	}
	claims := agentproto.JobClaims{
		InstallID: installID, JobID: j.ID, Attempt: int64(a.Attempt), FencingToken: j.FencingToken,
		Mode: a.Mode, Component: a.Component,
		ComponentType: j.ComponentType, Operation: j.Operation, TimeoutSeconds: a.TimeoutSeconds,
		ConfigDigest: digest, Expires: s.now().Add(s.cfg.LeaseDuration + s.cfg.LeaseGrace),
		Grant:              grantClaims,
		ApprovedPlanDigest: j.ApprovedPlanDigest,
	}
	sig := s.cfg.SigningKey.Sign(&claims)
	a.Signature = &agentv1.JobSignature{KeyId: claims.KeyID, ExpireUnixMs: claims.Expires.UnixMilli(), Signature: sig}
	a.ProtoReflect().SetUnknown(field)
	return a, nil
}

func accepted(id uint64) *agentv1.ConnectResponse {
	return &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: id}}}
}

func rejected(id uint64, jobID, code, msg string) *agentv1.ConnectResponse {
	return &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Rejected{Rejected: &agentv1.WriteRejected{
		WriteId: id, JobId: jobID, Code: code, Message: msg,
	}}}
}

func cancelMsg(jobID, reason string) *agentv1.ConnectResponse {
	return &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Cancel{Cancel: &agentv1.JobCancel{JobId: jobID, Reason: reason}}}
}

type bodyKey struct{}

// KeepBody is middleware for the agent service: it lets a stream's handler
// close its own request body, the one way to end a read blocked on an agent
// that went silent without closing its connection. It also holds each
// request body to preauthMax bytes on the wire until the stream's hello
// is verified (an enrolment never is: its whole request is held to it),
// since until then anyone can send anything.
func KeepBody(next http.Handler, preauthMax int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := &preauthBody{ReadCloser: r.Body, left: int64(preauthMax), max: preauthMax}
		r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, b))
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

func bodyFrom(ctx context.Context) *preauthBody {
	b, _ := ctx.Value(bodyKey{}).(*preauthBody)
	return b
}

// preauthBody is a request body that yields at most left more bytes
// until lift is called. Read and lift run on the stream's goroutine;
// Close, from a Receive limit's timer, touches neither field.
type preauthBody struct {
	io.ReadCloser
	left   int64
	max    int
	lifted bool
}

func (b *preauthBody) Read(p []byte) (int, error) {
	if b.lifted {
		return b.ReadCloser.Read(p)
	}
	if b.left <= 0 {
		return 0, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("hello: more than %d bytes before the agent is authenticated", b.max))
	}
	n, err := b.ReadCloser.Read(p[:min(int64(len(p)), b.left)])
	b.left -= int64(n)
	return n, err
}

func (b *preauthBody) lift() { b.lifted = true }

func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil
	}
	if connect.CodeOf(err) == connect.CodeCanceled {
		return nil
	}
	return err
}

// configStruct decodes a job's stored config, a JSON object, and returns
// it with its digest (agentproto.ConfigDigest, over the decoded values:
// the agent computes the same from the Struct it receives). encoding/json
// and structpb.NewStruct do it in about half the CPU of protojson, which
// showed in profiles of a busy imsd. The stored config was encoded by imsd
// itself, so protojson's stricter checks (such as duplicate keys) have
// nothing left to catch.
func configStruct(b []byte) (*structpb.Struct, [32]byte, error) {
	var m map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, [32]byte{}, fmt.Errorf("job config: %w", err)
		}
	}
	digest, err := agentproto.ConfigDigest(m)
	if err != nil {
		return nil, [32]byte{}, err
	}
	st, err := structpb.NewStruct(m)
	return st, digest, err
}

// configFieldNumber is JobAssignment.config's field number.
var configFieldNumber = (&agentv1.JobAssignment{}).ProtoReflect().Descriptor().Fields().ByName("config").Number()

// configField returns a job's stored config encoded as JobAssignment's
// config field, tag and all: what assignment attaches to the message as
// raw bytes, so that sending it copies them instead of walking a Struct
// (marshalling the config was most of an assignment's cost, and its deep
// recursion grew each sending goroutine's stack). Protobuf readers take
// fields in any order, so the agent decodes it as the Struct it is.
func configField(b []byte) ([]byte, [32]byte, error) {
	if last := lastConfig.Load(); last != nil && last.json == string(b) {
		return last.field, last.digest, nil
	}
	cfg, digest, err := configStruct(b)
	if err != nil {
		return nil, digest, err
	}
	enc, err := proto.Marshal(cfg)
	if err != nil {
		return nil, digest, fmt.Errorf("job config: %w", err)
	}
	field := protowire.AppendTag(nil, configFieldNumber, protowire.BytesType)
	field = protowire.AppendBytes(field, enc)
	if len(b) <= maxCachedConfig {
		lastConfig.Store(&encodedConfig{json: string(b), field: field, digest: digest})
	}
	return field, digest, nil
}

// lastConfig is the config last encoded for an assignment (why:
// docs/performance.md, "Assignment configs as field bytes"): a run across
// a fleet hands the same config to every install's agent. The bytes are
// only ever read once encoded, so assignments share them.
var lastConfig atomic.Pointer[encodedConfig]

// maxCachedConfig bounds the config lastConfig keeps.
const maxCachedConfig = 16 << 10

type encodedConfig struct {
	json   string
	field  []byte
	digest [32]byte
}

// decodeConfig turns an assignment's raw config field back into its
// Struct, for a stream whose codec is not binary protobuf: JSON encoders
// drop unknown fields.
func decodeConfig(m *agentv1.ConnectResponse) error {
	a := m.GetAssignment()
	if a == nil || a.Config != nil {
		return nil
	}
	raw := a.ProtoReflect().GetUnknown()
	if len(raw) == 0 {
		return nil
	}
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(raw, a); err != nil {
		return fmt.Errorf("job config: %w", err)
	}
	a.ProtoReflect().SetUnknown(nil)
	return nil
}
