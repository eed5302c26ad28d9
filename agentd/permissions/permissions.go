// Package permissions is the customer's permission state on the agent's
// side: which permission modes the customer allows (provision,
// maintenance, deprovision, break_glass) and the kill switch that refuses
// every job. It lives in a file of the agent's state dir that only the
// customer changes (agentd permissions ...); imsd has no way to write it.
// The agent reads it before every job and watches it while it runs.
package permissions

import (
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
	// Windows are the customer's maintenance windows (agentd window
	// set), in internal/window's syntax: a job of a release (window-bound)
	// is refused while none is open. None: no restriction.
	Windows []string `json:"windows,omitempty"`
	// Update is the customer's update policy for the agent itself
	// (agentd update policy); the zero value is manual.
	Update UpdatePolicy `json:"update,omitzero"`
	// SupplyChain is the customer's supply-chain policy (agentd policy
	// supply-chain); the zero value requires nothing.
	SupplyChain SupplyChainPolicy `json:"supply_chain,omitzero"`
	// Telemetry is the customer's telemetry setting (agentd telemetry
	// set); the zero value is off.
	Telemetry TelemetrySetting `json:"telemetry,omitzero"`
}

// Equal reports whether s and o say the same.
func (s State) Equal(o State) bool {
	return s.Provision == o.Provision && s.Maintenance == o.Maintenance && s.Deprovision == o.Deprovision &&
		s.BreakGlass == o.BreakGlass && s.DisabledAll == o.DisabledAll && s.ChangedAt.Equal(o.ChangedAt) &&
		s.ChangedBy == o.ChangedBy && slices.Equal(s.Windows, o.Windows) && s.Update == o.Update &&
		s.SupplyChain.Equal(o.SupplyChain) && s.Telemetry.Equal(o.Telemetry)
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

// Load reads the state from state dir dir as the customer's commands
// do: checked with the agent's key in dir against the newest generation
// the agent's journal records as accepted (signed.go). The defaults when
// the file does not exist and none was ever accepted. A file that cannot
// be read, or is refused (*RefusedError), is an error naming it; the
// agent then refuses every job rather than guess.
func Load(dir string) (State, error) {
	st, _, err := loadDir(dir, FileName, Default())
	return st, err
}

// LoadWith reads the state of state dir dir checked with k, refusing a
// generation older than accepted (and a missing file once accepted > 0),
// as the agent does with the key it holds. It returns the file's
// generation (0 for the defaults of a missing file).
func LoadWith(dir string, k Key, accepted uint64) (State, uint64, error) {
	return loadSigned(k, Path(dir), accepted, Default())
}

// Update changes the state in state dir dir with change, under a lock so
// that two changes at once do not lose one, and writes it signed, as the
// next generation, atomically (0600). It returns the new state. A file
// that is refused is not changed: the error says how to re-sign it.
func Update(dir string, now time.Time, by string, change func(*State)) (State, error) {
	if _, err := os.Stat(dir); err != nil {
		return State{}, fmt.Errorf("state dir: %w", err)
	}
	return permissionsFile.update(dir, func(s *State) error {
		change(s)
		s.ChangedAt, s.ChangedBy = now.UTC().Truncate(time.Second), by
		return nil
	})
}

var permissionsFile = controlFile[State]{name: FileName, lock: ".permissions.lock", def: Default}

// controlFile is one of the customer's control files.
type controlFile[T any] struct {
	name, lock string
	def        func() T
}

// locked runs f under an flock of the file's lock in dir, so that two
// changes at once do not lose one.
func (c controlFile[T]) locked(dir string, f func() error) error {
	lock, err := os.OpenFile(filepath.Join(dir, c.lock), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	return f()
}

// write signs v as generation gen and writes it atomically (0600).
func (c controlFile[T]) write(dir string, k Key, gen uint64, v T) error {
	b, err := seal(k, c.name, gen, v)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, c.name), b, 0o600)
}

// update changes the file in dir with change and writes it signed as
// the next generation. A change that returns an error writes nothing.
func (c controlFile[T]) update(dir string, change func(*T) error) (T, error) {
	var v T
	err := c.locked(dir, func() error {
		k, _, err := dirKey(dir, true)
		if err != nil {
			return err
		}
		acc, err := dirAccepted(dir, c.name)
		if err != nil {
			return err
		}
		cur, gen, err := loadSigned(k, filepath.Join(dir, c.name), acc, c.def())
		if err != nil {
			return err
		}
		if err := change(&cur); err != nil {
			return err
		}
		v = cur
		return c.write(dir, k, max(gen, acc)+1, cur)
	})
	return v, err
}

// Status is what Verify found of one control file.
type Status struct {
	Path string
	// Missing is set for a file that does not exist (and may not: its
	// defaults apply).
	Missing bool
	// Generation is the file's, when it verified.
	Generation uint64
	// Accepted is the newest generation the agent's journal records.
	Accepted uint64
	// KeyID names the key that checked it ("" before any key exists).
	KeyID string
	// Err is why it is refused or cannot be read; nil when it verified.
	Err error
}

func (c controlFile[T]) verify(dir string) Status {
	st := Status{Path: filepath.Join(dir, c.name)}
	acc, err := dirAccepted(dir, c.name)
	st.Accepted = acc
	if err != nil {
		st.Err = err
		return st
	}
	k, ok, err := dirKey(dir, false)
	if err != nil {
		st.Err = err
		return st
	}
	if ok {
		st.KeyID = KeyID(k.Public)
	}
	b, err := readBounded(st.Path)
	st.Missing = err == nil && b == nil
	_, st.Generation, st.Err = loadDir(dir, c.name, c.def())
	return st
}

// reset writes v, signed, as the generation after the newest accepted
// (or the file's own, when it verifies), whatever the file held. With
// onlyRefused, a file that verifies (or is missing, with none accepted)
// is left alone; written says whether it was written.
func (c controlFile[T]) reset(dir string, v T, onlyRefused bool) (written bool, err error) {
	err = c.locked(dir, func() error {
		k, _, err := dirKey(dir, true)
		if err != nil {
			return err
		}
		acc, err := dirAccepted(dir, c.name)
		if err != nil {
			return err
		}
		_, gen, lerr := loadSigned(k, filepath.Join(dir, c.name), acc, c.def())
		var r *RefusedError
		if lerr != nil && !errors.As(lerr, &r) {
			return lerr
		}
		if r != nil && r.Generation < 1<<62 {
			// Above the generation the refused file claims: if it is a
			// signed file changed by hand, the signed original is then
			// older too, and refused once the agent accepts this one.
			gen = r.Generation
		}
		if lerr == nil && onlyRefused {
			return nil
		}
		written = true
		return c.write(dir, k, max(gen, acc)+1, v)
	})
	return written, err
}

// adopt signs a file from before signing as it is. It returns the
// adopted content; adopted is false when the file is missing or already
// signed and valid. A file refused for any other reason is an error.
func (c controlFile[T]) adopt(dir string) (v T, adopted bool, err error) {
	err = c.locked(dir, func() error {
		k, _, err := dirKey(dir, true)
		if err != nil {
			return err
		}
		acc, err := dirAccepted(dir, c.name)
		if err != nil {
			return err
		}
		path := filepath.Join(dir, c.name)
		cur, gen, lerr := loadSigned(k, path, acc, c.def())
		var r *RefusedError
		switch {
		case lerr == nil:
			v = cur
			return nil
		case !errors.As(lerr, &r) || !r.Unsigned:
			return lerr
		}
		b, err := readBounded(path)
		if err != nil {
			return err
		}
		if err := strictJSON(b, &v); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		adopted = true
		return c.write(dir, k, max(gen, acc)+1, v)
	})
	return v, adopted, err
}

// Verify checks both control files of state dir dir as the agent would.
func Verify(dir string) []Status {
	return []Status{permissionsFile.verify(dir), grantsFile.verify(dir)}
}

// Reset writes the defaults to the permission file, signed, whatever it
// held, and an empty grants file, signed, if the grants file is refused.
// It is how the customer recovers from a refused control file.
func Reset(dir string, now time.Time, by string) (State, error) {
	st := Default()
	st.ChangedAt, st.ChangedBy = now.UTC().Truncate(time.Second), by
	if _, err := permissionsFile.reset(dir, st, false); err != nil {
		return State{}, err
	}
	if _, err := grantsFile.reset(dir, Grants{Grants: []Grant{}}, true); err != nil {
		return State{}, err
	}
	return st, nil
}

// Adopted is what Adopt signed.
type Adopted struct {
	State, Grants bool
}

// Adopt signs, as they are, control files written before agentd signed
// them (unsigned, in the old format). Files already signed and valid, or
// missing, are left alone; a file refused for another reason is an error.
func Adopt(dir string) (Adopted, error) {
	var a Adopted
	var err error
	if _, a.State, err = permissionsFile.adopt(dir); err != nil {
		return a, err
	}
	_, a.Grants, err = grantsFile.adopt(dir)
	return a, err
}

// Stamp identifies a version of the permission file cheaply (size,
// modification and change time, inode), to tell whether it changed
// without reading it. The change time is in it because no one but the
// kernel sets it: a file rewritten in place with its old size and
// modification time put back is read again. The zero Stamp is a missing
// file.
type Stamp struct {
	Size  int64
	MTime time.Time
	CTime time.Time
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
		st.CTime = time.Unix(sys.Ctim.Unix())
	}
	return st, nil
}
