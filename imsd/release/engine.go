package release

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/workflow"
	"github.com/byoc-dev/byoc/internal/labels"
	"github.com/byoc-dev/byoc/internal/plural"
)

// Selection picks the installs of a release.
type Selection interface {
	// Installs returns the installs of app appID that selector picks, in
	// the order the waves take them.
	Installs(ctx context.Context, appID, selector string) ([]store.Install, error)
}

// Windows says when installs may be changed.
type Windows interface {
	// Open reports whether install in may be changed at now; when not,
	// next is when its window opens next (zero if never) and why says
	// whose window it is.
	Open(ctx context.Context, in store.Install, now time.Time) (open bool, next time.Time, why string, err error)
}

// ByLabels is the Selection by label selector: the installs of the app
// whose labels match, by name.
type ByLabels struct{ Store *store.Store }

// Installs implements Selection.
func (a ByLabels) Installs(ctx context.Context, appID, selector string) ([]store.Install, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, errs.Field("selector", "%v", err)
	}
	all, err := a.Store.ListInstalls(ctx, appID)
	if err != nil {
		return nil, err
	}
	all = store.CustomerInstalls(all)
	var out []store.Install
	for _, in := range all {
		if sel.Matches(in.Labels) {
			out = append(out, in)
		}
	}
	return out, nil
}

// startBatch is how many installs one write starts.
const startBatch = 500

// Engine creates releases and rolls them out.
type Engine struct {
	st  *store.Store
	hub *dispatch.Hub
	wf  *workflow.Engine
	now func() time.Time
	log *slog.Logger
	// Select picks installs; Windows, when set, is asked before an
	// install of a release that respects windows starts. Set before Run.
	Select  Selection
	Windows Windows
	// Interval is how often every unfinished release is looked at even
	// without a signal (other replicas, windows opening, pauses between
	// waves ending). Set before Run.
	Interval time.Duration

	mu     sync.Mutex
	kicked map[string]bool
	wake   chan struct{}
}

// NewEngine returns an engine over st; wf plans installs and runs their
// workflows; now is the release clock (maintenance windows, pauses).
func NewEngine(st *store.Store, hub *dispatch.Hub, wf *workflow.Engine, now func() time.Time, log *slog.Logger) *Engine {
	return &Engine{st: st, hub: hub, wf: wf, now: now, log: log, Interval: 2 * time.Second, Select: ByLabels{st}, Windows: InstallWindows{st},
		kicked: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// Kick asks the engine to look at release id soon.
func (e *Engine) Kick(id string) {
	e.mu.Lock()
	e.kicked[id] = true
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// minSignalGap is the least time between two passes woken by the fleet
// signal, which fires at every job change: a busy release is looked at
// every 100 ms, not at every one of its jobs' changes; and at most a
// fifth of the time (a pass over a wave of thousands of running installs
// takes tens of milliseconds), so the passes leave the machine to the
// workflows they wait for.
const minSignalGap = 100 * time.Millisecond

// Run advances releases until ctx ends: those kicked, every unfinished one
// when a job changes (a workflow of theirs may have ended), and every
// Interval and at start (which is how a restart resumes).
func (e *Engine) Run(ctx context.Context) {
	t := time.NewTicker(e.Interval)
	defer t.Stop()
	// The signal is taken before each pass, so a change made during the
	// pass (or the gap after it) is seen after it.
	signal := e.hub.FleetSignal()
	active := e.advanceAll(ctx)
	var gap <-chan time.Time
	for {
		var sig <-chan struct{}
		if active && gap == nil {
			sig = signal
		}
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
			active = true
			e.mu.Lock()
			ids := slices.Sorted(maps.Keys(e.kicked))
			clear(e.kicked)
			e.mu.Unlock()
			for _, id := range ids {
				e.advanceLogged(ctx, id)
			}
		case <-sig:
			signal = e.hub.FleetSignal()
			start := time.Now()
			active = e.advanceAll(ctx)
			gap = time.After(min(max(minSignalGap, 4*time.Since(start)), 2*time.Second))
		case <-gap:
			gap = nil
		case <-t.C:
			signal = e.hub.FleetSignal()
			active = e.advanceAll(ctx)
		}
	}
}

func (e *Engine) advanceAll(ctx context.Context) bool {
	ids, err := e.st.ReleasesToAdvance(ctx)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Error("releases to advance", "err", err)
		}
		return true
	}
	for _, id := range ids {
		e.advanceLogged(ctx, id)
	}
	return len(ids) > 0
}

func (e *Engine) advanceLogged(ctx context.Context, id string) {
	if err := e.Advance(ctx, id); err != nil && ctx.Err() == nil {
		e.log.Error("advance release", "release", id, "err", err)
	}
}

// Advance does what release id can do now: record its installs whose
// workflow ended, halt it past its failure threshold, start the current
// wave's installs whose windows are open, move to the next wave when one
// succeeded, and end it when nothing is left. It is idempotent.
func (e *Engine) Advance(ctx context.Context, id string) error {
	for range 50 {
		again, err := e.step(ctx, id)
		if err != nil || !again {
			return err
		}
	}
	return nil
}

func (e *Engine) step(ctx context.Context, id string) (again bool, err error) {
	now := e.now()
	// A pass reads the release and its counts per wave and state; it
	// lists installs only when it has some to start (or cancel), so a
	// release of 10,000 installs costs little while its workflows run.
	r, err := e.st.GetReleaseOnly(ctx, id)
	if err != nil || r.State.Terminal() {
		return false, err
	}
	var n int
	if r.IsAgentRollout() {
		n, err = e.st.RecordAgentRolloutInstalls(ctx, r, now)
	} else {
		n, err = e.st.RecordReleaseInstalls(ctx, id, now)
	}
	if err != nil {
		return false, err
	}
	if n > 0 {
		e.hub.FleetChanged()
		if r.IsAgentRollout() {
			// An install that missed its deadline had its offer
			// withdrawn: its agents' streams tell them.
			e.hub.OfferChanged()
		}
	}
	all, err := e.st.CountReleaseInstalls(ctx, []string{id})
	if err != nil {
		return false, err
	}
	byWave := all[id]
	count := map[store.ReleaseInstallState]int{}
	total := 0
	for _, c := range byWave {
		for st, k := range c {
			count[st] += k
			total += k
		}
	}
	if r.CancelRequested {
		return false, e.cancel(ctx, r, count)
	}
	if r.State != store.ReleaseRunning {
		return false, nil // paused, halted or awaiting approval: only recorded
	}
	failures := count[store.RIFailed] - r.FailuresBase
	// An agent rollout's first wave of several is its canary: one failure
	// there halts it, whatever --max-failures tolerates.
	canaryFailed := r.IsAgentRollout() && len(r.Waves) > 1 && r.CurrentWave == 0 && failures > 0
	if failures > r.MaxFailures || canaryFailed {
		msg := fmt.Sprintf("%s failed, more than the %d tolerated (--max-failures %s)", plural.Count(failures, "install"),
			r.MaxFailures, cmp.Or(r.MaxFailuresSpec, "0"))
		if failures <= r.MaxFailures {
			msg = fmt.Sprintf("the canary wave (%s) failed: %s failed", r.Waves[0].Name, plural.Count(failures, "install"))
		}
		failed, err := e.st.ReleaseInstallsIn(ctx, id, -1, store.RIFailed)
		if err != nil {
			return false, err
		}
		if len(failed) > 0 {
			msg += "; first: " + failed[0].InstallName + ": " + failed[0].Error
		}
		ok, err := e.st.HaltRelease(ctx, id, msg, now)
		if ok {
			e.log.Info("release halted", "release", id, "reason", msg)
			e.hub.FleetChanged()
		}
		return false, err
	}
	wave := r.CurrentWave
	wc := byWave[wave]
	if wc[store.RIPending]+wc[store.RIWaiting] > 0 {
		if r.RequireApproval && r.ApprovedWave < wave {
			ok, err := e.st.AwaitReleaseApproval(ctx, id, wave, now)
			if ok {
				e.hub.FleetChanged()
			}
			return false, err
		}
		todo, err := e.st.ReleaseInstallsIn(ctx, id, wave, store.RIPending, store.RIWaiting)
		if err != nil {
			return false, err
		}
		started, err := e.start(ctx, r, todo, now)
		if err != nil {
			return false, err
		}
		if started > 0 {
			e.hub.FleetChanged()
		}
		return false, nil
	}
	if wc[store.RIRunning] > 0 {
		return false, nil
	}
	// The wave is done.
	if wave == len(r.Waves)-1 {
		state, msg := store.ReleaseSucceeded, ""
		if bad := count[store.RIFailed] + count[store.RICancelled] + count[store.RISkipped]; bad > 0 {
			state = store.ReleaseFailed
			msg = fmt.Sprintf("%d of %d installs did not succeed (%d failed, %d cancelled, %d skipped)", bad, total,
				count[store.RIFailed], count[store.RICancelled], count[store.RISkipped])
		}
		ok, err := e.st.EndRelease(ctx, id, state, msg, now)
		if ok {
			e.log.Info("release ended", "release", id, "state", state)
			e.hub.FleetChanged()
		}
		return false, err
	}
	if r.PauseBetween > 0 {
		if r.WaveEndedAt.IsZero() {
			if _, err := e.st.EndWave(ctx, id, wave, now); err != nil {
				return false, err
			}
			return true, nil
		}
		if now.Before(r.WaveEndedAt.Add(r.PauseBetween)) {
			return false, nil
		}
	}
	next := r.Waves[wave+1]
	ok, err := e.st.StartNextWave(ctx, id, wave, next.Name, next.Size, now)
	if ok {
		e.log.Info("release wave started", "release", id, "wave", wave+2, "name", next.Name)
		e.hub.FleetChanged()
	}
	return ok, err
}

// start starts the installs of todo whose windows are open (all when the
// release does not respect windows) and marks the others waiting.
func (e *Engine) start(ctx context.Context, r store.Release, todo []store.ReleaseInstall, now time.Time) (int, error) {
	var starts []store.ReleaseStart
	var offers []store.AgentRolloutStart
	var waits []store.ReleaseWait
	for _, ri := range todo {
		in, err := e.st.GetInstall(ctx, ri.InstallID)
		if err != nil {
			return 0, err
		}
		if r.RespectWindows && e.Windows != nil {
			open, next, why, err := e.Windows.Open(ctx, in, now)
			if err != nil {
				return 0, err
			}
			if !open {
				if ri.State != store.RIWaiting || !ri.WindowOpensAt.Equal(next) || ri.Error != why {
					waits = append(waits, store.ReleaseWait{InstallID: in.ID, OpensAt: next, Why: why})
				}
				continue
			}
		}
		if r.IsAgentRollout() {
			offers = append(offers, store.AgentRolloutStart{InstallID: in.ID, OfferID: "uo_" + rand.Text()[:16]})
			continue
		}
		wf, err := e.workflowFor(ctx, r, ri, in, now)
		if err != nil {
			return 0, err
		}
		starts = append(starts, store.ReleaseStart{InstallID: in.ID, Workflow: wf})
	}
	if err := e.st.WaitReleaseInstalls(ctx, r.ID, waits); err != nil {
		return 0, err
	}
	total := 0
	for chunk := range slices.Chunk(offers, startBatch) {
		started, err := e.st.StartAgentRolloutInstalls(ctx, r.ID, r.CurrentWave, chunk, now)
		if err != nil {
			return total, err
		}
		total += len(started)
	}
	if len(offers) > 0 {
		e.hub.OfferChanged()
	}
	for chunk := range slices.Chunk(starts, startBatch) {
		started, err := e.st.StartReleaseInstalls(ctx, r.ID, r.CurrentWave, chunk, now)
		if err != nil {
			return total, err
		}
		total += len(started)
		for _, st := range chunk {
			if slices.Contains(started, st.InstallID) {
				e.wf.Kick(st.Workflow.ID)
			}
		}
	}
	return total, nil
}

// workflowFor is the update workflow that rolls release r out to install
// in, with the install's parallelism and approval settings.
func (e *Engine) workflowFor(ctx context.Context, r store.Release, ri store.ReleaseInstall, in store.Install, now time.Time) (store.Workflow, error) {
	app, err := e.wf.App(ctx, in.AppID, ri.ToRevision)
	if err != nil {
		return store.Workflow{}, err
	}
	what := "release"
	if r.Kind == "rollback" {
		what = "rollback"
	}
	wf := store.Workflow{ID: auth.NewID("wf_"), InstallID: in.ID, Kind: workflow.Update, AppRevision: ri.ToRevision,
		Reason:          fmt.Sprintf("%s %s, wave %d (%s)", what, r.ID, ri.Wave+1, r.Waves[ri.Wave].Name),
		Parallelism:     cmp.Or(in.Settings.Parallelism, app.Metadata.InstallDefaults.Parallelism, workflow.DefaultParallelism),
		RequireApproval: app.Metadata.InstallDefaults.RequireApproval,
		CreatedAt:       now, CreatedBy: "release " + r.ID, ReleaseID: r.ID}
	if in.Settings.RequireApproval != nil {
		wf.RequireApproval = *in.Settings.RequireApproval
	}
	return wf, nil
}

// cancel cancels the running workflows of a release being cancelled and
// ends it once none runs.
func (e *Engine) cancel(ctx context.Context, r store.Release, count map[store.ReleaseInstallState]int) error {
	if count[store.RIRunning] == 0 {
		ok, err := e.st.EndRelease(ctx, r.ID, store.ReleaseCancelled, cmp.Or(r.Error, "release cancelled"), e.now())
		if ok {
			e.hub.FleetChanged()
		}
		return err
	}
	if r.IsAgentRollout() {
		// The cancel withdrew the offers no agent took (the store's
		// cancelAgentRollout); an install whose agent took it ends as
		// its agents confirm, fail, or miss the deadline.
		return nil
	}
	running, err := e.st.ReleaseInstallsIn(ctx, r.ID, -1, store.RIRunning)
	if err != nil {
		return err
	}
	for _, in := range running {
		wf, _, err := e.st.GetWorkflow(ctx, in.WorkflowID)
		if err != nil {
			return err
		}
		if wf.State.Terminal() || wf.CancelRequested {
			continue
		}
		if _, err := e.st.RequestWorkflowCancel(ctx, wf.ID, "release "+r.ID+" cancelled", "imsd", e.now()); err != nil && !errs.Is(err, errs.Conflict) {
			return err
		}
		e.wf.Kick(wf.ID)
	}
	return nil
}

// CreateRequest is what a release is made from.
type CreateRequest struct {
	AppID           string
	Revision        int64
	Waves           string
	Selector        string
	MaxFailures     string
	PauseBetween    time.Duration
	RespectWindows  bool
	RequireApproval bool
	Reason          string
	By              string
}

// Create plans every selected install of the app for the revision,
// groups them by identical plan, splits them into waves and stores the
// release, whose first wave starts at once (unless it requires approval).
// An install that cannot be planned is skipped, with why.
func (e *Engine) Create(ctx context.Context, req CreateRequest) (store.Release, error) {
	if req.Revision < 1 {
		return store.Release{}, errs.Field("revision", "is required (byoc app revisions lists them)")
	}
	if req.PauseBetween < 0 || req.PauseBetween > 7*24*time.Hour {
		return store.Release{}, errs.Field("pause_between", "must be between 0 and 7 days")
	}
	if len(req.Reason) > 1024 {
		return store.Release{}, errs.Field("reason", "is longer than 1024 bytes")
	}
	if _, err := e.st.GetAppRevision(ctx, req.AppID, req.Revision); err != nil {
		if errs.Is(err, errs.NotFound) {
			return store.Release{}, errs.Field("revision", "the app has no revision %d (byoc app revisions lists them)", req.Revision)
		}
		return store.Release{}, err
	}
	all, err := e.Select.Installs(ctx, req.AppID, req.Selector)
	if err != nil {
		return store.Release{}, err
	}
	// Installs never provisioned (or gone) have nothing to update.
	var installs []store.Install
	for _, in := range all {
		if in.State != store.InstallNew && in.State != store.InstallDeprovisioned && in.State != store.InstallDeprovisioning {
			installs = append(installs, in)
		}
	}
	if len(installs) == 0 {
		return store.Release{}, errs.E(errs.Conflict, "no provisioned install of the app matches%s", selectorText(req.Selector))
	}
	waves, err := ParseWaves(req.Waves, len(installs))
	if err != nil {
		return store.Release{}, err
	}
	maxFail, err := ParseMaxFailures(req.MaxFailures, len(installs))
	if err != nil {
		return store.Release{}, err
	}
	targets := make([]target, len(installs))
	for i, in := range installs {
		targets[i] = target{in: in, from: in.AppRevision, to: req.Revision}
	}
	groups, rows := e.plan(ctx, targets)
	assignWaves(rows, waves)
	r := store.Release{ID: auth.NewSortableID("rel_", e.now()), AppID: req.AppID, AppRevision: req.Revision, Kind: "release",
		State: store.ReleaseRunning, Waves: waves, Selector: req.Selector, MaxFailures: maxFail, MaxFailuresSpec: req.MaxFailures,
		PauseBetween: req.PauseBetween, RespectWindows: req.RespectWindows, RequireApproval: req.RequireApproval,
		Reason: req.Reason, PlanGroups: groups, CreatedAt: e.now(), CreatedBy: req.By}
	if r.RequireApproval {
		r.State = store.ReleaseAwaitingApproval
	}
	if err := e.st.CreateRelease(ctx, r, rows); err != nil {
		return store.Release{}, err
	}
	e.log.Info("release created", "release", r.ID, "app", req.AppID, "revision", req.Revision, "installs", len(rows), "by", req.By)
	e.hub.FleetChanged()
	e.Kick(r.ID)
	return r, nil
}

func selectorText(sel string) string {
	if sel == "" {
		return ""
	}
	return " selector " + sel
}

// target is an install to plan, from and to a revision.
type target struct {
	in       store.Install
	from, to int64
}

// plan plans each target's update and groups identical plans (the same
// steps, operations and reasons), largest group first; a target that
// cannot be planned is skipped with why.
func (e *Engine) plan(ctx context.Context, targets []target) ([]store.PlanGroup, []store.ReleaseInstall) {
	type group struct {
		g     store.PlanGroup
		first int
	}
	byKey := map[string]*group{}
	keys := make([]string, len(targets))
	rows := make([]store.ReleaseInstall, len(targets))
	for i, t := range targets {
		rows[i] = store.ReleaseInstall{InstallID: t.in.ID, InstallName: t.in.Name, FromRevision: t.from, ToRevision: t.to, State: store.RIPending}
		p, err := e.wf.PlanFor(ctx, workflow.Update, t.in, t.to, nil)
		var g store.PlanGroup
		if err != nil {
			g.Error = "not planned: " + err.Error()
			rows[i].State, rows[i].Error = store.RISkipped, g.Error
		} else {
			for _, s := range p.Steps {
				g.Steps = append(g.Steps, strings.TrimSpace(s.Name+" "+s.Operation+" "+s.Reason))
			}
		}
		key := g.Error + "\x00" + strings.Join(g.Steps, "\x00") + fmt.Sprintf("\x00%d", t.to)
		keys[i] = key
		if byKey[key] == nil {
			byKey[key] = &group{g: g, first: i}
		}
		byKey[key].g.Installs++
	}
	list := slices.Collect(maps.Values(byKey))
	slices.SortFunc(list, func(a, b *group) int { return cmp.Or(b.g.Installs-a.g.Installs, a.first-b.first) })
	index := map[string]int{}
	out := make([]store.PlanGroup, len(list))
	for i, g := range list {
		out[i] = g.g
		index[keys[g.first]] = i
	}
	for i := range rows {
		rows[i].PlanGroup = index[keys[i]]
	}
	return out, rows
}

// assignWaves puts rows, in order, into waves; skipped rows go with the
// wave their place falls in.
func assignWaves(rows []store.ReleaseInstall, waves []store.ReleaseWave) {
	i := 0
	for w, wv := range waves {
		for k := 0; k < wv.Size && i < len(rows); k++ {
			rows[i].Wave, rows[i].Position = w, i
			i++
		}
	}
	for ; i < len(rows); i++ {
		rows[i].Wave, rows[i].Position = len(waves)-1, i
	}
}

// Rollback creates a release that re-deploys each install release id
// touched to the revision it had before, in reverse wave order: the last
// wave's installs first. The release, if it has not ended, is cancelled.
func (e *Engine) Rollback(ctx context.Context, id, reason, by string) (store.Release, error) {
	orig, ins, err := e.st.GetRelease(ctx, id)
	if err != nil {
		return store.Release{}, err
	}
	if orig.IsAgentRollout() {
		return store.Release{}, errs.E(errs.Conflict, "release %s is an agent rollout: there is no revision to go back to; roll the previous agent release out (byoc agent rollout create --release ...)", id)
	}
	if orig.RolledBackBy != "" {
		return store.Release{}, errs.E(errs.Conflict, "release %s was already rolled back by %s", id, orig.RolledBackBy)
	}
	if len(reason) > 1024 {
		return store.Release{}, errs.Field("reason", "is longer than 1024 bytes")
	}
	// Touched installs, grouped by their wave, last wave first.
	byWave := map[int][]target{}
	n := 0
	for _, ri := range ins {
		if ri.WorkflowID == "" || ri.FromRevision < 1 || ri.FromRevision == ri.ToRevision {
			continue
		}
		in, err := e.st.GetInstall(ctx, ri.InstallID)
		if err != nil {
			return store.Release{}, err
		}
		byWave[ri.Wave] = append(byWave[ri.Wave], target{in: in, from: ri.ToRevision, to: ri.FromRevision})
		n++
	}
	if n == 0 {
		return store.Release{}, errs.E(errs.Conflict, "release %s changed no install that had an earlier revision: there is nothing to roll back", id)
	}
	var waves []store.ReleaseWave
	var targets []target
	for w := len(orig.Waves) - 1; w >= 0; w-- {
		if len(byWave[w]) == 0 {
			continue
		}
		waves = append(waves, store.ReleaseWave{Name: "undo " + orig.Waves[w].Name, Spec: orig.Waves[w].Spec, Size: len(byWave[w])})
		targets = append(targets, byWave[w]...)
	}
	groups, rows := e.plan(ctx, targets)
	assignWaves(rows, waves)
	r := store.Release{ID: auth.NewSortableID("rel_", e.now()), AppID: orig.AppID, Kind: "rollback", RollbackOf: id,
		State: store.ReleaseRunning, Waves: waves, MaxFailures: len(rows), MaxFailuresSpec: "100%",
		RespectWindows: orig.RespectWindows, Reason: cmp.Or(reason, "rollback of "+id), PlanGroups: groups, CreatedAt: e.now(), CreatedBy: by}
	if err := e.st.CreateRelease(ctx, r, rows); err != nil {
		return store.Release{}, err
	}
	e.log.Info("release rolled back", "release", id, "rollback", r.ID, "installs", len(rows), "by", by)
	e.hub.FleetChanged()
	e.Kick(id)
	e.Kick(r.ID)
	return r, nil
}
