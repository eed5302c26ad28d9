// Package permissions is the customer's permission state on the agent's
// side: which permission modes the customer allows (provision,
// maintenance, deprovision, break_glass) and the kill switch that refuses
// every job. It lives in a file of the agent's state dir that only the
// customer changes (agentd permissions ...); imsd has no way to write it.
// The agent reads it before every job and watches it while it runs.
package permissions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/byoc-dev/byoc/internal/atomicfile"
)

// FileName is the permission file inside the agent's state dir.
const FileName = "permissions.json"

// Mode is a permission mode: what a job needs the customer to allow.
type Mode string

// The permission modes, in the order they are shown.
const (
	Provision   Mode = "provision"
	Maintenance Mode = "maintenance"
	Deprovision Mode = "deprovision"
	BreakGlass  Mode = "break_glass"
)

// Modes lists the permission modes in the order they are shown.
var Modes = []Mode{Provision, Maintenance, Deprovision, BreakGlass}

// ParseMode reads a mode's name; "break-glass" is accepted for
// break_glass.
func ParseMode(s string) (Mode, error) {
	m := Mode(strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_"))
	if slices.Contains(Modes, m) {
		return m, nil
	}
	return "", fmt.Errorf("unknown permission mode %q: want provision, maintenance, deprovision or break_glass", s)
}

// State is the customer's permission state.
type State struct {
	Provision   bool `json:"provision"`
	Maintenance bool `json:"maintenance"`
	Deprovision bool `json:"deprovision"`
	BreakGlass  bool `json:"break_glass"`
	// DisabledAll is the kill switch: every job is refused, whatever
	// the modes say, until the customer enables all again.
	DisabledAll bool `json:"disabled_all"`
	// ChangedAt is when the customer last changed the state; zero for
	// the defaults, never changed.
	ChangedAt time.Time `json:"changed_at,omitzero"`
	// ChangedBy is who changed it (the local user), for the customer.
	ChangedBy string `json:"changed_by,omitempty"`
}

// Default is the state before the customer changes anything, as Nuon's
// install stacks have it: provision, maintenance and deprovision on,
// break-glass off.
func Default() State {
	return State{Provision: true, Maintenance: true, Deprovision: true}
}

// On reports whether mode m is turned on (the kill switch aside).
func (s State) On(m Mode) bool {
	switch m {
	case Provision:
		return s.Provision
	case Maintenance:
		return s.Maintenance
	case Deprovision:
		return s.Deprovision
	case BreakGlass:
		return s.BreakGlass
	}
	return false
}

// Set turns mode m on or off.
func (s *State) Set(m Mode, on bool) {
	switch m {
	case Provision:
		s.Provision = on
	case Maintenance:
		s.Maintenance = on
	case Deprovision:
		s.Deprovision = on
	case BreakGlass:
		s.BreakGlass = on
	}
}

// Refusal says why a job of mode m may not run in state s, as the job's
// final error ("refused: maintenance is turned off in the customer's
// account"), or "" when it may. A job naming no mode needs maintenance.
// A break_glass job also needs a live grant, which only RefusalAt knows
// of: Refusal allows it when break_glass is on.
func (s State) Refusal(m string) string {
	if m == "" {
		m = string(Maintenance)
	}
	mode, err := ParseMode(m)
	switch {
	case s.DisabledAll:
		return "refused: the customer has disabled all jobs in their account (agentd permissions disable-all)"
	case err != nil:
		return "refused: the job names " + err.Error()
	case !s.On(mode):
		return fmt.Sprintf("refused: %s is turned off in the customer's account", mode)
	}
	return ""
}

// Short is the state in four letters, as the console's MODES column shows
// it: P M D B for the modes on, "·" for those off; "disabled" for the
// kill switch.
func (s State) Short() string {
	if s.DisabledAll {
		return "disabled"
	}
	out := make([]string, len(Modes))
	for i, m := range Modes {
		out[i] = "·"
		if s.On(m) {
			out[i] = strings.ToUpper(string(m[:1]))
		}
	}
	return strings.Join(out, " ")
}

// Path is the permission file of the state dir dir.
func Path(dir string) string { return filepath.Join(dir, FileName) }

// Load reads the state from state dir dir: the defaults when the file does
// not exist. A file that exists but cannot be read or parsed is an error
// naming it; the agent then refuses every job rather than guess.
func Load(dir string) (State, error) {
	b, err := os.ReadFile(Path(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return Default(), nil
	}
	if err != nil {
		return State{}, fmt.Errorf("read %s: %w", Path(dir), err)
	}
	var s State
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return State{}, fmt.Errorf("%s: %w (fix or remove it; removing it restores the defaults)", Path(dir), err)
	}
	return s, nil
}

// Update changes the state in state dir dir with change, under a lock so
// that two changes at once do not lose one, and writes it atomically
// (0600). It returns the new state.
func Update(dir string, now time.Time, by string, change func(*State)) (State, error) {
	if _, err := os.Stat(dir); err != nil {
		return State{}, fmt.Errorf("state dir: %w", err)
	}
	return updateLocked(dir, ".permissions.lock", Path(dir), Load, func(s *State) error {
		change(s)
		s.ChangedAt, s.ChangedBy = now.UTC().Truncate(time.Second), by
		return nil
	})
}

// updateLocked changes the file at path, read by load, with change, under
// an flock of lockName in dir so that two changes at once do not lose
// one, and writes it atomically as indented JSON (0600). A change that
// returns an error writes nothing.
func updateLocked[T any](dir, lockName, path string, load func(dir string) (T, error), change func(*T) error) (T, error) {
	var zero T
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return zero, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return zero, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	v, err := load(dir)
	if err != nil {
		return zero, err
	}
	if err := change(&v); err != nil {
		return zero, err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return zero, err
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o600); err != nil {
		return zero, err
	}
	return v, nil
}

// Stamp identifies a version of the permission file cheaply (size,
// modification time, inode), to tell whether it changed without reading
// it. The zero Stamp is a missing file.
type Stamp struct {
	Size  int64
	MTime time.Time
	Ino   uint64
}

// StampOf stats the permission file of state dir dir.
func StampOf(dir string) (Stamp, error) { return stampOf(Path(dir)) }

func stampOf(path string) (Stamp, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Stamp{}, nil
	}
	if err != nil {
		return Stamp{}, err
	}
	st := Stamp{Size: fi.Size(), MTime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.Ino = sys.Ino
	}
	return st, nil
}
