package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/byoc-dev/byoc/internal/atomicfile"
	"github.com/byoc-dev/byoc/plugins/bundle"
)

// An update applied by agentd update apply is confirmed or rolled back by
// the agent itself: at its start (updateAtStart), the new version counts
// its starts and checks byoc-plugins beside it; once started, it must
// reconnect to imsd before the deadline (confirmUpdate). Too many starts
// (a crash loop), a failed check or a missed deadline put the old
// binaries back (*.prev, renamed over the new ones) and re-execute the
// old agentd with the same arguments (syscall.Exec), before any job was
// taken: jobs come only over the connection the new version never had.
// Only *.prev files that match the SHA-256 and size the apply recorded
// are put back and run; otherwise the rollback is refused (journalled,
// kept in the update's state for agentd update status) and the agent
// keeps the binaries in place.

// execAgent replaces the process with path (syscall.Exec); tests replace it.
var execAgent = func(path string, args []string) error { return syscall.Exec(path, args, os.Environ()) }

// updateFiles are the files an update swaps, by their names in its Dir.
func updateFiles() []string { return []string{"agentd", bundle.Binary} }

// rollbackRefusedError is a rollback that put nothing back: a *.prev
// file is not the binary the update replaced (checkPrev). The agent
// keeps the binaries it has.
type rollbackRefusedError struct{ reason string }

func (e rollbackRefusedError) Error() string { return e.reason }

// checkPrev says which old binary (*.prev) is not the one the update
// replaced, by the SHA-256 and size recorded when it was applied. An
// update applied by an agentd older than the record (no Prev at all)
// is not checked: refusing its rollback would leave a bad release
// running where the rollback was the way back, and whoever can remove
// the record from update.json could as well write one that matches.
// One record without the other file is refused.
func checkPrev(s *updateState) error {
	if len(s.Prev) == 0 {
		return nil
	}
	for _, f := range updateFiles() {
		want, ok := s.Prev[f]
		if !ok {
			return fmt.Errorf("the update's state (%s) records no SHA-256 of the old %s, so nothing vouches for %s.prev", updateStateFile, f, f)
		}
		path := filepath.Join(s.Dir, f+".prev")
		got, err := sumFile(path)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if got != want {
			return fmt.Errorf("%s is not the binary the update replaced: SHA-256 %s, %d bytes; recorded when the update was applied: %s, %d bytes",
				path, got.SHA256, got.Size, want.SHA256, want.Size)
		}
	}
	return nil
}

// refuseRollback records a rollback checkPrev refused (check): in the
// update's state, which agentd update status shows and which stops any
// other rollback of this update, and in the journal. It returns a
// rollbackRefusedError.
func refuseRollback(dir string, s *updateState, cause, reason string, check error) error {
	msg := fmt.Sprintf("the rollback to %s (%s) was refused: %v", s.From, reason, check)
	s.RollbackRefused, s.RollbackRefusedAt = msg, time.Now().UTC()
	if err := saveUpdateState(dir, s); err != nil {
		return fmt.Errorf("%s (and recording it failed: %w)", msg, err)
	}
	if err := addUpdateNote(dir, updateNote{Kind: "agent_update_rollback_refused", Subject: s.Release,
		Data: map[string]string{"from": s.From, "to": s.To, "reason": msg, "cause": "prev_check", "rollback_cause": cause,
			"starts": strconv.Itoa(s.Starts), "offer": s.OfferID}}); err != nil {
		return fmt.Errorf("%s (and recording it failed: %w)", msg, err)
	}
	return rollbackRefusedError{msg}
}

// restoreUpdate renames the old binaries (*.prev) back over the new ones
// and removes the update's state, leaving a journal note saying why. If
// a *.prev file is not the one the update replaced, it puts nothing back
// and returns a rollbackRefusedError (refuseRollback).
func restoreUpdate(dir string, s *updateState, cause, reason string) error {
	if err := checkPrev(s); err != nil {
		return refuseRollback(dir, s, cause, reason, err)
	}
	for _, f := range updateFiles() {
		prev := filepath.Join(s.Dir, f+".prev")
		if err := os.Rename(prev, filepath.Join(s.Dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("roll back %s: %w", f, err)
		}
	}
	if err := atomicfile.SyncDir(s.Dir); err != nil {
		return err
	}
	checked := "matched"
	if len(s.Prev) == 0 {
		checked = "none recorded (applied by an older agentd)"
	}
	if err := addUpdateNote(dir, updateNote{Kind: "agent_update_rolled_back", Subject: s.Release,
		Data: map[string]string{"from": s.From, "to": s.To, "reason": reason, "cause": cause, "starts": strconv.Itoa(s.Starts), "offer": s.OfferID,
			"prev_sha256": checked}}); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, updateStateFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return atomicfile.SyncDir(dir)
}

// rollBack restores the old binaries and runs the old agentd in place of
// this process. It returns only on failure.
func rollBack(dir string, s *updateState, cause, reason string, log *slog.Logger) error {
	log.Error("the agent update failed; rolling back", "from", s.To, "to", s.From, "reason", reason)
	if err := restoreUpdate(dir, s, cause, reason); err != nil {
		var refused rollbackRefusedError
		if errors.As(err, &refused) {
			log.Error("agent update: rollback refused; keeping the binaries in place (agentd update status)", "reason", refused.reason)
		}
		return err
	}
	args := append([]string{filepath.Join(s.Dir, "agentd")}, os.Args[1:]...)
	return fmt.Errorf("run the restored agentd %s: %w", s.From, execAgent(args[0], args))
}

// updateAtStart checks the update in progress in state dir dir, if any,
// as agentd version starts. It returns the update the agent must confirm
// by reconnecting (nil: none). An update this version is not the new
// version of (the swap did not finish) is undone at once.
func updateAtStart(dir, version string, now time.Time, log *slog.Logger) (*updateState, error) {
	s, err := loadUpdateState(dir)
	if err != nil || s == nil {
		return nil, err
	}
	if s.RollbackRefused != "" {
		// Already journalled; each start says it again, in the log.
		log.Error("agent update: its rollback was refused; running the binaries in place until the customer applies a release by hand (agentd update status)",
			"reason", s.RollbackRefused)
		return nil, nil
	}
	if version != s.To {
		reason := fmt.Sprintf("agentd started as version %s, not %s: the swap did not finish", version, s.To)
		log.Warn("undoing an unfinished agent update", "reason", reason)
		return nil, keepIfRefused(restoreUpdate(dir, s, "swap", reason))
	}
	s.Starts++
	if s.FirstStart.IsZero() {
		s.FirstStart = now.UTC()
	}
	switch {
	case s.Starts > maxUpdateStarts:
		return nil, keepIfRefused(rollBack(dir, s, "crash_loop", fmt.Sprintf("started %d times without reconnecting (a crash loop)", s.Starts-1), log))
	case !now.Before(s.FirstStart.Add(s.ConfirmWithin)):
		return nil, keepIfRefused(rollBack(dir, s, "reconnect", fmt.Sprintf("did not reconnect within %s of its first start", s.ConfirmWithin), log))
	}
	// The self-check that needs no imsd: byoc-plugins beside it is the
	// release's.
	out, err := exec.Command(filepath.Join(s.Dir, bundle.Binary), "--version").Output()
	if err != nil || !strings.Contains(string(out), " "+s.To+" ") {
		return nil, keepIfRefused(rollBack(dir, s, "self_check", fmt.Sprintf("self-check: %s --version: %q, %v; want version %s", bundle.Binary, strings.TrimSpace(string(out)), err, s.To), log))
	}
	if err := saveUpdateState(dir, s); err != nil {
		return nil, err
	}
	log.Info("agent update: confirming once connected to imsd", "from", s.From, "to", s.To,
		"deadline", s.FirstStart.Add(s.ConfirmWithin).Format(time.RFC3339), "start", s.Starts)
	return s, nil
}

// keepIfRefused is err, except a refused rollback (nil): the agent then
// starts with the binaries it has, as if no update were in progress.
func keepIfRefused(err error) error {
	var refused rollbackRefusedError
	if errors.As(err, &refused) {
		return nil
	}
	return err
}

// confirmUpdate waits for the agent to connect (waitConnected) before
// the update's deadline: it then confirms the update (the old binaries
// and the state removed, a journal note). Past the deadline it rolls
// back. When ctx ends first (the agent stops), it does neither: the next
// start counts.
func confirmUpdate(ctx context.Context, dir string, s *updateState, waitConnected func(context.Context) error,
	note func(kind, subject string, data map[string]string), log *slog.Logger) error {
	dctx, cancel := context.WithDeadline(ctx, s.FirstStart.Add(s.ConfirmWithin))
	defer cancel()
	if err := waitConnected(dctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		err := rollBack(dir, s, "reconnect", fmt.Sprintf("did not reconnect within %s of its first start", s.ConfirmWithin), log)
		// Refused, the agent runs on: its journal has the refusal now.
		var refused rollbackRefusedError
		if errors.As(err, &refused) {
			notes, terr := takeUpdateNotes(dir)
			if terr != nil {
				log.Error("agent update notes", "err", terr)
			}
			for _, n := range notes {
				note(n.Kind, n.Subject, n.Data)
			}
		}
		return err
	}
	for _, f := range updateFiles() {
		if err := os.Remove(filepath.Join(s.Dir, f+".prev")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(filepath.Join(dir, updateStateFile)); err != nil {
		return err
	}
	data := map[string]string{"from": s.From, "to": s.To, "starts": strconv.Itoa(s.Starts), "offer": s.OfferID}
	if err := saveLastUpdate(dir, updateNote{Kind: "agent_update_confirmed", Subject: s.Release, Data: data}); err != nil {
		log.Warn("record the agent update's confirmation for imsd", "err", err)
	}
	note("agent_update_confirmed", s.Release, data)
	log.Info("agent update confirmed", "from", s.From, "to", s.To)
	return nil
}

// watchUpdate runs in the agent of version: once agentd update apply has
// swapped the binaries of an update from this version (seen in the state
// dir, polled every interval), the agent drains (drain: its jobs end and
// their results are written back; it takes no new ones) and executes the
// new agentd in its place, with the same arguments. It returns when ctx
// ends, or with the error of a failed exec.
func watchUpdate(ctx context.Context, dir, version string, interval time.Duration, drain func(context.Context, time.Duration) error, log *slog.Logger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s, err := loadUpdateState(dir)
		if err != nil || s == nil || s.From != version || s.Starts > 0 {
			continue
		}
		log.Info("agent update applied: draining (running jobs finish, no new ones), then running the new version", "from", s.From, "to", s.To)
		if err := drain(ctx, 100*time.Millisecond); err != nil {
			return nil
		}
		args := append([]string{filepath.Join(s.Dir, "agentd")}, os.Args[1:]...)
		log.Info("agent update: drained; running the new version", "to", s.To, "path", args[0])
		return fmt.Errorf("run the new agentd %s: %w", s.To, execAgent(args[0], args))
	}
}
