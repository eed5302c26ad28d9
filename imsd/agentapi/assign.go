package agentapi

// Handing jobs to a connected agent: claiming, delivering and cancelling
// assignments within its capacity.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// Wake is the hub's (dispatch.Agent): it starts the claim goroutine unless one
// is running, which then claims again for a wake that came meanwhile.
func (c *conn) Wake() {
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

// Reserve is the hub's: it takes a free slot, if any.
func (c *conn) Reserve() bool {
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

// Release is the hub's: it gives back a slot Reserve took.
func (c *conn) Release() { c.free.Add(1) }

// Replaced is the hub's: a newer stream of the agent registered, and this
// one ends at the agent's next message.
func (c *conn) Replaced() { c.replaced.Store(true) }

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

// drop forgets a job in flight and frees its slot.
func (c *conn) drop(jobID string) {
	if _, ok := c.inflight[jobID]; ok {
		delete(c.inflight, jobID)
		c.free.Add(1)
	}
}

// Deliver is the hub's: it sends a job handed over at
// enqueue, in the slot reserve took. It returns at once; the send waits
// for the stream's lock on a goroutine of its own, so the enqueue's
// answer does not wait for this agent's writes.
func (c *conn) Deliver(j store.Job) {
	go func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.dead {
			return // the lease expires and the sweeper requeues the job
		}
		c.track(j.ID, j.FencingToken)
		a, err := c.svc.assignment(c.ctx, j, c.agent.InstallID, c.agent.ID)
		if err != nil {
			if c.unsendable(c.ctx, j, err) {
				c.svc.hub.Wake(c.agent.InstallID) // the slot is free again
			}
			return
		}
		if err := c.sendNow(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Assignment{Assignment: a}}); err != nil {
			c.logger().DebugContext(c.ctx, "send assignment", "job", j.ID, "err", err)
			return
		}
		c.picked(j)
	}()
}

// deliverAll is the hub's DeliverAll handler: the jobs one enqueue handed
// to agents connected here. Their assignments are built on a goroutine of
// their own (the enqueue's answer does not wait for them) and signed
// together: one batch signature (agentproto.SignJobBatch) over the jobs of
// every agent that verifies batch signatures (Hello.batch_signatures). A job
// of an older agent, one that needs a registry grant (a database write
// each) and one whose assignment cannot be built take deliver's path: a
// signature of its own.
func (s *Service) deliverAll(hs []dispatch.Handover) {
	go func() {
		built := make([]builtAssignment, 0, len(hs))
		for _, h := range hs {
			c, _ := h.Session.Agent.(*conn)
			if c == nil || !c.batchSigs || s.needsGrant(h.Job, h.Session.InstallID) {
				h.Session.Deliver(h.Job)
				continue
			}
			a, claims, err := s.unsignedAssignment(c.ctx, h.Job, h.Session.InstallID, h.Session.AgentID)
			if err != nil {
				c.Deliver(h.Job) // builds it again and handles the error
				continue
			}
			built = append(built, builtAssignment{c: c, j: h.Job, a: a, claims: claims})
		}
		s.signAssignments(built, true)
		for _, b := range built {
			go b.c.deliverBuilt(b.j, b.a)
		}
	}()
}

// deliverBuilt sends a job handed over at enqueue whose assignment
// deliverAll built and signed.
func (c *conn) deliverBuilt(j store.Job, a *agentv1.JobAssignment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return // the lease expires and the sweeper requeues the job
	}
	c.track(j.ID, j.FencingToken)
	if err := c.sendNow(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Assignment{Assignment: a}}); err != nil {
		c.logger().DebugContext(c.ctx, "send assignment", "job", j.ID, "err", err)
		return
	}
	c.picked(j)
}

// Cancel is the hub's: it sends the agent a cancellation of a job it runs.
func (c *conn) Cancel(req dispatch.CancelRequest) {
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

// Push is the hub's: a support shell's open or input,
// sent now from the operator's call's goroutine.
func (c *conn) Push(msg any) error {
	m, ok := msg.(*agentv1.ConnectResponse)
	if !ok {
		return fmt.Errorf("push: %T is not a ConnectResponse", msg)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if o := m.GetShellOpen(); o != nil {
		// The agent may send a copy of this session's recording after it
		// ends (recording.go).
		c.openedShell(o.SessionId)
	}
	return c.sendNow(m)
}

func (c *conn) send(m *agentv1.ConnectResponse) error {
	if c.dead {
		return errors.New("stream closed")
	}
	sealed, err := agentchannel.SealResponse(c.ch, m)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	return c.st.Send(sealed)
}

// sendNow is send for a goroutine other than the stream's own: the message
// leaves at once, with whatever was pending before it.
func (c *conn) sendNow(m *agentv1.ConnectResponse) error {
	if err := c.send(m); err != nil {
		return err
	}
	return c.st.Flush()
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
		hold := c.holdWindowBound(ctx, now)
		jobs, err := s.store.ClaimJobsHolding(ctx, c.agent.InstallID, store.Writer{AgentID: c.agent.ID}, free, s.reclaimAfter(now), now, hold)
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
		built := make([]builtAssignment, 0, len(jobs))
		for _, j := range jobs {
			c.track(j.ID, j.FencingToken)
			a, claims, err := c.svc.unsignedAssignment(ctx, j, c.agent.InstallID, c.agent.ID)
			if err != nil {
				c.unsendable(ctx, j, err)
				continue
			}
			built = append(built, builtAssignment{c: c, j: j, a: a, claims: claims})
		}
		s.signAssignments(built, c.batchSigs)
		for _, b := range built {
			if err := c.send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Assignment{Assignment: b.a}}); err != nil {
				return err
			}
			c.picked(b.j)
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

// picked records the pickup latency of a first attempt sent to the agent:
// enqueue to assignment sent.
func (c *conn) picked(j store.Job) {
	if j.Attempt == 1 && !j.CreatedAt.IsZero() {
		c.svc.obs.Picked(c.svc.now().Sub(j.CreatedAt))
	}
}

// assignment is the message that hands job j to an agent, signed with
// imsd's key for agentID (agentproto.JobClaims). Its config travels as raw field
// bytes (configField). The signature stays valid for a lease and its
// grace from now: no longer than imsd waits for the ack before it may
// hand the job out again.
func (s *Service) assignment(ctx context.Context, j store.Job, installID, agentID string) (*agentv1.JobAssignment, error) {
	a, claims, err := s.unsignedAssignment(ctx, j, installID, agentID)
	if err != nil {
		return nil, err
	}
	s.signAssignments([]builtAssignment{{a: a, claims: claims}}, false)
	return a, nil
}

// A builtAssignment is an assignment for conn c of job j, with the claims
// its signature covers, before signAssignments signs it.
type builtAssignment struct {
	c      *conn
	j      store.Job
	a      *agentv1.JobAssignment
	claims *agentproto.JobClaims
}

// signAssignments signs bs: with batch set and more than one, all with one
// batch signature (each carrying its inclusion proof), else each with a
// signature of its own.
func (s *Service) signAssignments(bs []builtAssignment, batch bool) {
	if batch && len(bs) > 1 && len(bs) <= agentproto.MaxJobBatch {
		cs := make([]*agentproto.JobClaims, len(bs))
		for i := range bs {
			cs[i] = bs[i].claims
		}
		sig, proofs, err := s.cfg.SigningKey.SignBatch(cs)
		if err == nil {
			for i, b := range bs {
				b.a.Signature = &agentv1.JobSignature{KeyId: b.claims.KeyID, ExpireUnixMs: b.claims.Expires.UnixMilli(), Signature: sig,
					BatchSize: proofs[i].Size, BatchIndex: proofs[i].Index, BatchProof: proofs[i].Path}
			}
			return
		}
	}
	for _, b := range bs {
		sig := s.cfg.SigningKey.Sign(b.claims)
		b.a.Signature = &agentv1.JobSignature{KeyId: b.claims.KeyID, ExpireUnixMs: b.claims.Expires.UnixMilli(), Signature: sig}
	}
}

// needsGrant reports whether job j's assignment carries a registry grant,
// which costs a database write to build.
func (s *Service) needsGrant(j store.Job, installID string) bool {
	return s.cfg.Registry != nil && grantScopes(installID, j.ComponentType, j.Operation, j.Config) != nil
}

// unsignedAssignment is assignment without the signature: the assignment
// and the claims to sign.
func (s *Service) unsignedAssignment(ctx context.Context, j store.Job, installID, agentID string) (*agentv1.JobAssignment, *agentproto.JobClaims, error) {
	cfg, merged, err := withSensitive(j.ID, j.Config, s.cfg.SensitiveEnv)
	if err != nil {
		return nil, nil, &unsendableError{err}
	}
	var field []byte
	var digest [32]byte
	if merged {
		field, digest, err = configFieldUncached(cfg)
	} else {
		field, digest, err = configField(cfg)
	}
	if err != nil {
		return nil, nil, &unsendableError{err}
	}
	grant, grantClaims, err := s.grant(ctx, j, installID)
	if err != nil {
		return nil, nil, fmt.Errorf("registry grant: %w", err)
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
		WindowBound:    j.WindowBound,

		ApprovedPlanDigest: j.ApprovedPlanDigest,
	}
	claims := &agentproto.JobClaims{
		InstallID: installID, AgentID: agentID, JobID: j.ID, Attempt: int64(a.Attempt), FencingToken: j.FencingToken,
		Mode: a.Mode, Component: a.Component,
		ComponentType: j.ComponentType, Operation: j.Operation, TimeoutSeconds: a.TimeoutSeconds,
		ConfigDigest: digest, Expires: s.now().Add(s.cfg.LeaseDuration + s.cfg.LeaseGrace),
		Grant:              grantClaims,
		ApprovedPlanDigest: j.ApprovedPlanDigest,
		WindowBound:        j.WindowBound,
	}
	claims.KeyID = s.cfg.SigningKey.ID
	a.ProtoReflect().SetUnknown(field)
	return a, claims, nil
}

// An unsendableError is why imsd cannot build a job's assignment at all,
// whichever agent asks: its stored config does not decode, or breaks the
// job config limits (agentproto's ConfigError names the limit and the
// value's path). Such a config can only have been stored before enqueue
// checked the limits, or written to the database by hand.
type unsendableError struct{ err error }

func (e *unsendableError) Error() string { return e.err.Error() }
func (e *unsendableError) Unwrap() error { return e.err }

// unsendable handles job j, claimed for this agent, whose assignment could
// not be built (err). A job no agent could be sent (unsendableError) fails
// at once with err as its reason, audited with imsd as the actor, and
// nothing reaches the agent: waiting for its lease to expire would fail it
// later as "never acknowledged", and a retry would fail the same way.
// Any other error (a registry grant not issued) leaves the job to its
// lease, as before. It reports whether j's slot is free again. c.mu is
// held.
func (c *conn) unsendable(ctx context.Context, j store.Job, err error) bool {
	var ue *unsendableError
	if !errors.As(err, &ue) {
		c.logger().ErrorContext(ctx, "encode assignment", "job", j.ID, "err", err)
		return false
	}
	s := c.svc
	msg := "imsd cannot send this job to an agent: " + err.Error()
	msg = CutUTF8(msg, MaxLogLineBytes)
	c.logger().ErrorContext(ctx, "job failed: its assignment cannot be built", "job", j.ID, "err", err)
	changed, ferr := s.store.FinishJob(ctx, j.ID, store.Writer{AgentID: c.agent.ID, FencingToken: j.FencingToken},
		store.Result{State: store.JobFailed, ExitCode: -1, Error: strings.ToValidUTF8(msg, "\uFFFD"), ByIMSD: true}, s.now())
	if ferr != nil {
		// The job stays claimed: its lease expires and the sweeper ends it.
		c.logger().ErrorContext(ctx, "fail unsendable job", "job", j.ID, "err", ferr)
		return false
	}
	c.drop(j.ID)
	if changed {
		s.obs.Finished(store.JobFailed)
		s.hub.NotifyLog(j.ID)
		s.hub.FleetChanged()
	}
	c.auditDirty = true
	return true
}

func cancelMsg(jobID, reason string) *agentv1.ConnectResponse {
	return &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Cancel{Cancel: &agentv1.JobCancel{JobId: jobID, Reason: reason}}}
}
