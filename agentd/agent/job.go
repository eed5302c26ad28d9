package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// MaxLineBytes is the longest log line sent to imsd; longer output is split.
const MaxLineBytes = 64 << 10

// Log streams.
const (
	StreamStdout int32 = 1
	StreamStderr int32 = 2
	StreamSystem int32 = 3
)

// Reasons a job's context ends. The runner sees only ctx.Done; the agent
// tells from the cause what to report.
var (
	errTimedOut = errors.New("job timed out")
)

type cancelled struct{ reason string }

func (c cancelled) Error() string { return "cancelled: " + c.reason }

// jobRun is one attempt of a job the agent holds, from assignment until
// imsd confirms its result or the agent gives it up. All fields but the
// immutable ones are guarded by Agent.mu.
//
// The lifecycle: assigned (registered, ack in flight) → started (imsd
// accepted the ack, which renewed the lease; the plugin runs if the
// customer's permissions allow the job's mode, else the attempt ends
// refused at once) → finished (result waiting for imsd) → forgotten. An
// attempt is never started before imsd confirms that this agent holds
// its lease, and is stopped by the agent itself once a whole lease passed
// without a confirmed renewal (the watchdog in lease.go) or once the
// customer's permissions no longer allow it (permissions.go).
type jobRun struct {
	id      string
	token   int64
	attempt int32
	// mode is the permission mode the job needs.
	mode string
	as   *agentv1.JobAssignment
	// config is as's config decoded once, by the check of its signature.
	config map[string]any
	ctx    context.Context
	cancel context.CancelCauseFunc
	// prev is an earlier attempt of the same job still stopping on this
	// agent; this one starts only once prev's plugin has exited.
	prev *jobRun
	// done is closed when this attempt's plugin and processes are gone
	// (or when it is given up before it started).
	done chan struct{}
	// kill is closed when the attempt is given up (stopLocked): its plugin
	// is then killed at once, even during a cancel's grace (Job.Kill).
	kill chan struct{}

	// leaseUntil is when the agent's own lease on the attempt ends: a full
	// lease after it sent the last message whose renewal imsd confirmed
	// (hello, ack or heartbeat). Until the ack is confirmed it bounds how
	// long the attempt may wait to start.
	leaseUntil time.Time
	started    bool
	stopping   bool // given up: cancelled, waiting for the plugin to exit
	// grant is the break-glass grant a started break_glass job runs
	// under (Job.Grant).
	grant string

	lines   []*agentv1.LogLine // unconfirmed lines, in seq order
	sent    int                // lines[:sent] are in flight on the current stream
	nextSeq int64
	dropped int
	// lastText is the newest line written (before chunking), so that a
	// failed job's log ends with its error once (finish).
	lastText string

	ackSent, ackDone bool
	// auditErr, set when the ack was accepted, is why the attempt must
	// not start: the agent's copy of the audit chain lacks its record.
	auditErr   error
	result     *agentv1.JobResult
	resultSent bool
}

// assign registers an assignment. It starts nothing: the attempt runs once
// imsd accepts its ack (begin). First it checks the assignment (check):
// one that fails is refused (refuse) and never acked. A copy of an
// attempt the agent holds (resent after a reconnect) is ignored; a new
// attempt of a job this agent still holds replaces the old one, which is
// stopped first. An accepted attempt is written to the replay record
// before its ack can leave, so it is never accepted twice, restarts
// included.
func (a *Agent) assign(ctx context.Context, as *agentv1.JobAssignment) {
	a.mu.Lock()
	draining := a.draining
	a.mu.Unlock()
	if draining {
		// Neither acked nor started: its lease runs out and imsd hands
		// it out again, to the agent's next version.
		a.log.Info("draining for an update: leaving the assignment to its lease", "job", as.JobId, "attempt", as.Attempt)
		return
	}
	now := a.now()
	config, err := a.check(as, now)
	a.mu.Lock()
	held := a.jobs[as.JobId]
	a.mu.Unlock()
	if held != nil && held.token == as.FencingToken {
		if err != nil {
			// Not reported: a report under this token would end the
			// attempt the agent holds under a good signature.
			a.log.Error("ignoring a copy of a held assignment that fails its check", "job", as.JobId, "attempt", as.Attempt, "reason", err)
		}
		return
	}
	if err == nil && a.seen.has(as.JobId, int64(as.Attempt)) {
		err = fmt.Errorf("%w: attempt %d of job %s was accepted before", errReplayed, as.Attempt, as.JobId)
	}
	if err == nil {
		if rerr := a.seen.add(as.JobId, int64(as.Attempt), time.UnixMilli(as.GetSignature().GetExpireUnixMs()), now); rerr != nil {
			err = fmt.Errorf("cannot record the attempt before running it: %w", rerr)
		}
	}
	if err != nil {
		a.refuse(as, err)
		return
	}
	a.mu.Lock()
	old := a.jobs[as.JobId]
	var prev *jobRun
	if old != nil {
		// imsd handed out a new attempt, so the old one's lease is gone.
		a.stopLocked(old, "a newer attempt of the job was assigned to this agent")
	}
	if p := a.live[as.JobId]; p != nil {
		prev = p
	}
	jctx, cancel := context.WithCancelCause(ctx)
	j := &jobRun{
		id: as.JobId, token: as.FencingToken, attempt: as.Attempt, mode: as.Mode, as: as, config: config,
		ctx: jctx, cancel: cancel, prev: prev, done: make(chan struct{}), kill: make(chan struct{}),
		leaseUntil: now.Add(a.leaseLocked()),
	}
	a.jobs[j.id] = j
	a.live[j.id] = j
	a.mu.Unlock()
	a.log.Debug("job assigned", "job", j.id, "attempt", j.attempt)
	a.kickNow()
}

// errReplayed refuses an attempt the agent accepted before.
var errReplayed = errors.New("already run")

// check returns why the agent must refuse as, or nil: it must name the
// agent's own install (a server merely answering at imsd's URL could
// otherwise run anything in this install's sandbox) and carry imsd's
// valid, unexpired signature over exactly what it says, made for this
// agent (agentproto: the signed bytes name the agent, so a copy of
// another agent's assignment fails as a bad signature). It
// returns the config decoded, which the run then uses.
func (a *Agent) check(as *agentv1.JobAssignment, now time.Time) (map[string]any, error) {
	if as.InstallId != a.id.InstallID {
		return nil, fmt.Errorf("it is for install %q and this agent belongs to install %q", as.InstallId, a.id.InstallID)
	}
	// imsd's signature says imsd sent it, not that it is safe to use as
	// a name on this machine.
	if err := checkJobID(as.JobId); err != nil {
		return nil, err
	}
	config := as.GetConfig().AsMap()
	digest, err := agentproto.ConfigDigest(config)
	if err != nil {
		return nil, err
	}
	sig := as.GetSignature()
	c := agentproto.JobClaims{
		KeyID: sig.GetKeyId(), InstallID: as.InstallId, AgentID: a.id.AgentID, JobID: as.JobId, Attempt: int64(as.Attempt),
		FencingToken: as.FencingToken, Mode: as.Mode, Component: as.Component,
		ComponentType: as.ComponentType, Operation: as.Operation, TimeoutSeconds: as.TimeoutSeconds,
		ConfigDigest: digest, Expires: time.UnixMilli(sig.GetExpireUnixMs()),
		ApprovedPlanDigest: as.ApprovedPlanDigest, WindowBound: as.WindowBound,
	}
	if g := as.GetRegistryGrant(); g != nil {
		c.Grant = &agentproto.GrantClaims{ID: g.Id, Secret: g.Secret, Registry: g.Registry, Service: g.Service,
			Scopes: g.Scopes, Expires: time.UnixMilli(g.ExpireUnixMs)}
	}
	if n := sig.GetBatchSize(); n > 0 {
		// Signed together with other jobs: the same claims are the leaf
		// of the batch's Merkle tree, and the proof leads to its root.
		p := agentproto.JobBatchProof{Index: sig.GetBatchIndex(), Size: n, Path: sig.GetBatchProof()}
		if err := agentproto.VerifyJobBatch(a.keys, &c, sig.GetSignature(), p, now); err != nil {
			return config, err
		}
	} else if err := agentproto.VerifyJob(a.keys, &c, sig.GetSignature(), now); err != nil {
		return config, err
	}
	// Components reference builds, and builds are digests: an image job
	// naming a tag (which could move under it) never runs.
	if as.ComponentType == agentproto.ImageType {
		src, _ := config[agentproto.ImageSourceKey].(string)
		if _, _, err := agentproto.ParseBuildRef(src); err != nil {
			return config, err
		}
	}
	return config, nil
}

// maxRefusals bounds the refusals waiting for imsd's confirmation; past
// it a refusal is only logged.
const maxRefusals = 1000

type refusalKey struct {
	job   string
	token int64
}

// refusal is a refused assignment whose report imsd has not confirmed.
type refusal struct {
	key  refusalKey
	text string
	sent bool
}

// refuse logs a refused assignment at ERROR and reports it to imsd: a
// result of outcome FAILED whose error starts with "refused: ", under the
// assignment's job id and fencing token, so that the job ends and an
// operator sees why. imsd takes that result only if the token is the one
// it gave this agent for that job: a forged or replayed assignment can
// at most end the job it names, and only if it was this agent's.
func (a *Agent) refuse(as *agentv1.JobAssignment, err error) {
	a.log.Error("refusing an assignment", "job", as.JobId, "attempt", as.Attempt, "install", as.InstallId, "reason", err)
	a.note("assignment.refused", "job:"+as.JobId, map[string]string{"attempt": itoa(int64(as.Attempt)), "token": itoa(as.FencingToken),
		"install": as.InstallId, "key": as.GetSignature().GetKeyId(), "reason": err.Error()})
	if as.JobId == "" || as.FencingToken == 0 {
		return // nothing to report it under
	}
	k := refusalKey{as.JobId, as.FencingToken}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.refusals[k]; dup || len(a.refusals) >= maxRefusals {
		return
	}
	a.refusals[k] = &refusal{key: k, text: fmt.Sprintf("refused: attempt %d of job %s: %v", as.Attempt, as.JobId, err)}
	a.kickNow()
}

// begin starts an attempt whose ack imsd accepted. a.mu is held.
func (a *Agent) beginLocked(j *jobRun) {
	if j.started || j.stopping {
		return
	}
	j.started = true
	as, config := j.as, j.config
	j.as, j.config = nil, nil
	timeout := time.Duration(as.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Hour
	}
	job := Job{
		ID: as.JobId, InstallID: as.InstallId, Attempt: as.Attempt,
		ComponentType: as.ComponentType, Component: as.Component, Operation: as.Operation,
		Config: config, Timeout: timeout, Mode: as.Mode, ApprovedPlanDigest: as.ApprovedPlanDigest, Kill: j.kill,
		WindowBound: as.WindowBound,
		Lease: func() time.Duration {
			a.mu.Lock()
			defer a.mu.Unlock()
			return -a.elapsedSince(j.leaseUntil)
		},
	}
	if g := as.GetRegistryGrant(); g != nil {
		job.Registry = func(ctx context.Context) (RegistryAccess, error) { return a.exchangeGrant(ctx, j.id, g) }
	}
	job.SupplyChain = a.supplyChain
	a.wg.Add(1)
	go a.run(j, job)
}

// run runs one started attempt to its end.
func (a *Agent) run(j *jobRun, job Job) {
	defer a.wg.Done()
	defer close(j.done)
	defer a.retire(j)
	if j.prev != nil {
		// Never two attempts of one job at once on this agent: wait for
		// the old one's plugin to exit.
		select {
		case <-j.prev.done:
		case <-j.ctx.Done():
		}
		j.prev = nil
	}
	if j.ctx.Err() == nil && j.auditErr != nil {
		// No local record of the job, no action.
		a.log.Error("job not started", "job", j.id, "attempt", j.attempt, "why", j.auditErr)
		a.note("job.not_started", "job:"+j.id, map[string]string{"attempt": itoa(int64(j.attempt)), "token": itoa(j.token), "error": j.auditErr.Error()})
		a.appendLog(j, StreamSystem, "[agentd] "+j.auditErr.Error())
		a.finish(j, Outcome{Outcome: agentv1.Outcome_OUTCOME_FAILED, ExitCode: -1, Error: "audit: " + j.auditErr.Error()})
		return
	}
	if j.ctx.Err() == nil {
		// The customer's permissions decide, right before the plugin
		// would start: a refused job never runs anything, and its
		// refusal is its result, written under its lease like any other.
		if why := a.refusal(job.Mode); why != "" {
			a.log.Warn("job refused", "job", j.id, "attempt", j.attempt, "mode", job.Mode, "why", why)
			a.appendLog(j, StreamSystem, "[agentd] "+why)
			a.finish(j, Outcome{Outcome: agentv1.Outcome_OUTCOME_REFUSED, ExitCode: -1, Error: why})
			return
		}
		// A break_glass job runs under the grant live now that ends
		// last, and only under it: its role and end are that grant's,
		// and it stops when that grant ends, whatever other grants
		// are live then (enforcePermissions).
		if m, err := permissions.ParseMode(job.Mode); err == nil && m == permissions.BreakGlass {
			if gs, err := a.grants(); err == nil {
				if g, ok := gs.Live(a.now()); ok {
					job.Grant = g.ID
					a.mu.Lock()
					j.grant = g.ID
					a.mu.Unlock()
					a.log.Info("break_glass job runs under grant", "job", j.id, "attempt", j.attempt, "grant", g.ID)
				}
			}
		}
		// A job of a release runs only inside the customer's maintenance
		// window, by the agent's own clock, whatever imsd thought.
		if why, data := a.windowRefusal(job.WindowBound); why != "" {
			a.log.Warn("job refused outside the customer's maintenance window", "job", j.id, "attempt", j.attempt, "why", why)
			data["attempt"], data["token"], data["reason"] = itoa(int64(j.attempt)), itoa(j.token), why
			a.note("job.refused_window", "job:"+j.id, data)
			a.appendLog(j, StreamSystem, "[agentd] "+why)
			a.finish(j, Outcome{Outcome: agentv1.Outcome_OUTCOME_REFUSED, ExitCode: -1, Error: why})
			return
		}
	}
	var out Outcome
	timedOut := false
	if j.ctx.Err() == nil {
		jctx, cancelTimeout := context.WithTimeoutCause(j.ctx, job.Timeout, errTimedOut)
		a.log.Info("job started", "job", j.id, "attempt", j.attempt, "type", job.ComponentType, "operation", job.Operation)
		out = a.cfg.Runner.Run(jctx, job, func(stream int32, text string) { a.appendLog(j, stream, text) })
		timedOut = errors.Is(context.Cause(jctx), errTimedOut)
		cancelTimeout()
	}
	var c cancelled
	switch cause := context.Cause(j.ctx); {
	case errors.As(cause, &c):
		out = Outcome{Outcome: agentv1.Outcome_OUTCOME_CANCELLED, ExitCode: -1,
			Error: c.reason + "; the plugin and its processes were stopped"}
	case cause != nil:
		// The lease was lost or the agent is stopping: this agent no
		// longer owns the job and must not write a result.
		a.abandoned(j, cause)
		return
	case timedOut:
		out = Outcome{Outcome: agentv1.Outcome_OUTCOME_TIMED_OUT, ExitCode: -1,
			Error: fmt.Sprintf("timed out after %s; the plugin and its processes were stopped", job.Timeout)}
	}
	a.finish(j, out)
}

// abandoned logs an attempt given up without a result and forgets it,
// unless a newer attempt already took its place.
func (a *Agent) abandoned(j *jobRun, cause error) {
	a.log.Warn("job abandoned", "job", j.id, "attempt", j.attempt, "cause", cause)
	a.mu.Lock()
	if a.jobs[j.id] == j {
		delete(a.jobs, j.id)
	}
	a.mu.Unlock()
}

// retire drops a finished run from the live set (its plugin is gone).
func (a *Agent) retire(j *jobRun) {
	a.mu.Lock()
	if a.live[j.id] == j {
		delete(a.live, j.id)
	}
	a.mu.Unlock()
}

// appendLog queues one line (split if long) for imsd.
func (a *Agent) appendLog(j *jobRun, stream int32, text string) {
	now := timestamppb.New(a.now())
	a.mu.Lock()
	j.lastText = text
	for first := true; first || len(text) > 0; first = false {
		chunk := text
		if len(chunk) > MaxLineBytes {
			cut := MaxLineBytes
			for cut > 0 && !utf8.RuneStart(text[cut]) {
				cut--
			}
			chunk = text[:cut]
		}
		text = text[len(chunk):]
		if !utf8.ValidString(chunk) {
			chunk = strings.ToValidUTF8(chunk, "\uFFFD")
		}
		j.nextSeq++
		j.lines = append(j.lines, &agentv1.LogLine{Seq: j.nextSeq, Time: now, Stream: stream, Text: chunk})
		if len(j.lines) > a.cfg.MaxBufferedLines && j.sent < len(j.lines)-1 {
			// Drop the oldest line not yet in flight; say so at the end.
			j.lines = append(j.lines[:j.sent], j.lines[j.sent+1:]...)
			j.dropped++
		}
	}
	a.mu.Unlock()
	select {
	case a.logKick <- struct{}{}:
	default:
	}
}

// finish records a job's outcome; the session sends it once every log line
// before it is confirmed.
func (a *Agent) finish(j *jobRun, out Outcome) {
	args := []any{"job", j.id, "attempt", j.attempt, "outcome", out.Outcome, "exit_code", out.ExitCode}
	if out.Error != "" {
		args = append(args, "error", out.Error)
	}
	a.log.Info("job finished", args...)
	switch out.Outcome {
	case agentv1.Outcome_OUTCOME_SUCCEEDED:
		a.failedInRow.Store(0)
	case agentv1.Outcome_OUTCOME_FAILED, agentv1.Outcome_OUTCOME_TIMED_OUT:
		a.failedInRow.Add(1)
	}
	result := &agentv1.JobResult{
		JobId: j.id, FencingToken: j.token, Outcome: out.Outcome, ExitCode: out.ExitCode,
		Error: cutText(out.Error, MaxLineBytes), Outputs: out.Outputs, PlannedChanges: out.PlannedChanges,
		PlanDigest:     out.PlanDigest,
		PolicyFindings: out.PolicyFindings, Drifted: out.Drifted,
		Verifications: verificationsToProto(out.Verifications),
	}
	if n := proto.Size(result); n > MaxResultBytes {
		result = oversizeResult(result, n)
		out.Outcome, out.Error = result.Outcome, result.Error
		a.log.Warn("job result too large to send", "job", j.id, "attempt", j.attempt, "bytes", n)
	}
	a.mu.Lock()
	if j.dropped > 0 {
		j.nextSeq++
		j.lines = append(j.lines, &agentv1.LogLine{Seq: j.nextSeq, Time: timestamppb.New(a.now()), Stream: StreamSystem,
			Text: fmt.Sprintf("[agentd] %d log lines were dropped while imsd could not be reached", j.dropped)})
	}
	if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED && out.Error != "" && (j.dropped > 0 || !strings.Contains(j.lastText, out.Error)) {
		// The log ends with why the job failed, as the result says it,
		// for whoever reads only the log (byoc job logs, the console).
		j.nextSeq++
		j.lines = append(j.lines, &agentv1.LogLine{Seq: j.nextSeq, Time: timestamppb.New(a.now()), Stream: StreamSystem,
			Text: "[agentd] " + outcomeWord(out.Outcome) + ": " + out.Error})
	}
	result.LastSeq = j.nextSeq
	j.result = result
	a.mu.Unlock()
	a.kickNow()
}

// MaxResultBytes bounds a job's result as the agent sends it. imsd
// reads at most 16 MiB a message from an agent and ends the stream on a
// larger one; a result the agent kept sending would end every stream of
// the install's agent, again and again, and no job of it would finish.
// What the plugin returns (outputs, planned changes, its error) is the
// vendor's code's to choose, so the agent keeps well under that.
const MaxResultBytes = 8 << 20

// oversizeResult is what the agent sends instead of result, n bytes
// encoded, over MaxResultBytes: the job failed (it may have done its
// work: the error says the result, not the work, is what was lost),
// without its outputs and planned changes, naming the largest of them.
func oversizeResult(result *agentv1.JobResult, n int) *agentv1.JobResult {
	type part struct {
		name string
		size int
	}
	var parts []part
	for k, v := range result.Outputs {
		parts = append(parts, part{"outputs." + k, len(k) + len(v)})
	}
	for i, c := range result.PlannedChanges {
		parts = append(parts, part{fmt.Sprintf("planned_changes[%d] (%s)", i, cutText(c.GetAddress(), 200)), proto.Size(c)})
	}
	slices.SortFunc(parts, func(a, b part) int { return cmp.Or(b.size-a.size, strings.Compare(a.name, b.name)) })
	var largest []string
	for _, p := range parts[:min(len(parts), 5)] {
		largest = append(largest, fmt.Sprintf("%s %s", p.name, sizeText(p.size)))
	}
	msg := fmt.Sprintf("the job's result is %s, over the %s an agent sends to imsd, so it was not sent", sizeText(n), sizeText(MaxResultBytes))
	if result.Outcome == agentv1.Outcome_OUTCOME_SUCCEEDED {
		msg = "the operation succeeded but " + msg
	}
	msg += fmt.Sprintf(": %d outputs, %d planned changes", len(result.Outputs), len(result.PlannedChanges))
	if len(largest) > 0 {
		msg += "; the largest: " + strings.Join(largest, ", ")
	}
	if result.Error != "" {
		msg += "; the plugin's error: " + cutText(result.Error, 4<<10)
	}
	outcome := result.Outcome
	if outcome == agentv1.Outcome_OUTCOME_SUCCEEDED {
		outcome = agentv1.Outcome_OUTCOME_FAILED
	}
	small := &agentv1.JobResult{JobId: result.JobId, FencingToken: result.FencingToken, Outcome: outcome,
		ExitCode: result.ExitCode, Error: msg, PolicyFindings: result.PolicyFindings, Drifted: result.Drifted,
		Verifications: result.Verifications}
	if proto.Size(small) > MaxResultBytes/2 {
		// The findings and verifications, too, are past reason.
		small.PolicyFindings, small.Verifications = nil, nil
		small.Error += fmt.Sprintf("; %d policy findings and %d verifications were left out too", len(result.PolicyFindings), len(result.Verifications))
	}
	return small
}

// sizeText says a byte count for people.
func sizeText(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// cutText is s cut to at most n bytes in all, on a rune boundary, saying
// so (n well over the note's length).
// CutLogLine is text cut to MaxLineBytes, saying so: the longest log
// line imsd takes from an agent.
func CutLogLine(text string) string { return cutText(text, MaxLineBytes) }

func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	note := fmt.Sprintf(" … (%d bytes cut)", len(s))
	cut := n - len(note)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + note
}

// stopLocked gives up an attempt this agent no longer owns: it is
// forgotten at once (nothing more is written for it) and its plugin is
// killed; a newer attempt of the same job waits for that (jobRun.prev).
// a.mu is held.
func (a *Agent) stopLocked(j *jobRun, why string) {
	if a.jobs[j.id] == j {
		delete(a.jobs, j.id)
	}
	if j.stopping {
		return
	}
	j.stopping = true
	close(j.kill)
	if j.started && j.result == nil {
		a.log.Warn("stopping job", "job", j.id, "attempt", j.attempt, "why", why)
	} else {
		a.log.Info("giving up job", "job", j.id, "attempt", j.attempt, "why", why)
	}
	j.cancel(errors.New(why))
	if !j.started {
		if a.live[j.id] == j {
			delete(a.live, j.id)
		}
		close(j.done)
	}
}

func (a *Agent) kickNow() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// outcomeWord says an outcome that is not success in a log line.
func outcomeWord(o agentv1.Outcome) string {
	switch o {
	case agentv1.Outcome_OUTCOME_REFUSED:
		return "refused"
	case agentv1.Outcome_OUTCOME_CANCELLED:
		return "cancelled"
	case agentv1.Outcome_OUTCOME_TIMED_OUT:
		return "timed out"
	default:
		return "failed"
	}
}
