package release

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/internal/labels"
)

// DefaultConfirmWithin is how long an agent rollout gives each install's
// agent to confirm the new version, from the offer (or from applying it,
// when the customer's window deferred it): the agent's own confirmation
// deadline (two minutes) and a margin for reconnecting.
const DefaultConfirmWithin = 10 * time.Minute

// AgentRolloutRequest is what an agent rollout is made from.
type AgentRolloutRequest struct {
	// AppID is the app whose installs are rolled out to; "" for the one
	// app all the selected installs belong to.
	AppID string
	// Release is the agent release, oci://HOST/REPOSITORY@sha256:...
	Release  string
	Selector string
	// Waves is a wave spec as for app releases; Canary, when set and
	// Waves is not, makes the waves "canary:N,100%"; GroupBy, when set,
	// orders the installs by that label's value and makes one wave per
	// value after the canary.
	Waves           string
	Canary          int
	GroupBy         string
	MaxFailures     string
	ConfirmWithin   time.Duration
	RespectWindows  bool
	RequireApproval bool
	Reason          string
	By              string
}

// CreateAgentRollout stores an agent rollout: the selected installs (with
// an agent) in waves, each offered the agent release in turn; the first
// wave starts at once (unless it requires approval). An install with no
// agent is skipped, saying so.
func (e *Engine) CreateAgentRollout(ctx context.Context, req AgentRolloutRequest) (store.Release, error) {
	switch {
	case req.Release == "":
		return store.Release{}, errs.Field("agent_release", "is required")
	case req.Canary < 0:
		return store.Release{}, errs.Field("canary", "must not be negative")
	case req.Canary > 0 && strings.TrimSpace(req.Waves) != "":
		return store.Release{}, errs.Field("canary", "give --canary or --waves, not both (--waves canary:2,100%% names a canary wave)")
	case req.GroupBy != "" && strings.TrimSpace(req.Waves) != "":
		return store.Release{}, errs.Field("group_by", "give --group-by or --waves, not both")
	case req.ConfirmWithin < 0 || req.ConfirmWithin > 7*24*time.Hour:
		return store.Release{}, errs.Field("confirm_within", "must be between 0 and 7 days")
	case len(req.Reason) > 1024:
		return store.Release{}, errs.Field("reason", "is longer than 1024 bytes")
	}
	if req.GroupBy != "" {
		if err := labels.ValidateKey(req.GroupBy); err != nil {
			return store.Release{}, errs.Field("group_by", "%v", err)
		}
	}
	sel, err := labels.Parse(req.Selector)
	if err != nil {
		return store.Release{}, errs.Field("selector", "%v", err)
	}
	all, err := e.st.ListInstalls(ctx, req.AppID)
	if err != nil {
		return store.Release{}, err
	}
	all = store.CustomerInstalls(all) // the build agent is offered releases by name alone
	var installs []store.Install
	apps := map[string]bool{}
	for _, in := range all {
		if sel.Matches(in.Labels) && in.State != store.InstallDeprovisioned {
			installs = append(installs, in)
			apps[in.AppID] = true
		}
	}
	if len(installs) == 0 {
		return store.Release{}, errs.E(errs.Conflict, "no install matches%s", selectorText(req.Selector))
	}
	if len(apps) > 1 {
		var names []string
		for id := range apps {
			names = append(names, id)
		}
		slices.Sort(names)
		return store.Release{}, errs.Field("app", "the installs selected belong to %d apps (%s): a rollout covers one app's installs; give --app",
			len(names), strings.Join(names, ", "))
	}
	appID := installs[0].AppID
	spec := req.Waves
	if req.GroupBy != "" {
		// Installs by the label's value (those without it last), in
		// name order within a value: one wave per value.
		slices.SortStableFunc(installs, func(a, b store.Install) int {
			va, oka := a.Labels[req.GroupBy]
			vb, okb := b.Labels[req.GroupBy]
			if oka != okb {
				if oka {
					return -1
				}
				return 1
			}
			return strings.Compare(va, vb)
		})
		spec = groupWaves(installs, req.GroupBy, req.Canary)
	} else if req.Canary > 0 {
		spec = "canary:" + strconv.Itoa(req.Canary) + ",100%"
	}
	waves, err := ParseWaves(spec, len(installs))
	if err != nil {
		return store.Release{}, err
	}
	maxFail, err := ParseMaxFailures(req.MaxFailures, len(installs))
	if err != nil {
		return store.Release{}, err
	}
	rows := make([]store.ReleaseInstall, len(installs))
	skipped := 0
	for i, in := range installs {
		rows[i] = store.ReleaseInstall{InstallID: in.ID, InstallName: in.Name, FromRevision: in.AppRevision, ToRevision: in.AppRevision, State: store.RIPending}
		agents, err := e.st.AgentsForInstall(ctx, in.ID)
		if err != nil {
			return store.Release{}, err
		}
		if !slices.ContainsFunc(agents, func(a store.Agent) bool { return a.RevokedAt.IsZero() }) {
			rows[i].State, rows[i].Error, rows[i].PlanGroup = store.RISkipped, "no agent enrolled (or every one revoked)", 1
			skipped++
		}
	}
	assignWaves(rows, waves)
	groups := []store.PlanGroup{{Steps: []string{"offer agent release " + req.Release}, Installs: len(rows) - skipped}}
	if skipped > 0 {
		groups = append(groups, store.PlanGroup{Installs: skipped, Error: "no agent enrolled (or every one revoked)"})
	}
	r := store.Release{ID: auth.NewSortableID("rel_", e.now()), AppID: appID, Kind: "release", State: store.ReleaseRunning,
		Waves: waves, Selector: req.Selector, MaxFailures: maxFail, MaxFailuresSpec: req.MaxFailures, RespectWindows: req.RespectWindows,
		RequireApproval: req.RequireApproval, Reason: req.Reason, PlanGroups: groups, CreatedAt: e.now(), CreatedBy: req.By,
		AgentRelease: req.Release, ConfirmWithin: cmp.Or(req.ConfirmWithin, DefaultConfirmWithin)}
	if r.RequireApproval {
		r.State = store.ReleaseAwaitingApproval
	}
	if err := e.st.CreateRelease(ctx, r, rows); err != nil {
		return store.Release{}, err
	}
	e.log.Info("agent rollout created", "release", r.ID, "agent_release", req.Release, "installs", len(rows), "by", req.By)
	e.hub.FleetChanged()
	e.Kick(r.ID)
	return r, nil
}

// groupWaves is the wave spec of installs sorted by label key's value:
// a canary wave of canary installs first (when canary > 0), then one
// wave per value, named key=value (installs without the label: one last
// wave).
func groupWaves(installs []store.Install, key string, canary int) string {
	var parts []string
	done := 0
	if canary > 0 {
		canary = min(canary, len(installs))
		parts = append(parts, fmt.Sprintf("canary:%d", canary))
		done = canary
	}
	for done < len(installs) {
		v, ok := installs[done].Labels[key]
		n := 0
		for done+n < len(installs) {
			w, ok2 := installs[done+n].Labels[key]
			if ok2 != ok || w != v {
				break
			}
			n++
		}
		name := key + "=" + v
		if !ok {
			name = "no " + key
		}
		if len(name) > 64 {
			name = name[:64]
		}
		parts = append(parts, strings.ReplaceAll(strings.ReplaceAll(name, ",", " "), ":", " ")+":"+strconv.Itoa(n))
		done += n
	}
	return strings.Join(parts, ",")
}
