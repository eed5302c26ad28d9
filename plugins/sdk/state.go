package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// StateFileName is the file in the component's state directory where
// SaveState keeps a plugin's state with its schema version.
const StateFileName = ".byoc-state.json"

// StateUpgrader is a plugin whose state (SaveState, LoadState) has a
// schema version. Before any operation of a job, when the state the
// component's state directory holds was saved at another version, the
// SDK calls UpgradeState with it and saves what it returns at
// StateVersion, so the operation always loads the current form. A plugin
// that changes its state's form bumps StateVersion and converts the old
// form in UpgradeState.
type StateUpgrader interface {
	// StateVersion is the version of the state's current form (1 or more).
	StateVersion() int
	UpgradeState(ctx context.Context, req *UpgradeStateRequest) (*UpgradeStateResponse, error)
}

// UpgradeStateRequest is the state as saved at an older version.
type UpgradeStateRequest struct {
	Job JobContext
	// Version is the version State was saved at (0: saved by a plugin
	// without StateUpgrader).
	Version int
	// State is the saved state's JSON.
	State json.RawMessage
	Log   Logger
}

// UpgradeStateResponse is the state in its current form.
type UpgradeStateResponse struct {
	State json.RawMessage
}

// savedState is StateFileName's content.
type savedState struct {
	Version int             `json:"version"`
	State   json.RawMessage `json:"state"`
}

// SaveState keeps v (as JSON) in the job's state directory with the
// plugin's state version (job.StateVersion), whole: a crash leaves the
// old state or the new one.
func SaveState(job JobContext, v any) error {
	if job.StateDir == "" {
		return errors.New("save state: the job has no state directory")
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return writeSaved(job.StateDir, savedState{Version: job.StateVersion, State: raw})
}

// LoadState reads the state SaveState kept into v. ok is false when
// there is none (or no state directory).
func LoadState(job JobContext, v any) (ok bool, err error) {
	s, ok, err := readSaved(job.StateDir)
	if !ok || err != nil {
		return false, err
	}
	if err := json.Unmarshal(s.State, v); err != nil {
		return false, fmt.Errorf("load state %s: %w", StateFileName, err)
	}
	return true, nil
}

func readSaved(dir string) (savedState, bool, error) {
	var s savedState
	if dir == "" {
		return s, false, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, StateFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("load state: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, false, fmt.Errorf("load state %s: %w", StateFileName, err)
	}
	return s, true, nil
}

func writeSaved(dir string, s savedState) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, StateFileName+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, StateFileName)); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

// upgradeState brings the saved state of job to p's state version, if p
// has one, and returns job with StateVersion set.
func upgradeState(ctx context.Context, p Plugin, job JobContext, log Logger) (JobContext, error) {
	u, ok := p.(StateUpgrader)
	if !ok {
		return job, nil
	}
	job.StateVersion = u.StateVersion()
	s, found, err := readSaved(job.StateDir)
	if err != nil || !found || s.Version == job.StateVersion {
		return job, err
	}
	if s.Version > job.StateVersion {
		return job, fmt.Errorf("the component's state was saved at version %d by a newer plugin; this plugin knows version %d: install the newer plugin again", s.Version, job.StateVersion)
	}
	log.System(fmt.Sprintf("upgrading the component's state from version %d to %d", s.Version, job.StateVersion))
	r, err := u.UpgradeState(ctx, &UpgradeStateRequest{Job: job, Version: s.Version, State: s.State, Log: log})
	if err != nil {
		return job, fmt.Errorf("upgrade state from version %d to %d: %w", s.Version, job.StateVersion, err)
	}
	if r == nil || !json.Valid(r.State) {
		return job, fmt.Errorf("upgrade state from version %d: the plugin returned no JSON state", s.Version)
	}
	return job, writeSaved(job.StateDir, savedState{Version: job.StateVersion, State: r.State})
}
