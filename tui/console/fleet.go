package console

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/internal/labels"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// dash stands for a field that has no value, or that imsd does not know yet
// (drift arrives with a later issue).
const dash = "—"

// sortKeys are the fleet's sortable columns, in the order `s` cycles them.
var sortKeys = []string{"name", "app", "state", "health", "agent", "heartbeat", "jobs"}

// fleet is the console's copy of every install's status, kept current by
// the watch stream. Sorting and filtering happen when the data or the
// filter changes, never in View, which only slices the visible rows.
type fleet struct {
	byID    map[string]*imsv1.InstallStatus
	sorted  []*imsv1.InstallStatus // every install in sort order
	visible []*imsv1.InstallStatus // sorted, filtered
	sortBy  int
	reverse bool
	filter  string
	loaded  bool // a snapshot has arrived
}

func newFleet() *fleet { return &fleet{byID: map[string]*imsv1.InstallStatus{}} }

// apply merges watch responses. A snapshot re-sorts everything; a change
// to a few installs moves just those rows (binary search and a copy), so
// a steady stream of updates costs O(log n) comparisons per change, not a
// sort of the whole fleet.
func (f *fleet) apply(resps []*imsv1.WatchInstallsResponse) {
	full := false
	for _, r := range resps {
		if r.Snapshot {
			f.byID = make(map[string]*imsv1.InstallStatus, len(r.Installs))
			f.loaded, full = true, true
		}
		for _, s := range r.Installs {
			old := f.byID[s.Install.Id]
			f.byID[s.Install.Id] = s
			if !full {
				f.change(old, s)
			}
		}
		for _, id := range r.RemovedInstallIds {
			if old := f.byID[id]; old != nil && !full {
				f.remove(old)
			}
			delete(f.byID, id)
		}
	}
	if full {
		f.resort()
	}
}

// less is the fleet's order: the sort column, then the name (unique), so
// every install has exactly one place.
func (f *fleet) less(a, b *imsv1.InstallStatus) bool {
	if c := compareBy(sortKeys[f.sortBy], a, b); c != 0 {
		return (c < 0) != f.reverse
	}
	return a.Install.Name < b.Install.Name
}

func (f *fleet) search(rows []*imsv1.InstallStatus, s *imsv1.InstallStatus) int {
	return sort.Search(len(rows), func(i int) bool { return !f.less(rows[i], s) })
}

// change puts s where old was. Most changes leave a row where it sorts
// (a heartbeat, a job count): the row is then replaced in place, which
// spares moving every row after it twice (at 10,000 installs and 100
// updates/s, that moving was a tenth of the console's CPU).
func (f *fleet) change(old, s *imsv1.InstallStatus) {
	if old == nil {
		f.insert(s)
		return
	}
	terms := f.terms()
	wasVisible, visible := matches(old, terms), matches(s, terms)
	if !f.replaceIn(f.sorted, old, s) {
		f.sorted = f.removeFrom(f.sorted, old)
		f.sorted = slices.Insert(f.sorted, f.search(f.sorted, s), s)
	}
	switch {
	case wasVisible && visible:
		if !f.replaceIn(f.visible, old, s) {
			f.visible = f.removeFrom(f.visible, old)
			f.visible = slices.Insert(f.visible, f.search(f.visible, s), s)
		}
	case wasVisible:
		f.visible = f.removeFrom(f.visible, old)
	case visible:
		f.visible = slices.Insert(f.visible, f.search(f.visible, s), s)
	}
}

// replaceIn replaces old with s in rows when s sorts where old stood.
func (f *fleet) replaceIn(rows []*imsv1.InstallStatus, old, s *imsv1.InstallStatus) bool {
	i := f.search(rows, old)
	if i >= len(rows) || rows[i] != old {
		return false
	}
	if (i > 0 && !f.less(rows[i-1], s)) || (i+1 < len(rows) && !f.less(s, rows[i+1])) {
		return false
	}
	rows[i] = s
	return true
}

// removeFrom takes old (the status as it was sorted) out of rows.
func (f *fleet) removeFrom(rows []*imsv1.InstallStatus, old *imsv1.InstallStatus) []*imsv1.InstallStatus {
	if i := f.search(rows, old); i < len(rows) && rows[i] == old {
		return slices.Delete(rows, i, i+1)
	}
	return rows
}

func (f *fleet) insert(s *imsv1.InstallStatus) {
	f.sorted = slices.Insert(f.sorted, f.search(f.sorted, s), s)
	if matches(s, f.terms()) {
		f.visible = slices.Insert(f.visible, f.search(f.visible, s), s)
	}
}

// remove takes out the row of old (the status as it was sorted).
func (f *fleet) remove(old *imsv1.InstallStatus) {
	if old == nil {
		return
	}
	f.sorted = f.removeFrom(f.sorted, old)
	f.visible = f.removeFrom(f.visible, old)
}

func (f *fleet) terms() []string { return strings.Fields(strings.ToLower(f.filter)) }

func (f *fleet) resort() {
	f.sorted = f.sorted[:0]
	for _, s := range f.byID {
		f.sorted = append(f.sorted, s)
	}
	sort.Slice(f.sorted, func(i, j int) bool { return f.less(f.sorted[i], f.sorted[j]) })
	f.refilter()
}

func compareBy(key string, a, b *imsv1.InstallStatus) int {
	switch key {
	case "app":
		return strings.Compare(a.AppName, b.AppName)
	case "state":
		return stateRank(a) - stateRank(b)
	case "health":
		return healthRank(a) - healthRank(b)
	case "agent":
		return agentRank(a) - agentRank(b)
	case "heartbeat":
		// A live stream is heard now: connected agents come first.
		if ca, cb := agentState(a) == "online", agentState(b) == "online"; ca != cb {
			if ca {
				return -1
			}
			return 1
		} else if ca {
			return 0
		}
		ta, tb := lastSeen(a), lastSeen(b)
		switch {
		case ta.After(tb):
			return -1
		case tb.After(ta):
			return 1
		}
		return 0
	case "jobs":
		return int(b.RunningJobs+b.QueuedJobs) - int(a.RunningJobs+a.QueuedJobs)
	}
	return strings.Compare(a.Install.Name, b.Install.Name)
}

func agentRank(s *imsv1.InstallStatus) int {
	switch agentCell(s) {
	case "conflict":
		return 0
	case "offline":
		return 0
	case "degraded":
		return 1
	case "none":
		return 2
	}
	return 3
}

// installState is the install's lifecycle state (new, provisioning,
// active, failed, deprovisioning, deprovisioned); dash when imsd sent none.
func installState(s *imsv1.InstallStatus) string {
	if st := s.Install.State; st != "" {
		return st
	}
	return dash
}

// stateRank sorts the states that need someone first: failed, then those
// under way, then the rest.
func stateRank(s *imsv1.InstallStatus) int {
	switch s.Install.State {
	case "failed":
		return 0
	case "provisioning", "deprovisioning":
		return 1
	case "new":
		return 2
	case "active":
		return 3
	}
	return 4 // deprovisioned, unknown
}

// healthState is the result of the install's latest health check:
// healthy or unhealthy; dash until one has ended.
func healthState(s *imsv1.InstallStatus) string {
	if h := s.Install.GetHealth().GetState(); h != "" {
		return h
	}
	return dash
}

// healthRank sorts unhealthy installs first, unchecked ones last.
func healthRank(s *imsv1.InstallStatus) int {
	switch s.Install.GetHealth().GetState() {
	case "unhealthy":
		return 0
	case "healthy":
		return 1
	}
	return 2
}

// revision is the app revision the install last applied in full; dash
// before its first.
func revision(s *imsv1.InstallStatus) string {
	if r := s.Install.AppRevision; r > 0 {
		return fmt.Sprint(r)
	}
	return dash
}

func agentState(s *imsv1.InstallStatus) string {
	a := s.Install.Agent
	switch {
	case a == nil:
		return "none"
	case a.IdentityConflict != "":
		return "conflict"
	case a.Connected:
		return "online"
	}
	return "offline"
}

// agentCell is the AGENT column: agentState (none, conflict, online,
// offline), except that an agent imsd's health sweeper found degraded or
// offline says so (the install view says since when and why).
func agentCell(s *imsv1.InstallStatus) string {
	st := agentState(s)
	if st == "none" || st == "conflict" {
		return st
	}
	if s.Install.Agent.GetRevokeTime() != nil {
		return "revoked"
	}
	if h := s.Install.Agent.GetHealth(); h == "degraded" || h == "offline" {
		return h
	}
	return st
}

// agentHealthText is the agent's health with since when, for the install
// view; empty from an imsd that reports none.
func agentHealthText(now time.Time, s *imsv1.InstallStatus) string {
	a := s.Install.Agent
	if a.GetHealth() == "" {
		return ""
	}
	out := a.GetHealth()
	if t := a.GetHealthTime(); t != nil {
		out += " since " + ago(now, t.AsTime())
	}
	return out
}

// ModesText is an install's permission state as its agent last reported
// it, in the MODES column's form: P M D B for the permission modes on
// (provision, maintenance, deprovision, break-glass), · for those off, as
// in "P M D ·"; "disabled" while the customer's kill switch is on; dash
// when no agent reported any.
func ModesText(p *imsv1.Permissions) string {
	if p == nil {
		return dash
	}
	if p.DisabledAll {
		return "disabled"
	}
	on := []bool{p.Provision, p.Maintenance, p.Deprovision, p.BreakGlass}
	out := make([]string, len(on))
	for i, letter := range []string{"P", "M", "D", "B"} {
		out[i] = "·"
		if on[i] {
			out[i] = letter
		}
	}
	return strings.Join(out, " ")
}

// disabledByCustomer reports whether the install's customer has turned
// every job off (agentd permissions disable-all).
func disabledByCustomer(s *imsv1.InstallStatus) bool {
	return s.Install.Agent.GetPermissions().GetDisabledAll()
}

// heardText is when the agent was last heard: "now" while its stream is
// live (imsd writes last_seen only once per lease then, so the stored time
// would read up to a lease old), else how long ago its last message came.
func heardText(now time.Time, s *imsv1.InstallStatus) string {
	if agentState(s) == "online" {
		return "now"
	}
	return ago(now, lastSeen(s))
}

func lastSeen(s *imsv1.InstallStatus) time.Time {
	if a := s.Install.Agent; a != nil && a.LastSeenTime != nil {
		return a.LastSeenTime.AsTime()
	}
	return time.Time{}
}

// refilter applies the filter. A filter that is a label selector
// (kubectl's syntax: "tier=canary,region in (eu,us),!legacy") matches the
// install's labels, and where the install has no label of a key, its
// field of that name (name, app, state, health, agent, id) or a
// non-sensitive input. Any other filter is words separated by spaces that
// must all match: a word key=value matches a label, field or input of
// that name exactly, any other word is a case-insensitive substring of
// the name, app or id.
func (f *fleet) refilter() {
	f.visible = f.visible[:0]
	sel, isSel := filterSelector(f.filter)
	terms := f.terms()
	for _, s := range f.sorted {
		if isSel && sel.Matches(attributes(s)) || !isSel && matches(s, terms) {
			f.visible = append(f.visible, s)
		}
	}
}

// filterSelector parses a filter as a label selector when it looks like
// one (it holds '=', '!', '<', '>' or " in (") and parses; otherwise the
// filter is words.
func filterSelector(filter string) (labels.Selector, bool) {
	if !labels.LooksLikeSelector(filter) {
		return labels.Selector{}, false
	}
	sel, err := labels.Parse(filter)
	return sel, err == nil
}

// attributes are what a selector filter matches an install by: its
// labels, then for keys no label has, its fields and non-sensitive inputs.
func attributes(s *imsv1.InstallStatus) map[string]string {
	m := map[string]string{}
	for k, v := range s.Install.Inputs {
		if !sensitive(k) {
			m[k] = v
		}
	}
	m["name"], m["app"], m["id"] = s.Install.Name, s.AppName, s.Install.Id
	m["state"], m["health"], m["agent"] = installState(s), healthState(s), agentState(s)
	maps.Copy(m, s.Install.Labels)
	return m
}

func matches(s *imsv1.InstallStatus, terms []string) bool {
	for _, t := range terms {
		if k, v, ok := strings.Cut(t, "="); ok {
			if !fieldIs(s, k, v) {
				return false
			}
			continue
		}
		if !strings.Contains(strings.ToLower(s.Install.Name), t) &&
			!strings.Contains(strings.ToLower(s.AppName), t) &&
			!strings.Contains(strings.ToLower(s.Install.Id), t) {
			return false
		}
	}
	return true
}

func fieldIs(s *imsv1.InstallStatus, k, v string) bool {
	switch k {
	case "name":
		return strings.ToLower(s.Install.Name) == v
	case "app":
		return strings.ToLower(s.AppName) == v
	case "agent":
		return agentState(s) == v || agentCell(s) == v
	case "state":
		return installState(s) == v
	case "health":
		return healthState(s) == v
	case "id":
		return strings.ToLower(s.Install.Id) == v
	}
	for lk, lv := range s.Install.Labels {
		if strings.ToLower(lk) == k {
			return strings.ToLower(lv) == v
		}
	}
	for ik, iv := range s.Install.Inputs {
		if strings.ToLower(ik) == k && !sensitive(ik) {
			return strings.ToLower(iv) == v
		}
	}
	return false
}

// sensitive reports whether an input's value must be masked. Inputs do not
// yet carry a "sensitive" flag (that arrives with app configs), so until
// then any input whose name suggests a secret is masked.
func sensitive(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"secret", "password", "passwd", "token", "key", "credential", "private"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// ago renders how long ago t was, compactly.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return dash
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}

func jobsCell(s *imsv1.InstallStatus) string {
	if s.RunningJobs == 0 && s.QueuedJobs == 0 {
		return dash
	}
	return fmt.Sprintf("%d run %d queued", s.RunningJobs, s.QueuedJobs)
}
