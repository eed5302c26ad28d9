package pluginhost

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/byoc-dev/byoc/internal/atomicfile"
)

// PinFileName is the customer's plugin pin file in the agent's state
// directory, written by "agentd plugin pin|unpin" and read again by a
// running agent whenever it changes.
const PinFileName = "plugin-pins.json"

// PinFile is the pin file's content: the SHA-256 each external type's
// binary must have, with who pinned it and when.
type PinFile struct {
	Pins map[string]Pin `json:"pins"`
}

// Pin is one type's pin.
type Pin struct {
	SHA256   string    `json:"sha256"`
	PinnedAt time.Time `json:"pinned_at,omitzero"`
	PinnedBy string    `json:"pinned_by,omitempty"`
	// Source is where the binary was when it was pinned (agentd plugin
	// pin --file), for people; for an installed release, the vendor
	// registry's reference it was copied from.
	Source string `json:"source,omitempty"`
	// Installed is the binary's path when "agentd plugin install" put
	// it in the state directory's plugins directory: the agent runs that
	// file for the type, not one in --plugin-dir.
	Installed string `json:"installed,omitempty"`
	// OCI is the release's reference in the install registry, by
	// digest, that the binary was verified and installed from; Version
	// its version and SignedBy the id of the imsd key whose signature
	// was verified.
	OCI      string `json:"oci,omitempty"`
	Version  string `json:"version,omitempty"`
	SignedBy string `json:"signed_by,omitempty"`
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// CheckPin checks a pin's type name and checksum.
func CheckPin(typ, sum string) error {
	if !typeName.MatchString(typ) {
		return fmt.Errorf("type %q: use lowercase letters, digits, _ and -", typ)
	}
	if !sha256Hex.MatchString(sum) {
		return fmt.Errorf("sha256 %q: want 64 lowercase hex digits", sum)
	}
	return nil
}

// ReadPins reads the pin file at path; a missing file holds no pins. An
// error names the file and what is wrong.
func ReadPins(path string) (PinFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return PinFile{Pins: map[string]Pin{}}, nil
	}
	if err != nil {
		return PinFile{}, fmt.Errorf("plugin pin file: %w", err)
	}
	var pf PinFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pf); err != nil {
		return PinFile{}, fmt.Errorf("plugin pin file %s: %w (write it with agentd plugin pin)", path, err)
	}
	if pf.Pins == nil {
		pf.Pins = map[string]Pin{}
	}
	for _, typ := range slices.Sorted(maps.Keys(pf.Pins)) {
		if p := pf.Pins[typ]; p.SHA256 == "" && p.OCI != "" {
			// A pinned release not fetched yet: its binary's checksum is
			// the release's to say.
			if !typeName.MatchString(typ) {
				return PinFile{}, fmt.Errorf("plugin pin file %s: pins.%s: type %q: use lowercase letters, digits, _ and -", path, typ, typ)
			}
		} else if err := CheckPin(typ, pf.Pins[typ].SHA256); err != nil {
			return PinFile{}, fmt.Errorf("plugin pin file %s: pins.%s: %w", path, typ, err)
		}
		if in := pf.Pins[typ].Installed; in != "" && (!filepath.IsAbs(in) || filepath.Base(in) != BinaryPrefix+typ) {
			return PinFile{}, fmt.Errorf("plugin pin file %s: pins.%s.installed: %q is not an absolute path to a file named %s", path, typ, in, BinaryPrefix+typ)
		}
	}
	return pf, nil
}

// WritePins writes pf to path whole (a renamed temp file, 0600).
func WritePins(path string, pf PinFile) error {
	b, err := json.MarshalIndent(pf, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o600)
}

// PinChange is one type's pin as a reload of the pin file found it
// changed: Old or New is empty when the type was pinned or unpinned.
type PinChange struct {
	Type, Old, New string
	// OCI and Version are the new pin's release, when it was installed
	// from one (agentd plugin install).
	OCI, Version string
	// By is who the file says pinned it (New's PinnedBy).
	By string
}

// PinWatcher serves the pins of a pin file, reading it again whenever
// it changes (its size, times or inode), so a change applies to the next
// plugin started without restarting the agent.
type PinWatcher struct {
	// Path is the pin file.
	Path string
	// OnChange, if set, is told each change a reload finds, including the
	// first load's pins (Old empty); the agent records them in its
	// journal.
	OnChange func([]PinChange)

	mu     sync.Mutex
	stamp  pinStamp
	loaded bool
	pins   PinFile
	err    error
	// OnRefusal, if set, is told each refusal of a pinned release that
	// differs from the one held for its type (Refuse), and each
	// acceptance of a release held refused (Accept); the agent records
	// them in its journal. A refusal repeated by every job that needs the
	// release is told once.
	OnRefusal func(RefusalChange)

	// refused are the agent's refusals of pinned releases (Refuse), by
	// type, kept in the refusals file (RefusalsFileName) beside the pin
	// file so that a restarted agent reports them still; refusedLoaded
	// once the file was read, refusedErr what reading it failed with.
	refused       map[string]Refusal
	refusedLoaded bool
	refusedErr    error
}

// ErrRefused is a release that failed a check of its signature, digests
// or type: what a Fetch error wraps when the release itself is at fault
// (not the registry's reachability).
var ErrRefused = errors.New("refused")

// RefusalsFileName is the file beside the pin file in which a running
// agent keeps its refusals of pinned releases (PinWatcher.Refuse).
const RefusalsFileName = "plugin-refusals.json"

// Refusal is the agent's refusal of the release OCI pinned for a type,
// when a job needed it: Version is the release's version (when the
// agent read it), Reason the refusal, At when the agent first refused it
// for that reason.
type Refusal struct {
	OCI     string    `json:"oci"`
	Version string    `json:"version,omitempty"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
	// PinSHA256 and PinnedAt are the pin's when the release was refused:
	// a pin of the same release installed since (agentd plugin install)
	// has others, and ends the refusal (reconcileLocked).
	PinSHA256 string    `json:"pin_sha256,omitempty"`
	PinnedAt  time.Time `json:"pinned_at,omitzero"`
}

// Digest is the refused release's digest (OCI's, after the @).
func (f Refusal) Digest() string {
	_, dg, _ := strings.Cut(f.OCI, "@")
	return dg
}

// RefusedError is a Fetch error refusing a release (it is ErrRefused)
// whose version (and type) the agent read.
type RefusedError struct {
	Version string
	// Type is the release's type, when the agent read it.
	Type string
	Err  error
}

func (e *RefusedError) Error() string        { return ErrRefused.Error() + ": " + e.Err.Error() }
func (e *RefusedError) Unwrap() error        { return e.Err }
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// RefusalChange is a refusal that PinWatcher.Refuse found new for Type
// (another release, or another reason), or, Accepted, a release held
// refused that a later Fetch installed (KeyID: the key whose signature
// verified then).
type RefusalChange struct {
	Type string
	Refusal
	Accepted bool
	KeyID    string
}

// refusalsFile is the refusals file's content.
type refusalsFile struct {
	Refusals map[string]Refusal `json:"refusals"`
}

func (w *PinWatcher) refusalsPath() string {
	return filepath.Join(filepath.Dir(w.Path), RefusalsFileName)
}

// LoadRefusals reads the refusals file, once; the agent calls it at
// start. An unreadable file is an error and holds no refusal (the next
// refusal replaces it).
func (w *PinWatcher) LoadRefusals() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.loadRefusalsLocked()
	return w.refusedErr
}

func (w *PinWatcher) loadRefusalsLocked() {
	if w.refusedLoaded {
		return
	}
	w.refusedLoaded = true
	w.refused = map[string]Refusal{}
	b, err := os.ReadFile(w.refusalsPath())
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var rf refusalsFile
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(&rf)
	}
	if err != nil {
		w.refusedErr = fmt.Errorf("plugin refusals file %s: %w (the agent writes it; it holds no refusal until the next one)", w.refusalsPath(), err)
		return
	}
	for typ, f := range rf.Refusals {
		if typeName.MatchString(typ) && f.OCI != "" {
			w.refused[typ] = f
		}
	}
}

// saveRefusalsLocked writes the refusals file whole (a renamed temp
// file, 0600).
func (w *PinWatcher) saveRefusalsLocked() error {
	b, err := json.MarshalIndent(refusalsFile{Refusals: w.refused}, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(w.refusalsPath(), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("plugin refusals file: %w", err)
	}
	return nil
}

// Refuse records that the agent refused the release f.OCI pinned for
// typ (its report to imsd says so while the pin names that release),
// in the refusals file. A refusal of the release held refused for the
// same reason changes nothing (its time stays the first refusal's); a
// new one is told to OnRefusal. An error is the file's: the refusal is
// held anyway.
func (w *PinWatcher) Refuse(typ string, f Refusal) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.loadRefusalsLocked()
	if old, ok := w.refused[typ]; ok && old.OCI == f.OCI && old.Reason == f.Reason {
		if old.Version == "" && f.Version != "" {
			old.Version = f.Version
			w.refused[typ] = old
			return w.saveRefusalsLocked()
		}
		return nil
	}
	w.refused[typ] = f
	if w.OnRefusal != nil {
		w.OnRefusal(RefusalChange{Type: typ, Refusal: f})
	}
	return w.saveRefusalsLocked()
}

// Accept forgets typ's refusal once the release p (as Fetch completed
// its pin) is installed; if p is the release that was refused, that is
// told to OnRefusal.
func (w *PinWatcher) Accept(typ string, p Pin) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.loadRefusalsLocked()
	old, ok := w.refused[typ]
	if !ok {
		return nil
	}
	delete(w.refused, typ)
	if old.OCI == p.OCI && w.OnRefusal != nil {
		w.OnRefusal(RefusalChange{Type: typ, Accepted: true, KeyID: p.SignedBy,
			Refusal: Refusal{OCI: p.OCI, Version: cmp.Or(p.Version, old.Version), Reason: old.Reason, At: old.At}})
	}
	return w.saveRefusalsLocked()
}

// Release is one pinned plugin release with what the agent verified of
// it: Verdict is "verified" (installed), "refused" or "" (pinned, not
// installed yet).
type Release struct {
	Type, OCI, Version, Verdict, KeyID, Reason string
	At                                         time.Time
}

// Releases are the releases the pin file names (pins with an OCI
// reference), sorted by type, each with its verdict: a refusal of the
// release the pin names wins over an install.
func (w *PinWatcher) Releases() ([]Release, error) {
	pf, err := w.File()
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.loadRefusalsLocked()
	var out []Release
	for _, typ := range slices.Sorted(maps.Keys(pf.Pins)) {
		p := pf.Pins[typ]
		if p.OCI == "" {
			continue
		}
		r := Release{Type: typ, OCI: p.OCI, Version: p.Version}
		if f, ok := w.refused[typ]; ok && f.OCI == p.OCI {
			r.Verdict, r.Reason, r.At = "refused", f.Reason, f.At
			r.Version = cmp.Or(r.Version, f.Version)
		} else if p.SHA256 != "" && p.Installed != "" {
			r.Verdict, r.KeyID, r.At = "verified", p.SignedBy, p.PinnedAt
		}
		out = append(out, r)
	}
	return out, nil
}

type pinStamp struct {
	size         int64
	ino          uint64
	mtime, ctime int64
}

func statPins(path string) (pinStamp, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return pinStamp{}, nil
	}
	if err != nil {
		return pinStamp{}, err
	}
	st := pinStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
		st.ctime = time.Unix(sys.Ctim.Unix()).UnixNano()
	}
	return st, nil
}

// Pins returns the pins by type (hex SHA-256), reading the file again if
// it changed. A file that cannot be read or is malformed is an error, and
// no external plugin runs until it is fixed.
func (w *PinWatcher) Pins() (map[string]string, error) {
	pf, err := w.File()
	if err != nil {
		return nil, err
	}
	return sums(pf), nil
}

// File is Pins with each pin whole.
func (w *PinWatcher) File() (PinFile, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := statPins(w.Path)
	if err == nil && w.loaded && st == w.stamp {
		if w.err != nil {
			return PinFile{}, w.err
		}
		return w.pins, nil
	}
	var pf PinFile
	if err == nil {
		pf, err = ReadPins(w.Path)
	}
	if err != nil {
		w.stamp, w.loaded, w.err = st, true, err
		return PinFile{}, err
	}
	changes := diffPins(w.pins, pf)
	w.stamp, w.loaded, w.pins, w.err = st, true, pf, nil
	if len(changes) > 0 && w.OnChange != nil {
		w.OnChange(changes)
	}
	// The refusals file is the agent's; a failure to write it leaves the
	// refusals held right (in memory) and is tried again with the next
	// change.
	_ = w.reconcileLocked(pf)
	return pf, nil
}

// reconcileLocked ends the refusals the pins pf no longer bear out, as
// the pin file is read (at start, and whenever it changes): a refusal of
// a release the type's pin no longer names (re-pinned to another
// release, or unpinned), and one of a release the pin names installed
// since it was refused (agentd plugin install verified and pinned it:
// told to OnRefusal as accepted, as Accept tells a release a job
// installed). What is left is written to the refusals file. w.mu is
// held.
func (w *PinWatcher) reconcileLocked(pf PinFile) error {
	w.loadRefusalsLocked()
	changed := false
	for _, typ := range slices.Sorted(maps.Keys(w.refused)) {
		f := w.refused[typ]
		p, ok := pf.Pins[typ]
		switch {
		case !ok || p.OCI != f.OCI:
			delete(w.refused, typ)
			changed = true
		case p.SHA256 != "" && p.Installed != "" && (p.SHA256 != f.PinSHA256 || !p.PinnedAt.Equal(f.PinnedAt)):
			delete(w.refused, typ)
			changed = true
			if w.OnRefusal != nil {
				w.OnRefusal(RefusalChange{Type: typ, Accepted: true, KeyID: p.SignedBy,
					Refusal: Refusal{OCI: p.OCI, Version: cmp.Or(p.Version, f.Version), Reason: f.Reason, At: f.At}})
			}
		}
	}
	if !changed {
		return nil
	}
	return w.saveRefusalsLocked()
}

func sums(pf PinFile) map[string]string {
	out := make(map[string]string, len(pf.Pins))
	for t, p := range pf.Pins {
		out[t] = p.SHA256
	}
	return out
}

func diffPins(old, new PinFile) []PinChange {
	var out []PinChange
	types := slices.Sorted(maps.Keys(old.Pins))
	for t := range new.Pins {
		if _, ok := old.Pins[t]; !ok {
			types = append(types, t)
		}
	}
	slices.Sort(types)
	for _, t := range slices.Compact(types) {
		o, n := old.Pins[t], new.Pins[t]
		if o.SHA256 != n.SHA256 || o.OCI != n.OCI {
			out = append(out, PinChange{Type: t, Old: o.SHA256, New: n.SHA256, By: n.PinnedBy, OCI: n.OCI, Version: n.Version})
		}
	}
	return out
}

// pinHint says how to pin typ to sum, for an error.
func (l *Loader) pinHint(typ, sum string) string {
	if l.PinWatcher != nil {
		return fmt.Sprintf("agentd plugin pin %s %s (the running agent reads %s again; no restart)", typ, sum, filepath.Base(l.PinWatcher.Path))
	}
	return fmt.Sprintf("--plugin-pin %s=%s", typ, sum)
}

// pin returns typ's pinned checksum: the pin file's if it pins typ, else
// the --plugin-pin flag's.
func (l *Loader) pin(typ string) (string, bool, error) {
	p, ok, err := l.filePin(typ)
	if err != nil || ok {
		return p.SHA256, ok, err
	}
	s, ok := l.Pins[typ]
	return strings.ToLower(strings.TrimSpace(s)), ok, nil
}

// filePin returns typ's pin in the pin file, if it has one.
func (l *Loader) filePin(typ string) (Pin, bool, error) {
	if l.PinWatcher == nil {
		return Pin{}, false, nil
	}
	pf, err := l.PinWatcher.File()
	if err != nil {
		return Pin{}, false, err
	}
	p, ok := pf.Pins[typ]
	return p, ok, nil
}

// LockPins takes the pin file's exclusive lock (path.lock) and returns
// its release: whoever changes the file holds it from reading to
// writing, so that the customer's agentd plugin commands and the agent
// completing a pinned release never undo each other.
func LockPins(path string) (unlock func(), err error) {
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("plugin pin file lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return nil, fmt.Errorf("plugin pin file lock: %w", err)
	}
	return func() { lock.Close() }, nil
}

// UpdatePins changes the pin file at path under its lock: it reads the
// file, calls change (with the read's error, the file then empty) and
// writes the result unless change fails.
func UpdatePins(path string, change func(pf *PinFile, readErr error) error) error {
	unlock, err := LockPins(path)
	if err != nil {
		return err
	}
	defer unlock()
	pf, rerr := ReadPins(path)
	if rerr != nil {
		pf = PinFile{Pins: map[string]Pin{}}
	}
	if err := change(&pf, rerr); err != nil {
		return err
	}
	return WritePins(path, pf)
}
