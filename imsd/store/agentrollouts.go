package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// Agent rollouts are releases whose installs get an update offer (the
// agent release) instead of an update workflow: an install is done when
// its agents report the offer confirmed (the new version reconnected),
// failed when one reports it refused, failed or rolled back, or when none
// confirms within the rollout's ConfirmWithin.

// AgentRolloutStart is an install of an agent rollout to offer the
// release to, and the offer's id.
type AgentRolloutStart struct {
	InstallID string
	OfferID   string
}

// StartAgentRolloutInstalls offers agent rollout id's release to the
// agents of installs of its wave wave: each install still pending or
// waiting moves to running with its offer, recorded for its agents (and
// audited as agent.update_offered) in the same transaction, under the
// same conditions as StartReleaseInstalls, so two replicas never offer
// twice. An install with no agent that is not revoked fails, saying so.
// started are the installs offered.
func (s *Store) StartAgentRolloutInstalls(ctx context.Context, id string, wave int, starts []AgentRolloutStart, now time.Time) (started []string, err error) {
	if err := requireTime("now", now); err != nil {
		return nil, err
	}
	r, err := s.releaseOnly(ctx, id)
	if err != nil {
		return nil, err
	}
	if !r.IsAgentRollout() {
		return nil, errs.E(errs.Invalid, "release %s is not an agent rollout", id)
	}
	err = s.write(ctx, "start agent rollout installs", func(tx *txn) error {
		started = started[:0]
		for _, st := range starts {
			if st.OfferID == "" {
				return errs.Field("offer_id", "required (install %s)", st.InstallID)
			}
			res, err := tx.ExecContext(ctx, s.bind(`UPDATE release_installs SET state = 'running', offer_id = ?, started_at = ?,
				window_opens_at = 0, error = '' WHERE release_id = ? AND install_id = ? AND wave = ? AND state IN ('pending', 'waiting')
				AND EXISTS (SELECT 1 FROM releases WHERE id = ? AND state = 'running' AND current_wave = ? AND cancel_requested = ?
					AND (require_approval = ? OR approved_wave >= current_wave))`),
				st.OfferID, nanos(now), id, st.InstallID, wave, id, wave, false, false)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				continue
			}
			o := UpdateOffer{ID: st.OfferID, Release: r.AgentRelease, OfferedBy: "release " + id, OfferedAt: now.UTC()}
			b, err := json.Marshal(o)
			if err != nil {
				return err
			}
			if _, err := s.offerAgentUpdate(ctx, tx, st.InstallID, o, string(b), o.OfferedBy); err != nil {
				if !errs.Is(err, errs.NotFound) {
					return err
				}
				if _, err := s.endAgentRolloutInstall(ctx, tx, id, st.InstallID, RIFailed, "no agent that is not revoked: nothing to offer the release to", now); err != nil {
					return err
				}
			}
			started = append(started, st.InstallID)
		}
		return nil
	})
	return started, err
}

// endAgentRolloutInstall ends running install installID of agent rollout
// id in state with msg; a failure is audited (release.install_failed).
// ended is false when the install was not running (another replica
// ended it).
func (s *Store) endAgentRolloutInstall(ctx context.Context, tx *txn, id, installID string, state ReleaseInstallState, msg string, now time.Time) (ended bool, err error) {
	res, err := tx.ExecContext(ctx, s.bind(`UPDATE release_installs SET state = ?, error = ?, ended_at = ?
		WHERE release_id = ? AND install_id = ? AND state = 'running'`), string(state), truncate(msg, 1024), nanos(now), id, installID)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	if state != RIFailed {
		return true, nil
	}
	return true, s.Audit(ctx, tx, releaseEvent(id, "release.install_failed", "imsd", now,
		map[string]string{"install": installID, "error": truncate(msg, 512)}))
}

// agentRolloutFailed are the decisions that fail an install of an agent
// rollout.
var agentRolloutFailed = map[string]bool{"refused": true, "failed": true, "rolled_back": true, "rollback_refused": true}

// RecordAgentRolloutInstalls records, for the running installs of agent
// rollout r, what their agents reported of the rollout's offer (as of
// now): succeeded once every agent of the install that is not revoked
// confirmed it; failed when one refused it, failed to apply it or rolled
// it back (its reason), or when none confirmed within r.ConfirmWithin of
// the offer, or of applying it after its customer's window deferred it
// (the offer is then withdrawn). An agent that deferred the offer to its
// customer's window keeps the install running, saying so. It returns how
// many installs it ended. Idempotent.
//
// The reports are read outside any write (one query over the running
// installs and their agents), so a pass over a wave of thousands that
// are still updating costs one read; only the changes are written, each
// conditional on the install still running.
func (s *Store) RecordAgentRolloutInstalls(ctx context.Context, r Release, now time.Time) (n int, err error) {
	if !r.IsAgentRollout() {
		return 0, errs.E(errs.Invalid, "release %s is not an agent rollout", r.ID)
	}
	var rows []struct {
		InstallID string `db:"install_id"`
		OfferID   string `db:"offer_id"`
		StartedAt int64  `db:"started_at"`
		Error     string `db:"error"`
		AgentID   string `db:"agent_id"`
		Report    string `db:"update_report"`
	}
	if err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT ri.install_id, ri.offer_id, ri.started_at, ri.error,
			COALESCE(a.id, '') AS agent_id, COALESCE(a.update_report, '') AS update_report
		FROM release_installs ri LEFT JOIN agents a ON a.install_id = ri.install_id AND a.revoked_at = 0
		WHERE ri.release_id = ? AND ri.state = 'running' ORDER BY ri.wave, ri.position, a.id`), r.ID); err != nil {
		return 0, fmt.Errorf("agent rollout %s installs: %w", r.ID, err)
	}
	type change struct {
		installID, offerID string
		state              ReleaseInstallState
		msg                string
		withdraw           bool
	}
	var changes []change
	for i := 0; i < len(rows); {
		ri := rows[i]
		j := i
		for j < len(rows) && rows[j].InstallID == ri.InstallID {
			j++
		}
		agents := rows[i:j]
		i = j
		state, msg := RIRunning, ""
		confirmed, deferred, count := 0, "", 0
		base := fromNanos(ri.StartedAt)
		for _, a := range agents {
			if a.AgentID == "" {
				continue
			}
			count++
			var u AgentUpdate
			if a.Report == "" || json.Unmarshal([]byte(a.Report), &u) != nil || u.LastOfferID != ri.OfferID {
				continue
			}
			switch {
			case u.LastKind == "confirmed":
				confirmed++
			case agentRolloutFailed[u.LastKind]:
				state, msg = RIFailed, fmt.Sprintf("agent %s %s", a.AgentID, verbOf(u.LastKind))
				if u.LastReason != "" {
					msg += ": " + u.LastReason
				}
			case u.LastKind == "deferred":
				deferred = u.LastReason
			case u.LastKind == "applied" && u.LastAt.After(base):
				base = u.LastAt
			}
		}
		switch {
		case state == RIFailed:
		case count == 0:
			state, msg = RIFailed, "no agent that is not revoked"
		case confirmed == count:
			state = RISucceeded
		case deferred != "":
			if msg = "deferred by the customer: " + deferred; truncate(msg, 1024) != ri.Error {
				changes = append(changes, change{installID: ri.InstallID, state: RIRunning, msg: msg})
			}
			continue
		case r.ConfirmWithin > 0 && !now.Before(base.Add(r.ConfirmWithin)):
			state, msg = RIFailed, fmt.Sprintf("not confirmed within %s (the new version did not reconnect, or the agent did not answer the offer)", r.ConfirmWithin)
			changes = append(changes, change{installID: ri.InstallID, offerID: ri.OfferID, state: state, msg: msg, withdraw: true})
			continue
		default:
			continue
		}
		changes = append(changes, change{installID: ri.InstallID, state: state, msg: msg})
	}
	if len(changes) == 0 {
		return 0, nil
	}
	err = s.write(ctx, "record agent rollout installs", func(tx *txn) error {
		n = 0
		for _, c := range changes {
			if c.state == RIRunning {
				if _, err := tx.ExecContext(ctx, s.bind(`UPDATE release_installs SET error = ? WHERE release_id = ? AND install_id = ?
					AND state = 'running'`), truncate(c.msg, 1024), r.ID, c.installID); err != nil {
					return err
				}
				continue
			}
			ended, err := s.endAgentRolloutInstall(ctx, tx, r.ID, c.installID, c.state, c.msg, now)
			if err != nil || !ended {
				return err
			}
			n++
			if !c.withdraw {
				continue
			}
			if _, err := s.withdrawOffer(ctx, tx, c.installID, c.offerID, "release "+r.ID, c.msg, now); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// KindAgentUpdateOfferWithdrawn is imsd's withdrawal of an agent's
// update offer (install chain, subject the agent); the agent's own
// answer, when it drops the offer, is agent.update_withdrawn.
const KindAgentUpdateOfferWithdrawn = "agent.update_offer_withdrawn"

// withdrawOffer marks offer offerID withdrawn (by, for reason, at now) for
// each agent of installID that holds it and has not had it withdrawn,
// each write conditional on the offer read (so two replicas withdraw
// once), audited as agent.update_offer_withdrawn. It returns the agents'
// ids. The agents' streams then send the signed withdrawal until each
// agent's report answers the offer (agentapi's sendOffer).
func (s *Store) withdrawOffer(ctx context.Context, tx *txn, installID, offerID, by, reason string, now time.Time) ([]string, error) {
	var offers []struct {
		ID    string `db:"id"`
		Offer string `db:"update_offer"`
	}
	if err := tx.SelectContext(ctx, &offers, s.bind(`SELECT id, update_offer FROM agents WHERE install_id = ? AND update_offer <> '' ORDER BY id`), installID); err != nil {
		return nil, err
	}
	var ids []string
	for _, a := range offers {
		var o UpdateOffer
		if json.Unmarshal([]byte(a.Offer), &o) != nil || o.ID != offerID || o.Withdrawn() {
			continue
		}
		o.WithdrawnAt, o.WithdrawnBy, o.WithdrawReason = now.UTC(), by, truncate(reason, 512)
		b, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE agents SET update_offer = ? WHERE id = ? AND update_offer = ?`), string(b), a.ID, a.Offer)
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, err
		} else if n == 0 {
			continue
		}
		if err := s.Audit(ctx, tx, AuditEvent{Chain: installID, At: now, Kind: KindAgentUpdateOfferWithdrawn, Actor: by, Subject: "agent:" + a.ID,
			Data: map[string]string{"release": o.Release, "offer": o.ID, "reason": truncate(reason, 512)}}); err != nil {
			return nil, err
		}
		ids = append(ids, a.ID)
	}
	return ids, nil
}

// WithdrawAgentUpdate withdraws the update offer standing for the agents
// of install installID (offerID, or "" for whichever stands), by actor by
// for reason, at now, audited as agent.update_offer_withdrawn: each
// agent's stream sends the signed withdrawal until its report answers
// the offer. An offer an agent rollout made is refused (cancel the
// rollout: its install then ends cancelled); an install with no standing
// offer is NotFound, one withdrawn by another call at the same time a
// Conflict. It returns the withdrawn offer's id and the agents'.
func (s *Store) WithdrawAgentUpdate(ctx context.Context, installID, offerID, by, reason string, now time.Time) (string, []string, error) {
	if err := requireTime("now", now); err != nil {
		return "", nil, err
	}
	var ids []string
	err := s.write(ctx, "withdraw agent update", func(tx *txn) error {
		var offers []string
		if err := tx.SelectContext(ctx, &offers, s.bind(`SELECT update_offer FROM agents WHERE install_id = ? AND revoked_at = 0
			AND update_offer <> '' ORDER BY id`), installID); err != nil {
			return err
		}
		var found *UpdateOffer
		for _, b := range offers {
			var o UpdateOffer
			if json.Unmarshal([]byte(b), &o) != nil || o.Withdrawn() || (offerID != "" && o.ID != offerID) {
				continue
			}
			if found != nil && found.ID != o.ID {
				return errs.E(errs.Conflict, "install %s's agents have different offers standing (%s, %s): name the offer to withdraw", installID, found.ID, o.ID)
			}
			found = &o
		}
		if found == nil {
			if offerID != "" {
				return errs.E(errs.NotFound, "install %s has no agent with offer %s standing (withdrawn already, or replaced)", installID, offerID)
			}
			return errs.E(errs.NotFound, "install %s has no agent update offer standing", installID)
		}
		if strings.HasPrefix(found.OfferedBy, "release ") {
			return errs.E(errs.Conflict, "offer %s was made by agent rollout %s: cancel the rollout (byoc agent rollout cancel), which withdraws it",
				found.ID, strings.TrimPrefix(found.OfferedBy, "release "))
		}
		offerID = found.ID
		var err error
		if ids, err = s.withdrawOffer(ctx, tx, installID, offerID, by, reason, now); err == nil && len(ids) == 0 {
			// Another call (another replica) withdrew it between the
			// read above and the conditional writes.
			return errs.E(errs.Conflict, "offer %s was withdrawn by another call at the same time (byoc install get %s shows by whom)", offerID, installID)
		}
		return err
	})
	if err != nil {
		return "", nil, err
	}
	return offerID, ids, nil
}

// cancelAgentRollout withdraws, as agent rollout id is cancelled (by,
// for reason), the offers of its running installs that no agent has taken: an
// install whose agents all left the offer unanswered or deferred it ends
// cancelled ("rollout cancelled; offer withdrawn"), its agents' offers
// withdrawn. An install one of whose agents answered it otherwise
// (applied, confirmed, refused...) keeps running and ends as its agents
// report: an applied update is not rolled back. It returns how many
// installs it cancelled. In the cancel's transaction, which holds the
// release's row, each write conditional.
func (s *Store) cancelAgentRollout(ctx context.Context, tx *txn, id, by, reason string, now time.Time) (int, error) {
	msg := "rollout cancelled by " + by
	var rows []struct {
		InstallID string `db:"install_id"`
		OfferID   string `db:"offer_id"`
		Report    string `db:"update_report"`
	}
	if err := tx.SelectContext(ctx, &rows, s.bind(`SELECT ri.install_id, ri.offer_id, COALESCE(a.update_report, '') AS update_report
		FROM release_installs ri LEFT JOIN agents a ON a.install_id = ri.install_id AND a.revoked_at = 0
		WHERE ri.release_id = ? AND ri.state = 'running' ORDER BY ri.wave, ri.position, a.id`), id); err != nil {
		return 0, err
	}
	taken := map[string]bool{}
	var order []string
	for _, r := range rows {
		if _, seen := taken[r.InstallID]; !seen {
			taken[r.InstallID] = false
			order = append(order, r.InstallID)
		}
		var u AgentUpdate
		if r.Report != "" && json.Unmarshal([]byte(r.Report), &u) == nil && u.LastOfferID == r.OfferID && r.OfferID != "" && u.LastKind != "deferred" {
			taken[r.InstallID] = true
		}
	}
	offer := map[string]string{}
	for _, r := range rows {
		offer[r.InstallID] = r.OfferID
	}
	n := 0
	for _, in := range order {
		if taken[in] {
			if _, err := tx.ExecContext(ctx, s.bind(`UPDATE release_installs SET error = ? WHERE release_id = ? AND install_id = ? AND state = 'running'`),
				truncate(msg+"; an agent took the offer already: the install ends as its agents report (an applied update is not rolled back)"+cmpReason(reason), 1024), id, in); err != nil {
				return 0, err
			}
			continue
		}
		ended, err := s.endAgentRolloutInstall(ctx, tx, id, in, RICancelled, msg+"; offer withdrawn"+cmpReason(reason), now)
		if err != nil {
			return 0, err
		}
		if !ended {
			continue
		}
		n++
		if offer[in] == "" {
			continue
		}
		if _, err := s.withdrawOffer(ctx, tx, in, offer[in], by, "release "+id+" cancelled"+cmpReason(reason), now); err != nil {
			return 0, err
		}
	}
	return n, nil
}

func verbOf(kind string) string {
	switch kind {
	case "rolled_back":
		return "rolled it back"
	case "failed":
		return "failed to apply it"
	case "rollback_refused":
		// The new version failed and the agent refused to put back an
		// old binary that was not the one it replaced.
		return "could not roll it back"
	}
	return kind + " it"
}
