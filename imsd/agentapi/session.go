package agentapi

// An agent's session: authentication at the hello, the welcome, the
// session's loop and its end, and what a heartbeat reports.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

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
	// open counts the stream for Drain and close uncounts it: Serve's own
	// frame stays as small as it was (BenchmarkIdleAgentMemory: a defer
	// more here kept every idle stack from shrinking to 4 KiB).
	c, err := s.open(ctx, st)
	if c == nil {
		return err
	}
	defer s.close(ctx, c)
	if err != nil {
		return err
	}
	err = c.run(ctx)
	c.tampered(ctx, err)
	return err
}

// tampered logs, if err ended a stream that carried a message that was
// not the agent's (agentchannel.ErrChannel): something on the path
// altered, replayed, reordered, copied or forged one; a security event,
// not a network blip. A function of its own, not inlined, to keep Serve's
// frame small: it is under every idle stream's goroutine, whose stack
// must stay small enough to shrink to 4 KiB (BenchmarkIdleAgentMemory).
//
//go:noinline
func (c *conn) tampered(ctx context.Context, err error) {
	if !errors.Is(err, agentchannel.ErrChannel) {
		return
	}
	c.logger().ErrorContext(ctx, "the agent's stream carried a message that is not the agent's (tampered with on the path); stream ended", "err", err)
}

// open runs the stream up to the welcome: challenge, hello, signature
// check, registration with the hub, re-attached jobs. It returns a nil
// conn if the stream ended before registration; otherwise close must
// follow. It is kept apart from run, so that the stack an idle stream
// waits on holds only run's small frame.
//
//go:noinline
func (s *Service) open(ctx context.Context, st Stream) (*conn, error) {
	s.streams.Add(1)
	c, err := s.openCounted(ctx, st)
	if c == nil {
		s.streams.Done() // close is not called
	}
	return c, err
}

// openCounted is open's work: the admission slot, the challenge and the
// handshake, the hello and the welcome.
func (s *Service) openCounted(ctx context.Context, st Stream) (_ *conn, err error) {
	start := time.Now()
	if ok, retry := s.admit.enter(start); !ok {
		e := connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("imsd is serving %d hellos already; try again within %s", cap(s.admit.slots), retry))
		e.Meta().Set(agentproto.RetryAfterHeader, agentproto.FormatRetryAfter(retry))
		return nil, e
	}
	var c *conn
	defer func() { s.admit.leave(start, time.Now(), c != nil && err == nil) }()
	nonce := auth.NewNonce()
	key := s.cfg.SigningKey
	if err := st.Send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Challenge{Challenge: &agentv1.Challenge{
		Nonce: nonce, PublicKey: key.Public, KeyChain: s.chain, RetiredKeys: s.retired}}}); err != nil {
		return nil, err
	}
	m, err := st.Receive(s.cfg.HelloTimeout)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("hello: none within %s", s.cfg.HelloTimeout))
		}
		return nil, ignoreEOF(err)
	}
	if m.GetHello() != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("hello: in the clear; this imsd talks to agents only over the encrypted channel (channel_hello): upgrade agentd"))
	}
	ch := m.GetChannelHello()
	if ch == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("hello: the first message on the stream must be a channel_hello"))
	}
	// Database work, the handshake and signature checks grow a goroutine's
	// stack, and the stream's own goroutine then sits idle for days with
	// whatever stack it has: they run on a short-lived goroutine (as does
	// the welcome).
	var agent store.Agent
	var verified, underNext bool
	var accept []byte
	var channel *agentchannel.Channel
	var herr error
	hello := &agentv1.Hello{}
	err = onOwnStack(func() error {
		var err error
		agent, err = s.store.GetAgent(ctx, ch.AgentId)
		if err != nil {
			return err
		}
		// While a rotation of the agent's key is under way, either key
		// opens the channel (agentkey.go).
		keys := agentKeys(agent)
		var raw []byte
		var matched int
		raw, accept, channel, matched, herr = agentchannel.AcceptChannelKeys(key.Private, agent.ID, keys, nonce, ch.Noise)
		verified = herr == nil && proto.Unmarshal(raw, hello) == nil && hello.AgentId == agent.ID &&
			agentproto.VerifyChallenge(keys[matched], agent.ID, nonce, hello.Signature)
		underNext = verified && matched == 1
		return nil
	})
	if errs.Is(err, errs.NotFound) {
		// No such agent: the one answer that stops an agent for good, so
		// it is signed for this stream and that agent id (a path attacker
		// who alters the id gets a refusal the agent does not take).
		e := connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("hello: unknown agent %q; enrol again with a new enrolment token", ch.AgentId))
		e.Meta().Set(agentproto.HelloRefusalHeader, agentproto.SignHelloRefusal(key.Private, nonce, ch.AgentId))
		return nil, e
	}
	if err == nil && !agent.RevokedAt.IsZero() {
		// Revoked by the vendor: refused for good, signed like an
		// unknown id's refusal.
		s.log.WarnContext(ctx, "revoked agent refused", "agent", agent.ID, "install", agent.InstallID)
		e := connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("hello: agent %q was revoked (%s); enrol a new agent with a new enrolment token", agent.ID, agent.RevokedReason))
		e.Meta().Set(agentproto.HelloRefusalHeader, agentproto.SignHelloRefusal(key.Private, nonce, ch.AgentId))
		return nil, e
	}
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if !verified {
		if errors.Is(herr, agentchannel.ErrChannel) {
			s.log.WarnContext(ctx, "agent hello refused", "agent", ch.AgentId, "err", herr)
		}
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("hello: bad signature: the channel handshake or the challenge signature does not verify under the agent's enrolled key"))
	}
	if served, window := agentproto.AgentVersionServed(s.cfg.Version, hello.Version); !served {
		// Outside the version-skew window: one clear answer; the agent
		// backs off long instead of reconnecting at once.
		s.log.WarnContext(ctx, "agent version refused", "agent", agent.ID, "install", agent.InstallID, "version", hello.Version, "served", window)
		e := connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("hello: agentd %s is outside the agent versions imsd %s serves (%s): update agentd", hello.Version, s.cfg.Version, window))
		e.Meta().Set(agentproto.VersionRefusalHeader, window)
		return nil, e
	}
	var nextKeyID string
	if underNext || hello.NextKey != nil {
		if err := onOwnStack(func() error {
			var err error
			nextKeyID, err = s.rotateAgentKey(ctx, &agent, underNext, hello.NextKey)
			return err
		}); err != nil {
			return nil, s.err(ctx, err)
		}
	}
	if err := st.Send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_ChannelAccept{ChannelAccept: accept}}); err != nil {
		return nil, err
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
	s.helloElsewhere(ctx, agent.ID, hello)

	c = &conn{
		svc:      s,
		st:       st,
		ch:       channel,
		agent:    stateOf(agent),
		capacity: int(hello.Capacity),
		// What is stored now: a reconnecting agent whose permissions did
		// not change costs no write.
		perms:     agent.Permissions,
		auditCopy: hello.AuditCopy,
		auditSeq:  hello.AuditSeq,
		batchSigs: hello.BatchSignatures,
	}
	c.ctx = ctx
	c.sess = s.hub.RegisterAgent(agent.ID, agent.InstallID, c)
	s.obs.Connected(1)
	return c, c.welcome(ctx, hello, nextKeyID)
}

// close unregisters a stream that open registered.
func (s *Service) close(ctx context.Context, c *conn) {
	defer s.streams.Done()
	s.hub.Unregister(c.sess)
	// The stream has ended, and its context with it; the writes are
	// still owed, bounded on their own.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	switch {
	case !c.helloAt.IsZero():
		// Other replicas show the agent gone from now on (unless it has
		// said hello to one of them since).
		if err := s.store.AgentDisconnected(wctx, c.agent.ID, c.helloAt, c.lastHeard, s.now()); err != nil {
			c.logger().WarnContext(ctx, "record agent disconnected", "err", err)
		}
	case c.lastHeard.After(c.lastSeen):
		if err := s.store.TouchAgent(wctx, c.agent.ID, c.lastHeard); err != nil {
			c.logger().WarnContext(ctx, "touch agent at disconnect", "err", err)
		}
	}
	cancel()
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
		if m, err = agentchannel.OpenRequest(c.ch, m); err != nil {
			// Altered, replayed, reordered, copied or in the clear.
			return connect.NewError(connect.CodeInvalidArgument, err)
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

// conn is the state of one authenticated agent stream. mu guards the
// fields below it and serialises sends on the stream.
type conn struct {
	svc *Service
	// st is the stream; ch the channel every message on it is sealed
	// with (send seals, run opens: not a wrapper of st, so that the idle
	// goroutine blocked in st.Receive has one frame less on its stack).
	st       Stream
	ch       *agentchannel.Channel
	ctx      context.Context
	agent    agentState
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
	perms *store.Permissions
	// tel is the telemetry setting this stream last saw and when it sent
	// the app's telemetry declaration (telemetry.go).
	tel telemetryState
	// win is the install's maintenance windows as this stream knows them
	// (window.go).
	win      windows
	lastSeen time.Time
	// helloAt is the hello's time as recorded (AgentConnected; zero if
	// that write failed): close records the stream's end against it.
	helloAt time.Time
	// lastHeard is when the agent's last hello or heartbeat arrived; only
	// the stream's own goroutine (handle, close) reads or writes it.
	lastHeard time.Time
	// offerSeen is the hub's offer count at the last read of the agent's
	// offer, at offerReadAt (update.go).
	offerSeen   int64
	offerReadAt time.Time
	// lastSigned is the last update offer or withdrawal signed for the
	// agent (update.go; nil: none).
	lastSigned *signedUpdate
	// lastForced is when the queue was last read without a hub mark.
	lastForced time.Time
	// auditCopy is set when the agent keeps a copy of its install's audit
	// chain (Hello.audit_copy); auditSeq is the last record sent to it
	// (or that it held at its hello). audit.go.
	auditCopy bool
	auditSeq  int64
	// batchSigs is set when the agent verifies batch job signatures
	// (Hello.batch_signatures): its assignments may share one.
	batchSigs bool
	// lastAudit is when a heartbeat last sent the agent its records;
	// auditDirty is set when a result added records since.
	lastAudit  time.Time
	auditDirty bool
	// rec is the support sessions opened through this stream, and the
	// recordings the agent is sending (recording.go); nil until one is.
	rec *recordings
}

// agentState is what a stream keeps of the agent row read at its hello:
// what later messages are compared with or named by. Not the whole row
// (its keys, host name, health, revocation and their times): an idle
// stream holds this for days, and with the row conn took 1 KiB, not 576
// bytes (docs/performance-storm.md, 2026-11-29).
type agentState struct {
	ID, InstallID string
	// AckedKeyID is imsd's signing key the agent last acknowledged.
	AckedKeyID string
	// What the agent last reported (nil: never), to write only changes.
	Condition *store.AgentCondition
	Stack     *store.StackReport
	Update    *store.AgentUpdate
	Plugins   *store.PluginReport
	// UpdateOffer is the release last offered to the agent (nil: none).
	UpdateOffer *store.UpdateOffer
}

func stateOf(a store.Agent) agentState {
	return agentState{ID: a.ID, InstallID: a.InstallID, AckedKeyID: a.AckedKeyID, Condition: a.Condition,
		Stack: a.Stack, Update: a.Update, Plugins: a.Plugins, UpdateOffer: a.UpdateOffer}
}

// welcome re-attaches the jobs the agent says it runs, answers the hello and
// hands out what is queued. It runs on a short-lived goroutine: the database
// work grows a goroutine's stack, and the stream's own goroutine then sits
// idle for days with whatever stack it has.
func (c *conn) welcome(ctx context.Context, hello *agentv1.Hello, nextKeyID string) error {
	return onOwnStack(func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.welcomeLocked(ctx, hello, nextKeyID)
	})
}

// onOwnStack runs f on a goroutine of its own and waits for it, so that
// the stack f grows is not the caller's.
func onOwnStack(f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return <-done
}

func (c *conn) welcomeLocked(ctx context.Context, hello *agentv1.Hello, nextKeyID string) error {
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
		NextKeyId:           nextKeyID,
	}}}); err != nil {
		return err
	}
	if err := c.sendHeadCheckpoint(ctx); err != nil {
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
	c.connected(ctx, hello.Version, now)
	c.ackKey(ctx, hello.ImsdKeyIds, now)
	c.reportPermissions(ctx, hello.Permissions, now)
	if err := c.reportTelemetry(ctx, hello.Permissions, now); err != nil {
		return err
	}
	c.reportStack(ctx, hello.Stack, now)
	c.reportCondition(ctx, hello.Condition, now)
	c.reportUpdate(ctx, hello.Update, now)
	c.reportPlugins(ctx, hello.Plugins, now)
	c.offerSeen, c.offerReadAt = c.svc.hub.Offers(), now
	if asked, err := c.confirmOffer(ctx, hello.Update, now); err != nil {
		return err
	} else if !asked {
		if err := c.sendOffer(now); err != nil {
			return err
		}
	}
	c.lastForced = now
	return c.claim(ctx, true)
}

// logger is the service's logger with the agent's attributes. It is made
// at each (rare) use rather than kept: an idle stream need not hold it.
func (c *conn) logger() *slog.Logger {
	return c.svc.log.With("agent", c.agent.ID, "install", c.agent.InstallID)
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
	if err := c.svc.store.TouchAgent(ctx, c.agent.ID, now); errs.Is(err, errs.PermissionDenied) {
		// Revoked through another replica, whose word did not reach this
		// one (store.NotifyKick): the stream ends at the agent's next
		// message, and its next hello is refused for good.
		c.logger().WarnContext(ctx, "revoked agent's stream ended", "err", err)
		c.svc.hub.Kick(c.agent.ID)
		return
	} else if err != nil {
		c.logger().WarnContext(ctx, "touch agent", "err", err)
		return
	}
	c.lastSeen = now
}

// connected records the hello: when the agent was last seen and when its
// stream began (the health grace period after a reconnect or an update
// starts there), and its version, in one write.
func (c *conn) connected(ctx context.Context, version string, now time.Time) {
	c.lastHeard = now
	if err := c.svc.store.AgentConnected(ctx, c.agent.ID, version, now); err != nil {
		c.logger().WarnContext(ctx, "record agent connected", "err", err)
		return
	}
	c.lastSeen, c.helloAt = now, now
}

// ackKey records that the agent trusts imsd's current signing key, when
// its hello says so and that is news: imsd key retire waits for every
// agent's acknowledgement of a rotation.
func (c *conn) ackKey(ctx context.Context, ids []string, now time.Time) {
	cur := c.svc.cfg.SigningKey.ID
	if c.agent.AckedKeyID == cur || !slices.Contains(ids, cur) {
		return
	}
	if err := c.svc.store.AckAgentKey(ctx, c.agent.ID, cur, now); err != nil {
		c.logger().WarnContext(ctx, "record the agent's acknowledgement of imsd's key", "err", err)
		return
	}
	c.agent.AckedKeyID = cur
}

// reportCondition records the condition the agent reported (its disk, its
// jobs failed in a row), when it differs from what is recorded. An agent
// that reports none (an older agentd) leaves it as it was. c.mu is held.
func (c *conn) reportCondition(ctx context.Context, p *agentv1.AgentCondition, now time.Time) {
	if p == nil {
		return
	}
	cond := store.AgentCondition{DiskUsedPercent: int(min(p.DiskUsedPercent, 100)), FailedInRow: int(min(p.FailedInRow, 1<<20))}
	if o := c.agent.Condition; o != nil && o.DiskUsedPercent == cond.DiskUsedPercent && o.FailedInRow == cond.FailedInRow {
		return
	}
	if err := c.svc.store.SetAgentCondition(ctx, c.agent.ID, cond, now); err != nil {
		c.logger().WarnContext(ctx, "record agent condition", "err", err)
		return
	}
	cond.ReportedAt = now
	c.agent.Condition = &cond
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
		BreakGlass: p.BreakGlass, DisabledAll: p.DisabledAll, Windows: p.Windows}
	if t := p.Telemetry; t != nil && t.Mode != "" && t.Mode != "off" {
		sp.Telemetry = store.TelemetrySetting{Mode: truncate(t.Mode, 16), RedactLabels: bounded(t.RedactLabels), RedactFields: bounded(t.RedactFields),
			DropMetrics: bounded(t.DropMetrics)}
	}
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
	c.win.customerAt = time.Time{} // read the customer's windows again
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
