package agent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/window"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// The customer's permission state (package permissions) as the agent
// enforces it. The agent re-reads the permission file whenever it
// changed (a stat per look): right before each job's plugin would
// start, at every heartbeat, and every Config.PermissionsPoll. A job
// whose mode is off ends REFUSED without a plugin; a change that turns
// off the mode of a running job (or disables all) cancels that job at
// once. The agent keeps its stream either way, and reports the state
// with every hello and heartbeat (at once when it changes), so imsd
// shows "disabled by customer" instead of "offline". Nothing imsd sends
// touches the state.

// The files carry their own proof (permissions/signed.go): the agent
// checks each with the key it holds in memory (not whatever identity.json
// holds now) and against the newest generation it accepted, which it
// records in its journal (control.accepted) and reads back at start. A
// refused file (unsigned, changed, for another agent, rolled back, or
// removed after one was accepted) refuses every job, naming the file and
// why, is recorded in the journal (control.refused) and reported to imsd
// as the kill switch (every mode off, disabled).

// permState is the agent's view of the permission file. permMu guards
// it; it is never held while a.mu is taken, or the other way round.
type permState struct {
	stamp  permissions.Stamp
	loaded bool
	state  permissions.State
	err    error
}

// controlKey is the key the agent checks its control files with.
// While a rotation of the agent's key is under way, a file signed with
// the next key verifies too (permissions.CommitRotation).
func (a *Agent) controlKey() permissions.Key {
	a.keyMu.Lock()
	defer a.keyMu.Unlock()
	k := permissions.KeyOf(a.self)
	if a.rot != nil {
		k.Next = a.rot.Public()
	}
	return k
}

// acceptedLocked returns the newest accepted generation of control file
// name, reading the journal's records at the first call. permMu is held.
func (a *Agent) acceptedLocked(name string) uint64 {
	if a.accepted == nil {
		acc, err := permissions.Accepted(a.cfg.StateDir)
		if err != nil {
			a.log.Error("cannot read the accepted generations of the customer's control files from the agent's journal", "err", err)
			acc = map[string]uint64{}
		}
		a.accepted = acc
	}
	return a.accepted[name]
}

// checkedLocked records what loading control file name found: a newer
// generation accepted, or a refusal that is new (prev is the error the
// last load found). permMu is held.
func (a *Agent) checkedLocked(name string, gen uint64, err, prev error) {
	subject := permissions.Subject(name)
	switch {
	case err == nil && gen > a.accepted[name]:
		a.accepted[name] = gen
		a.note(permissions.KindAccepted, subject, map[string]string{"generation": strconv.FormatUint(gen, 10),
			"key": permissions.KeyID(a.controlKey().Public)})
	case err != nil && permissions.IsRefused(err) && (prev == nil || prev.Error() != err.Error()):
		a.log.Error("refusing the customer's control file; refusing every job until the customer re-signs it", "file", name, "err", err)
		a.note(permissions.KindRefused, subject, map[string]string{"reason": err.Error()})
	}
}

// permissions returns the customer's permission state, reading the file
// again if it changed. err is set when the file cannot be read or is
// refused; the agent then refuses every job.
func (a *Agent) permissions() (permissions.State, error) {
	a.permMu.Lock()
	defer a.permMu.Unlock()
	stamp, serr := permissions.StampOf(a.cfg.StateDir)
	if serr == nil && a.perm.loaded && stamp == a.perm.stamp {
		return a.perm.state, a.perm.err
	}
	st, gen, err := permissions.LoadWith(a.cfg.StateDir, a.controlKey(), a.acceptedLocked(permissions.FileName))
	if serr != nil && err == nil {
		err = serr
	}
	a.checkedLocked(permissions.FileName, gen, err, a.perm.err)
	switch {
	case err == nil && a.perm.loaded && a.perm.err == nil && !st.Telemetry.Equal(a.perm.state.Telemetry):
		a.noteTelemetry(a.perm.state.Telemetry, st, gen)
	case err == nil && !a.perm.loaded:
		// Changed while the agent was not running: against the journal.
		if last := a.journalledTelemetry(); !st.Telemetry.Equal(last) {
			a.noteTelemetry(last, st, gen)
		}
	}
	changed := !a.perm.loaded || !st.Equal(a.perm.state) || (err == nil) != (a.perm.err == nil)
	a.perm = permState{stamp: stamp, loaded: true, state: st, err: err}
	if changed {
		if err != nil && !permissions.IsRefused(err) { // a refusal was logged above
			a.log.Error("cannot read the customer's permissions; refusing every job until they can be read", "err", err)
		} else if err == nil {
			a.log.Info("customer permissions", "modes", st.Short(), "disabled_all", st.DisabledAll, "changed_at", st.ChangedAt, "changed_by", st.ChangedBy, "generation", gen)
		}
		a.kickPerm()
	}
	return st, err
}

func (a *Agent) kickPerm() {
	select {
	case a.permKick <- struct{}{}:
	default:
	}
}

// grantState is the agent's view of the customer's break-glass grants
// file (permissions.GrantsFileName), cached like permState under permMu.
type grantState struct {
	stamp  permissions.Stamp
	loaded bool
	grants permissions.Grants
	err    error
}

// grants returns the break-glass grants the customer approved, reading
// the file again if it changed.
func (a *Agent) grants() (permissions.Grants, error) {
	a.permMu.Lock()
	defer a.permMu.Unlock()
	stamp, serr := permissions.GrantsStampOf(a.cfg.StateDir)
	if serr == nil && a.grant.loaded && stamp == a.grant.stamp {
		return a.grant.grants, a.grant.err
	}
	gs, gen, err := permissions.LoadGrantsWith(a.cfg.StateDir, a.controlKey(), a.acceptedLocked(permissions.GrantsFileName))
	if serr != nil && err == nil {
		err = serr
	}
	a.checkedLocked(permissions.GrantsFileName, gen, err, a.grant.err)
	if permissions.IsRefused(err) != permissions.IsRefused(a.grant.err) {
		a.kickPerm() // reported as disabled, or no longer
	}
	a.grant = grantState{stamp: stamp, loaded: true, grants: gs, err: err}
	switch g, ok := gs.Live(a.now()); {
	case err != nil && !permissions.IsRefused(err): // a refusal was logged above
		a.log.Error("cannot read the customer's break-glass grants; refusing break_glass jobs until they can be read", "err", err)
	case err == nil && ok:
		a.log.Info("customer break-glass grant live", "grant", g.ID, "role", g.Role, "approved_by", g.ApprovedBy, "expires_at", g.ExpiresAt)
	}
	return gs, err
}

// refusal says why a job of mode may not run now ("" when it may). A
// break_glass job needs a grant live by the agent's own clock, so a
// grant ends on time also while imsd is unreachable. A refused control
// file refuses every job.
func (a *Agent) refusal(mode string) string {
	st, err := a.permissions()
	if permissions.IsRefused(err) {
		return "refused: every job is refused: the customer's control file " + err.Error()
	}
	if err != nil {
		return "refused: the customer's permission file cannot be read, so every job is refused: " + err.Error()
	}
	gs, err := a.grants()
	if permissions.IsRefused(err) {
		return "refused: every job is refused: the customer's control file " + err.Error()
	}
	if err != nil {
		gs = permissions.Grants{}
	}
	return st.RefusalAt(mode, gs, a.now())
}

// windowRefusal says why a job may not run now because of the customer's
// maintenance windows ("" when it may), with what the journal records of
// it: only a window-bound job (a release's) is bound, and only while the
// customer's windows are all closed by the agent's clock. Windows the
// agent cannot read refuse it too.
func (a *Agent) windowRefusal(bound bool) (string, map[string]string) {
	if !bound {
		return "", nil
	}
	st, err := a.permissions()
	if err != nil {
		return "", nil // every job is refused for that already
	}
	s, err := window.ParseSchedule(st.Windows)
	if err != nil {
		return "refused: the customer's maintenance windows cannot be read (agentd window show): " + err.Error(),
			map[string]string{"windows": strings.Join(st.Windows, "; ")}
	}
	now := a.now()
	if s.Contains(now) {
		return "", nil
	}
	next := s.NextOpening(now)
	return fmt.Sprintf("refused: outside the customer's maintenance window (%s); it opens next at %s (in %s)",
			s, next.UTC().Format(time.RFC3339), next.Sub(now).Round(time.Minute)),
		map[string]string{"windows": s.String(), "next_opening": next.UTC().Format(time.RFC3339)}
}

// permissionsProto is the state as hello and heartbeats report it. An
// unreadable file reports everything off and disabled, as enforced.
func (a *Agent) permissionsProto() *agentv1.Permissions {
	st, err := a.permissions()
	if _, gerr := a.grants(); err == nil && permissions.IsRefused(gerr) {
		err = gerr
	}
	if err != nil {
		return &agentv1.Permissions{DisabledAll: true}
	}
	p := &agentv1.Permissions{Provision: st.Provision, Maintenance: st.Maintenance, Deprovision: st.Deprovision,
		BreakGlass: st.BreakGlass, DisabledAll: st.DisabledAll, Windows: st.Windows, Telemetry: telemetryProto(st.Telemetry)}
	if !st.ChangedAt.IsZero() {
		p.ChangeTime = timestamppb.New(st.ChangedAt)
	}
	return p
}

// watchPermissions looks at the permission file every poll until ctx
// ends, and cancels the running jobs it no longer allows.
func (a *Agent) watchPermissions(ctx context.Context, revoked context.CancelCauseFunc) {
	t := time.NewTicker(a.cfg.PermissionsPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if a.watchRevoked(revoked) {
			return
		}
		a.scheduleRotation()
		if a.takeRotation() {
			a.kickRotation()
		}
		a.enforcePermissions()
	}
}

// enforcePermissions cancels every started job whose mode the customer's
// state no longer allows: its plugin is killed and it ends cancelled,
// with the reason.
func (a *Agent) enforcePermissions() {
	a.permissions() // notices a change (and reports it) with no job running too
	a.grants()
	a.mu.Lock()
	var running []*jobRun
	var grants []string
	for _, j := range a.jobs {
		if j.started && j.result == nil && !j.stopping && j.ctx.Err() == nil {
			running = append(running, j)
			grants = append(grants, j.grant)
		}
	}
	a.mu.Unlock()
	for i, j := range running {
		why := a.refusal(j.mode)
		if why == "" && grants[i] != "" {
			// Its own grant ended, another one still live.
			if gs, err := a.grants(); err == nil {
				if ended := gs.Ended(grants[i], a.now()); ended != "" {
					why = "refused: " + ended
				}
			}
		}
		if why != "" {
			reason := "stopped in the customer's account: " + strings.TrimPrefix(why, "refused: ")
			a.log.Warn("cancelling a running job the customer's permissions no longer allow", "job", j.id, "mode", j.mode, "why", why)
			j.cancel(cancelled{reason: reason})
		}
	}
}
