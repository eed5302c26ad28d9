package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// ReleaseState is where a release is.
type ReleaseState string

// The release states. A release is created running (or awaiting
// approval); halted is the failure threshold's doing, paused an
// operator's.
const (
	ReleaseRunning          ReleaseState = "running"
	ReleaseAwaitingApproval ReleaseState = "awaiting_approval"
	ReleasePaused           ReleaseState = "paused"
	ReleaseHalted           ReleaseState = "halted"
	ReleaseSucceeded        ReleaseState = "succeeded"
	ReleaseFailed           ReleaseState = "failed"
	ReleaseCancelled        ReleaseState = "cancelled"
)

// Terminal reports whether a release in state s has ended.
func (s ReleaseState) Terminal() bool {
	return s == ReleaseSucceeded || s == ReleaseFailed || s == ReleaseCancelled
}

// ReleaseInstallState is where one install of a release is.
type ReleaseInstallState string

// The states of a release's install: waiting is pending with its
// maintenance window closed; skipped could not be planned.
const (
	RIPending   ReleaseInstallState = "pending"
	RIWaiting   ReleaseInstallState = "waiting"
	RIRunning   ReleaseInstallState = "running"
	RISucceeded ReleaseInstallState = "succeeded"
	RIFailed    ReleaseInstallState = "failed"
	RICancelled ReleaseInstallState = "cancelled"
	RISkipped   ReleaseInstallState = "skipped"
)

// Terminal reports whether an install of a release is done.
func (s ReleaseInstallState) Terminal() bool {
	return s != RIPending && s != RIWaiting && s != RIRunning
}

// ReleaseWave is one wave of a release: its name, the spec it came from
// ("10%", "2") and how many installs it holds.
type ReleaseWave struct {
	Name string `json:"name"`
	Spec string `json:"spec"`
	Size int    `json:"size"`
}

// PlanGroup is installs of a release whose plans are identical: the
// plan's steps ("name operation reason") and how many installs share it.
type PlanGroup struct {
	Steps    []string `json:"steps"`
	Installs int      `json:"installs"`
	Error    string   `json:"error,omitempty"`
}

// Release is one app revision rolled out to many installs in waves.
type Release struct {
	ID    string
	AppID string
	// AppRevision is the revision rolled out (0 for a rollback, whose
	// installs each go back to their own previous revision).
	AppRevision int64
	// Kind is release or rollback; RollbackOf names the release a rollback
	// undoes, RolledBackBy the rollback of this one.
	Kind            string
	RollbackOf      string
	RolledBackBy    string
	State           ReleaseState
	Waves           []ReleaseWave
	Selector        string
	MaxFailures     int
	MaxFailuresSpec string
	PauseBetween    time.Duration
	RespectWindows  bool
	RequireApproval bool
	CurrentWave     int
	ApprovedWave    int
	WaveStartedAt   time.Time
	WaveEndedAt     time.Time
	// FailuresBase are failures an operator accepted by resuming a halted
	// release: the threshold counts only those beyond.
	FailuresBase    int
	CancelRequested bool
	Reason          string
	Error           string
	PlanGroups      []PlanGroup
	CreatedAt       time.Time
	CreatedBy       string
	EndedAt         time.Time
	// AgentRelease makes the release an agent rollout: the agent release
	// (oci://...@sha256:...) offered to each install's agents instead of
	// an update workflow; ConfirmWithin is how long an install's agent
	// has, from the offer (or from applying it, when its customer's
	// window deferred it), to report the new version confirmed.
	AgentRelease  string
	ConfirmWithin time.Duration
}

// IsAgentRollout reports whether r rolls an agent release out.
func (r Release) IsAgentRollout() bool { return r.AgentRelease != "" }

// ReleaseInstall is one install of a release.
type ReleaseInstall struct {
	ReleaseID    string
	InstallID    string
	InstallName  string
	Wave         int
	Position     int
	FromRevision int64
	ToRevision   int64
	PlanGroup    int
	State        ReleaseInstallState
	WorkflowID   string
	// OfferID is the update offer an agent rollout made to the install's
	// agents.
	OfferID string
	Error   string
	// WindowOpensAt is when a waiting install's window opens.
	WindowOpensAt time.Time
	StartedAt     time.Time
	EndedAt       time.Time
}

type releaseRow struct {
	ID              string `db:"id"`
	AppID           string `db:"app_id"`
	AppRevision     int64  `db:"app_revision"`
	Kind            string `db:"kind"`
	RollbackOf      string `db:"rollback_of"`
	RolledBackBy    string `db:"rolled_back_by"`
	State           string `db:"state"`
	Waves           string `db:"waves"`
	Selector        string `db:"selector"`
	MaxFailures     int    `db:"max_failures"`
	MaxFailuresSpec string `db:"max_failures_spec"`
	PauseBetween    int64  `db:"pause_between_ns"`
	RespectWindows  bool   `db:"respect_windows"`
	RequireApproval bool   `db:"require_approval"`
	CurrentWave     int    `db:"current_wave"`
	ApprovedWave    int    `db:"approved_wave"`
	WaveStartedAt   int64  `db:"wave_started_at"`
	WaveEndedAt     int64  `db:"wave_ended_at"`
	FailuresBase    int    `db:"failures_base"`
	CancelRequested bool   `db:"cancel_requested"`
	Reason          string `db:"reason"`
	Error           string `db:"error"`
	PlanGroups      string `db:"plan_groups"`
	CreatedAt       int64  `db:"created_at"`
	CreatedBy       string `db:"created_by"`
	EndedAt         int64  `db:"ended_at"`
	AgentRelease    string `db:"agent_release"`
	ConfirmWithin   int64  `db:"confirm_within_ns"`
}

const releaseCols = `id, app_id, app_revision, kind, rollback_of, rolled_back_by, state, waves, selector, max_failures,
	max_failures_spec, pause_between_ns, respect_windows, require_approval, current_wave, approved_wave, wave_started_at,
	wave_ended_at, failures_base, cancel_requested, reason, error, plan_groups, created_at, created_by, ended_at, agent_release, confirm_within_ns`

func (r releaseRow) release() (Release, error) {
	out := Release{ID: r.ID, AppID: r.AppID, AppRevision: r.AppRevision, Kind: r.Kind, RollbackOf: r.RollbackOf,
		RolledBackBy: r.RolledBackBy, State: ReleaseState(r.State), Selector: r.Selector, MaxFailures: r.MaxFailures,
		MaxFailuresSpec: r.MaxFailuresSpec, PauseBetween: time.Duration(r.PauseBetween), RespectWindows: r.RespectWindows,
		RequireApproval: r.RequireApproval, CurrentWave: r.CurrentWave, ApprovedWave: r.ApprovedWave,
		WaveStartedAt: fromNanos(r.WaveStartedAt), WaveEndedAt: fromNanos(r.WaveEndedAt), FailuresBase: r.FailuresBase,
		CancelRequested: r.CancelRequested, Reason: r.Reason, Error: r.Error, CreatedAt: fromNanos(r.CreatedAt),
		CreatedBy: r.CreatedBy, EndedAt: fromNanos(r.EndedAt), AgentRelease: r.AgentRelease, ConfirmWithin: time.Duration(r.ConfirmWithin)}
	if err := json.Unmarshal([]byte(r.Waves), &out.Waves); err != nil {
		return Release{}, fmt.Errorf("release %s waves: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(r.PlanGroups), &out.PlanGroups); err != nil {
		return Release{}, fmt.Errorf("release %s plan groups: %w", r.ID, err)
	}
	return out, nil
}

type releaseInstallRow struct {
	ReleaseID     string `db:"release_id"`
	InstallID     string `db:"install_id"`
	InstallName   string `db:"install_name"`
	Wave          int    `db:"wave"`
	Position      int    `db:"position"`
	FromRevision  int64  `db:"from_revision"`
	ToRevision    int64  `db:"to_revision"`
	PlanGroup     int    `db:"plan_group"`
	State         string `db:"state"`
	WorkflowID    string `db:"workflow_id"`
	OfferID       string `db:"offer_id"`
	Error         string `db:"error"`
	WindowOpensAt int64  `db:"window_opens_at"`
	StartedAt     int64  `db:"started_at"`
	EndedAt       int64  `db:"ended_at"`
}

func (r releaseInstallRow) install() ReleaseInstall {
	return ReleaseInstall{ReleaseID: r.ReleaseID, InstallID: r.InstallID, InstallName: r.InstallName, Wave: r.Wave,
		Position: r.Position, FromRevision: r.FromRevision, ToRevision: r.ToRevision, PlanGroup: r.PlanGroup,
		State: ReleaseInstallState(r.State), WorkflowID: r.WorkflowID, OfferID: r.OfferID, Error: r.Error, WindowOpensAt: fromNanos(r.WindowOpensAt),
		StartedAt: fromNanos(r.StartedAt), EndedAt: fromNanos(r.EndedAt)}
}

const releaseInstallCols = `ri.release_id, ri.install_id, i.name AS install_name, ri.wave, ri.position, ri.from_revision,
	ri.to_revision, ri.plan_group, ri.state, ri.workflow_id, ri.offer_id, ri.error, ri.window_opens_at, ri.started_at, ri.ended_at`

// releaseEvent is an audit event of release r, on the vendor's chain.
func releaseEvent(id, kind, actor string, at time.Time, data map[string]string) AuditEvent {
	return AuditEvent{Chain: VendorChain, At: at, Kind: kind, Actor: actor, Subject: "release:" + id, Data: data}
}

// CreateRelease stores r with its installs (each pending, or skipped with
// its error) and records release.created; a rollback also records
// release.rolled_back on the release it undoes and asks that one to
// cancel if it has not ended. r's first wave starts at once unless r
// awaits approval.
func (s *Store) CreateRelease(ctx context.Context, r Release, installs []ReleaseInstall) error {
	switch {
	case r.ID == "":
		return errs.Field("id", "required")
	case r.AppID == "":
		return errs.Field("app_id", "required")
	case len(r.Waves) == 0:
		return errs.Field("waves", "at least one wave is required")
	case r.Kind != "release" && r.Kind != "rollback":
		return errs.Field("kind", "must be release or rollback, got %q", r.Kind)
	case r.State != ReleaseRunning && r.State != ReleaseAwaitingApproval:
		return errs.Field("state", "a release starts running or awaiting approval, not %s", r.State)
	}
	if err := requireTime("created_at", r.CreatedAt); err != nil {
		return err
	}
	waves, _ := json.Marshal(r.Waves)
	groups, _ := json.Marshal(r.PlanGroups)
	if r.PlanGroups == nil {
		groups = []byte("[]")
	}
	return s.write(ctx, "create release", func(tx *txn) error {
		_, err := tx.ExecContext(ctx, s.bind(`INSERT INTO releases (id, app_id, app_revision, kind, rollback_of, state, waves,
			selector, max_failures, max_failures_spec, pause_between_ns, respect_windows, require_approval, wave_started_at,
			reason, plan_groups, created_at, created_by, agent_release, confirm_within_ns)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			r.ID, r.AppID, r.AppRevision, r.Kind, r.RollbackOf, string(r.State), string(waves), r.Selector, r.MaxFailures,
			r.MaxFailuresSpec, int64(r.PauseBetween), r.RespectWindows, r.RequireApproval, nanos(r.CreatedAt), r.Reason,
			string(groups), nanos(r.CreatedAt), r.CreatedBy, r.AgentRelease, int64(r.ConfirmWithin))
		switch {
		case isUnique(err):
			return errs.E(errs.AlreadyExists, "release %q already exists", r.ID)
		case isForeignKey(err):
			return errs.E(errs.NotFound, "app %q not found", r.AppID)
		case err != nil:
			return err
		}
		for _, in := range installs {
			state := in.State
			if state == "" {
				state = RIPending
			}
			var ended int64
			if state.Terminal() {
				ended = nanos(r.CreatedAt)
			}
			if _, err := tx.ExecContext(ctx, s.bind(`INSERT INTO release_installs (release_id, install_id, wave, position,
				from_revision, to_revision, plan_group, state, error, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
				r.ID, in.InstallID, in.Wave, in.Position, in.FromRevision, in.ToRevision, in.PlanGroup, string(state), in.Error,
				ended); err != nil {
				if isUnique(err) {
					return errs.E(errs.Invalid, "release %s: install %s is listed twice", r.ID, in.InstallID)
				}
				return err
			}
		}
		data := map[string]string{"app": r.AppID, "app_revision": strconv.FormatInt(r.AppRevision, 10), "kind": r.Kind,
			"waves": string(waves), "selector": r.Selector, "max_failures": r.MaxFailuresSpec, "installs": strconv.Itoa(len(installs)),
			"respect_windows": strconv.FormatBool(r.RespectWindows), "require_approval": strconv.FormatBool(r.RequireApproval),
			"reason": truncate(r.Reason, 512)}
		if r.RollbackOf != "" {
			data["rollback_of"] = r.RollbackOf
		}
		if r.AgentRelease != "" {
			data["agent_release"] = r.AgentRelease
			data["confirm_within"] = r.ConfirmWithin.String()
		}
		if err := s.Audit(ctx, tx, releaseEvent(r.ID, "release.created", r.CreatedBy, r.CreatedAt, data)); err != nil {
			return err
		}
		if r.State == ReleaseRunning {
			if err := s.Audit(ctx, tx, releaseEvent(r.ID, "release.wave_started", "imsd", r.CreatedAt,
				map[string]string{"wave": "1", "name": r.Waves[0].Name, "installs": strconv.Itoa(r.Waves[0].Size)})); err != nil {
				return err
			}
		}
		if r.RollbackOf == "" {
			return nil
		}
		var orig releaseRow
		err = tx.GetContext(ctx, &orig, s.bind(`SELECT `+releaseCols+` FROM releases WHERE id = ?`+s.forUpdate()), r.RollbackOf)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.E(errs.NotFound, "release %q not found", r.RollbackOf)
		}
		if err != nil {
			return err
		}
		if orig.RolledBackBy != "" {
			return errs.E(errs.Conflict, "release %s was already rolled back by %s", orig.ID, orig.RolledBackBy)
		}
		if _, err := tx.ExecContext(ctx, s.bind(`UPDATE releases SET rolled_back_by = ? WHERE id = ?`), r.ID, orig.ID); err != nil {
			return err
		}
		if !ReleaseState(orig.State).Terminal() {
			if err := s.cancelRelease(ctx, tx, orig.ID, "rolled back by "+r.ID, r.CreatedAt); err != nil {
				return err
			}
		}
		return s.Audit(ctx, tx, releaseEvent(orig.ID, "release.rolled_back", r.CreatedBy, r.CreatedAt,
			map[string]string{"rollback": r.ID, "reason": truncate(r.Reason, 512)}))
	})
}

// GetRelease returns a release and its installs in wave order.
func (s *Store) GetRelease(ctx context.Context, id string) (Release, []ReleaseInstall, error) {
	r, err := s.releaseOnly(ctx, id)
	if err != nil {
		return Release{}, nil, err
	}
	var rows []releaseInstallRow
	if err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT `+releaseInstallCols+` FROM release_installs ri
		JOIN installs i ON i.id = ri.install_id WHERE ri.release_id = ? ORDER BY ri.wave, ri.position`), id); err != nil {
		return Release{}, nil, fmt.Errorf("release %s installs: %w", id, err)
	}
	out := make([]ReleaseInstall, len(rows))
	for i, row := range rows {
		out[i] = row.install()
	}
	return r, out, nil
}

// ReleaseInstallsIn returns the installs of release id in wave (-1: any)
// whose state is one of states, in wave order.
func (s *Store) ReleaseInstallsIn(ctx context.Context, id string, wave int, states ...ReleaseInstallState) ([]ReleaseInstall, error) {
	if len(states) == 0 {
		return nil, errs.Field("states", "at least one state")
	}
	args := []any{id, wave, wave}
	for _, st := range states {
		args = append(args, string(st))
	}
	var rows []releaseInstallRow
	if err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT `+releaseInstallCols+` FROM release_installs ri
		JOIN installs i ON i.id = ri.install_id WHERE ri.release_id = ? AND (? < 0 OR ri.wave = ?)
		AND ri.state IN (`+placeholders(len(states))+`) ORDER BY ri.wave, ri.position`), args...); err != nil {
		return nil, fmt.Errorf("release %s installs: %w", id, err)
	}
	out := make([]ReleaseInstall, len(rows))
	for i, row := range rows {
		out[i] = row.install()
	}
	return out, nil
}

// GetReleaseOnly returns release id without its installs.
func (s *Store) GetReleaseOnly(ctx context.Context, id string) (Release, error) {
	return s.releaseOnly(ctx, id)
}

func (s *Store) releaseOnly(ctx context.Context, id string) (Release, error) {
	var row releaseRow
	err := s.r.GetContext(ctx, &row, s.bind(`SELECT `+releaseCols+` FROM releases WHERE id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		return Release{}, errs.E(errs.NotFound, "release %q not found", id)
	}
	if err != nil {
		return Release{}, fmt.Errorf("get release %s: %w", id, err)
	}
	return row.release()
}

// ReleaseFilter selects releases for ListReleases.
type ReleaseFilter struct {
	AppID string
	// Active keeps only releases that have not ended.
	Active bool
	// Agent keeps only agent rollouts (true) or only app releases
	// (false); nil keeps both.
	Agent *bool
	// Limit is at most 1000; 0 means 100.
	Limit int
}

// ListReleases returns releases, newest first.
func (s *Store) ListReleases(ctx context.Context, f ReleaseFilter) ([]Release, error) {
	limit := f.Limit
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > 1000:
		return nil, errs.Field("limit", "must be between 1 and 1000, got %d", limit)
	}
	q := `SELECT ` + releaseCols + ` FROM releases WHERE (? = '' OR app_id = ?)`
	if f.Active {
		q += ` AND state IN ('running', 'awaiting_approval', 'paused', 'halted')`
	}
	if f.Agent != nil && *f.Agent {
		q += ` AND agent_release <> ''`
	} else if f.Agent != nil {
		q += ` AND agent_release = ''`
	}
	q += fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT %d`, limit)
	var rows []releaseRow
	if err := s.r.SelectContext(ctx, &rows, s.bind(q), f.AppID, f.AppID); err != nil {
		return nil, fmt.Errorf("list releases: %w", err)
	}
	out := make([]Release, len(rows))
	for i, r := range rows {
		var err error
		if out[i], err = r.release(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ReleaseCounts counts a release's installs per wave and state.
type ReleaseCounts map[int]map[ReleaseInstallState]int

// CountReleaseInstalls counts the installs of releases ids per wave and
// state, for lists.
func (s *Store) CountReleaseInstalls(ctx context.Context, ids []string) (map[string]ReleaseCounts, error) {
	out := map[string]ReleaseCounts{}
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	var rows []struct {
		ReleaseID string `db:"release_id"`
		Wave      int    `db:"wave"`
		State     string `db:"state"`
		N         int    `db:"n"`
	}
	if err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT release_id, wave, state, COUNT(*) AS n FROM release_installs
		WHERE release_id IN (`+placeholders(len(ids))+`) GROUP BY release_id, wave, state`), args...); err != nil {
		return nil, fmt.Errorf("count release installs: %w", err)
	}
	for _, r := range rows {
		c := out[r.ReleaseID]
		if c == nil {
			c = ReleaseCounts{}
			out[r.ReleaseID] = c
		}
		if c[r.Wave] == nil {
			c[r.Wave] = map[ReleaseInstallState]int{}
		}
		c[r.Wave][ReleaseInstallState(r.State)] = r.N
	}
	return out, nil
}

// ReleasesToAdvance returns the releases that have not ended, oldest
// first.
func (s *Store) ReleasesToAdvance(ctx context.Context) ([]string, error) {
	var ids []string
	if err := s.r.SelectContext(ctx, &ids, `SELECT id FROM releases
		WHERE state IN ('running', 'awaiting_approval', 'paused', 'halted') ORDER BY created_at, id`); err != nil {
		return nil, fmt.Errorf("releases to advance: %w", err)
	}
	return ids, nil
}

// ReleaseStart is an install of a release to start: the workflow that
// rolls it out.
type ReleaseStart struct {
	InstallID string
	Workflow  Workflow
}

// StartReleaseInstalls starts installs of wave wave of release id: each
// that is still pending or waiting moves to running with its workflow,
// which is stored queued in the same transaction. Nothing starts unless
// the release is running, not being cancelled, at that wave and (if it
// requires approval) approved for it, so two
// replicas never start an install twice. started are the installs
// started.
func (s *Store) StartReleaseInstalls(ctx context.Context, id string, wave int, starts []ReleaseStart, now time.Time) (started []string, err error) {
	for _, st := range starts {
		if st.Workflow.ReleaseID != id {
			return nil, errs.Field("release_id", "workflow %s names release %q, not %s", st.Workflow.ID, st.Workflow.ReleaseID, id)
		}
		if err := checkWorkflow(st.Workflow); err != nil {
			return nil, err
		}
	}
	err = s.write(ctx, "start release installs", func(tx *txn) error {
		started = started[:0]
		for _, st := range starts {
			res, err := tx.ExecContext(ctx, s.bind(`UPDATE release_installs SET state = 'running', workflow_id = ?, started_at = ?,
				window_opens_at = 0, error = '' WHERE release_id = ? AND install_id = ? AND wave = ? AND state IN ('pending', 'waiting')
				AND EXISTS (SELECT 1 FROM releases WHERE id = ? AND state = 'running' AND current_wave = ? AND cancel_requested = ?
					AND (require_approval = ? OR approved_wave >= current_wave))`),
				st.Workflow.ID, nanos(now), id, st.InstallID, wave, id, wave, false, false)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				continue
			}
			if err := s.insertWorkflow(ctx, tx, st.Workflow); err != nil {
				return err
			}
			started = append(started, st.InstallID)
		}
		return nil
	})
	return started, err
}

// ReleaseWait is an install whose maintenance window is closed, and when
// it opens.
type ReleaseWait struct {
	InstallID string
	OpensAt   time.Time
	Why       string
}

// WaitReleaseInstalls marks pending installs of release id as waiting for
// their windows (or updates when a waiting one's window opens).
func (s *Store) WaitReleaseInstalls(ctx context.Context, id string, waits []ReleaseWait) error {
	if len(waits) == 0 {
		return nil
	}
	return s.write(ctx, "wait release installs", func(tx *txn) error {
		for _, w := range waits {
			if _, err := tx.ExecContext(ctx, s.bind(`UPDATE release_installs SET state = 'waiting', window_opens_at = ?, error = ?
				WHERE release_id = ? AND install_id = ? AND state IN ('pending', 'waiting')`), nanos(w.OpensAt), w.Why, id, w.InstallID); err != nil {
				return err
			}
		}
		return nil
	})
}

// RecordReleaseInstalls records, for the running installs of release id
// whose workflow has ended, how it ended; it returns how many it
// recorded. Idempotent: an install is recorded once.
func (s *Store) RecordReleaseInstalls(ctx context.Context, id string, now time.Time) (n int, err error) {
	err = s.write(ctx, "record release installs", func(tx *txn) error {
		n = 0
		var rows []struct {
			InstallID string `db:"install_id"`
			State     string `db:"state"`
			Error     string `db:"error"`
		}
		// A failed install says why in its first failed step's words.
		if err := tx.SelectContext(ctx, &rows, s.bind(`SELECT ri.install_id, w.state, COALESCE((SELECT st.name || ': ' || st.error
				FROM workflow_steps st WHERE st.workflow_id = w.id AND st.state = 'failed' AND st.error <> '' ORDER BY st.position LIMIT 1),
				w.error) AS error FROM release_installs ri
			JOIN workflows w ON w.id = ri.workflow_id WHERE ri.release_id = ? AND ri.state = 'running'
			AND w.state IN ('succeeded', 'failed', 'cancelled')`), id); err != nil {
			return err
		}
		for _, r := range rows {
			state := RIFailed
			switch WorkflowState(r.State) {
			case WorkflowSucceeded:
				state = RISucceeded
			case WorkflowCancelled:
				state = RICancelled
			}
			msg := r.Error
			if state != RISucceeded && msg == "" {
				msg = "workflow " + r.State
			}
			if _, err := tx.ExecContext(ctx, s.bind(`UPDATE release_installs SET state = ?, error = ?, ended_at = ?
				WHERE release_id = ? AND install_id = ? AND state = 'running'`), string(state), truncate(msg, 1024), nanos(now), id, r.InstallID); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// releaseUpdate runs a conditional UPDATE of release id (set, where are
// SQL fragments, setArgs and whereArgs their values) and records ev when
// it changed the row. ok is false when the condition did not hold.
func (s *Store) releaseUpdate(ctx context.Context, op, id, set, where string, setArgs, whereArgs []any, ev *AuditEvent) (ok bool, err error) {
	args := append(append(setArgs, id), whereArgs...)
	err = s.write(ctx, op, func(tx *txn) error {
		ok = false
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE releases SET `+set+` WHERE id = ? AND (`+where+`)`), args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		ok = true
		if ev != nil {
			return s.Audit(ctx, tx, *ev)
		}
		return nil
	})
	return ok, err
}

// StartNextWave moves running release id from wave from to the next one
// and records release.wave_started. ok is false when it is not running at
// wave from (another replica moved it).
func (s *Store) StartNextWave(ctx context.Context, id string, from int, name string, size int, now time.Time) (bool, error) {
	ev := releaseEvent(id, "release.wave_started", "imsd", now,
		map[string]string{"wave": strconv.Itoa(from + 2), "name": name, "installs": strconv.Itoa(size)})
	return s.releaseUpdate(ctx, "start wave", id, `current_wave = ?, wave_started_at = ?, wave_ended_at = 0`,
		`state = 'running' AND current_wave = ? AND cancel_requested = ?`, []any{from + 1, nanos(now)}, []any{from, false}, &ev)
}

// EndWave records when wave of running release id ended (once): a pause
// between waves counts from it.
func (s *Store) EndWave(ctx context.Context, id string, wave int, now time.Time) (bool, error) {
	return s.releaseUpdate(ctx, "end wave", id, `wave_ended_at = ?`, `current_wave = ? AND wave_ended_at = 0`,
		[]any{nanos(now)}, []any{wave}, nil)
}

// HaltRelease halts running release id: nothing more starts until an
// operator resumes or retries it.
func (s *Store) HaltRelease(ctx context.Context, id, reason string, now time.Time) (bool, error) {
	ev := releaseEvent(id, "release.halted", "imsd", now, map[string]string{"reason": truncate(reason, 512)})
	return s.releaseUpdate(ctx, "halt release", id, `state = 'halted', error = ?`, `state = 'running'`, []any{reason}, nil, &ev)
}

// AwaitReleaseApproval stops running release id before its current wave
// until an operator approves it.
func (s *Store) AwaitReleaseApproval(ctx context.Context, id string, wave int, now time.Time) (bool, error) {
	ev := releaseEvent(id, "release.awaiting_approval", "imsd", now, map[string]string{"wave": strconv.Itoa(wave + 1)})
	return s.releaseUpdate(ctx, "await release approval", id, `state = 'awaiting_approval'`,
		`state = 'running' AND current_wave = ? AND approved_wave < ?`, nil, []any{wave, wave}, &ev)
}

// EndRelease ends release id (not ended yet) in state with msg.
func (s *Store) EndRelease(ctx context.Context, id string, state ReleaseState, msg string, now time.Time) (bool, error) {
	if !state.Terminal() {
		return false, errs.Field("state", "%q is not a final release state", state)
	}
	ev := releaseEvent(id, "release.ended", "imsd", now, map[string]string{"state": string(state), "error": truncate(msg, 512)})
	return s.releaseUpdate(ctx, "end release", id, `state = ?, error = ?, ended_at = ?`,
		`state IN ('running', 'awaiting_approval', 'paused', 'halted')`, []any{string(state), msg, nanos(now)}, nil, &ev)
}

// ReleaseAction is an operator's change to a release.
type ReleaseAction string

// The operator's changes to a release.
const (
	ReleaseApprove ReleaseAction = "approve"
	ReleasePause   ReleaseAction = "pause"
	ReleaseResume  ReleaseAction = "resume"
	ReleaseCancel  ReleaseAction = "cancel"
	ReleaseRetry   ReleaseAction = "retry"
)

// ChangeRelease applies an operator's action to release id, records it
// (release.approved, paused, resumed, cancelled or retried, with actor by
// and reason) and returns the release after it. approve runs a release
// awaiting approval; pause stops a running one from starting more
// installs; resume runs a paused or halted one again (the failures that
// halted it are accepted: the threshold counts only new ones); cancel
// ends what has not started and cancels what runs; retry runs its failed
// and cancelled installs again and a halted or failed release with them.
func (s *Store) ChangeRelease(ctx context.Context, id string, action ReleaseAction, by, reason string, now time.Time) (Release, error) {
	var out Release
	err := s.write(ctx, string(action)+" release", func(tx *txn) error {
		var row releaseRow
		err := tx.GetContext(ctx, &row, s.bind(`SELECT `+releaseCols+` FROM releases WHERE id = ?`+s.forUpdate()), id)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.E(errs.NotFound, "release %q not found", id)
		}
		if err != nil {
			return err
		}
		state := ReleaseState(row.State)
		refuse := func(what string) error {
			return errs.E(errs.Conflict, "release %s is %s: %s", id, strings.ReplaceAll(string(state), "_", " "), what)
		}
		if row.CancelRequested && action != ReleaseCancel {
			return errs.E(errs.Conflict, "release %s is being cancelled", id)
		}
		kind := "release." + map[ReleaseAction]string{ReleaseApprove: "approved", ReleasePause: "paused", ReleaseResume: "resumed",
			ReleaseCancel: "cancelled", ReleaseRetry: "retried"}[action]
		data := map[string]string{"reason": truncate(reason, 512), "wave": strconv.Itoa(row.CurrentWave + 1)}
		switch action {
		case ReleaseApprove:
			if state != ReleaseAwaitingApproval {
				return refuse("only a release awaiting approval can be approved")
			}
			_, err = tx.ExecContext(ctx, s.bind(`UPDATE releases SET state = 'running', approved_wave = current_wave WHERE id = ?`), id)
		case ReleasePause:
			if state != ReleaseRunning && state != ReleaseAwaitingApproval {
				return refuse("only a running release can be paused")
			}
			_, err = tx.ExecContext(ctx, s.bind(`UPDATE releases SET state = 'paused' WHERE id = ?`), id)
		case ReleaseResume:
			switch state {
			case ReleasePaused:
				_, err = tx.ExecContext(ctx, s.bind(`UPDATE releases SET state = 'running' WHERE id = ?`), id)
			case ReleaseHalted:
				var failed int
				if err := tx.GetContext(ctx, &failed, s.bind(`SELECT COUNT(*) FROM release_installs WHERE release_id = ? AND state = 'failed'`), id); err != nil {
					return err
				}
				data["accepted_failures"] = strconv.Itoa(failed)
				_, err = tx.ExecContext(ctx, s.bind(`UPDATE releases SET state = 'running', error = '', failures_base = ? WHERE id = ?`), failed, id)
			default:
				return refuse("only a paused or halted release can be resumed (byoc release retry runs failed installs again)")
			}
		case ReleaseCancel:
			if state.Terminal() {
				return refuse("it has ended")
			}
			if row.CancelRequested {
				break
			}
			err = s.cancelRelease(ctx, tx, id, reason, now)
			if err == nil && row.AgentRelease != "" {
				var n int
				if n, err = s.cancelAgentRollout(ctx, tx, id, by, reason, now); n > 0 {
					data["offers_withdrawn"] = strconv.Itoa(n)
				}
			}
		case ReleaseRetry:
			switch state {
			case ReleaseHalted, ReleaseFailed, ReleaseRunning, ReleasePaused:
			default:
				return refuse("only a running, paused, halted or failed release can be retried")
			}
			if row.RolledBackBy != "" {
				return errs.E(errs.Conflict, "release %s was rolled back by %s", id, row.RolledBackBy)
			}
			res, err := tx.ExecContext(ctx, s.bind(`UPDATE release_installs SET state = 'pending', error = '', ended_at = 0, workflow_id = '', offer_id = ''
				WHERE release_id = ? AND state IN ('failed', 'cancelled')`), id)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			if n == 0 {
				return errs.E(errs.Conflict, "release %s has no failed or cancelled install to retry", id)
			}
			data["installs"] = strconv.FormatInt(n, 10)
			next := state
			if state == ReleaseHalted || state == ReleaseFailed {
				next = ReleaseRunning
			}
			// A retried install of an earlier wave runs again: the
			// release goes back to the first wave that has one.
			_, err = tx.ExecContext(ctx, s.bind(`UPDATE releases SET state = ?, error = '', ended_at = 0, failures_base = 0,
				current_wave = COALESCE((SELECT MIN(wave) FROM release_installs WHERE release_id = ? AND state = 'pending'), current_wave),
				wave_ended_at = 0 WHERE id = ?`), string(next), id, id)
			if err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
		if action != ReleaseCancel {
			if err := s.Audit(ctx, tx, releaseEvent(id, kind, by, now, data)); err != nil {
				return err
			}
		} else if !row.CancelRequested {
			if err := s.Audit(ctx, tx, releaseEvent(id, kind, by, now, data)); err != nil {
				return err
			}
		}
		if err := tx.GetContext(ctx, &row, s.bind(`SELECT `+releaseCols+` FROM releases WHERE id = ?`), id); err != nil {
			return err
		}
		out, err = row.release()
		return err
	})
	return out, err
}

// cmpReason is ": reason", or "" for none.
func cmpReason(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

// cancelRelease marks release id cancelled-on-request and ends its
// installs that have not started; the engine cancels the running ones'
// workflows and ends the release when they have stopped.
func (s *Store) cancelRelease(ctx context.Context, tx *txn, id, reason string, now time.Time) error {
	msg := "release cancelled"
	if reason != "" {
		msg += ": " + reason
	}
	if _, err := tx.ExecContext(ctx, s.bind(`UPDATE releases SET cancel_requested = ?, error = ? WHERE id = ?`), true, msg, id); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, s.bind(`UPDATE release_installs SET state = 'cancelled', error = ?, ended_at = ?
		WHERE release_id = ? AND state IN ('pending', 'waiting')`), msg, nanos(now), id)
	return err
}

// ReleaseTouched returns the installs of release id whose rollout started
// (a workflow was made for them), in wave order.
func (s *Store) ReleaseTouched(ctx context.Context, id string) ([]ReleaseInstall, error) {
	_, ins, err := s.GetRelease(ctx, id)
	if err != nil {
		return nil, err
	}
	var out []ReleaseInstall
	for _, in := range ins {
		if in.WorkflowID != "" {
			out = append(out, in)
		}
	}
	return out, nil
}
