package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/atomicfile"
	"github.com/byoc-dev/byoc/internal/buildinfo"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/plugindist"
	"github.com/byoc-dev/byoc/internal/window"
	"github.com/byoc-dev/byoc/plugins/bundle"
)

const updateUsage = `usage: agentd update [--state-dir DIR] policy [--manual | --pin VERSION | --allow RANGE] [--window WINDOW | --no-window]
       agentd update [--state-dir DIR] apply [--auto] [--install-dir DIR] [--install-registry REG] oci://HOST/REPOSITORY@sha256:...
       agentd update [--state-dir DIR] status

Updates of the agent itself (agentd and byoc-plugins), as the customer
allows them. The policy is kept in DIR/permissions.json, signed like the
permission modes: only this command changes it, and the agent alone
enforces it (imsd cannot).

  policy               with no flag, print the policy; else replace it:
    --manual           (the default) only "agentd update apply", run by
                       you, updates the agent, to any signed version
    --pin VERSION      only VERSION, such as 1.4.2, is ever applied
    --allow RANGE      versions in RANGE, such as ">=1.4 <2", are applied
    --window WINDOW    and only while WINDOW is open, such as
                       "Sun 03:00-05:00 Europe/Berlin" (UTC without a zone)
  apply REF            copy the agent release REF (byoc agent publish)
                       into the install registry, verify its signature
                       (imsd's keys the agent holds) and every digest,
                       check it against the policy, and swap the binaries
                       beside agentd (new files beside, then renamed; the
                       old ones kept as *.prev). A running agent drains
                       (its running jobs finish and are reported; it takes
                       no new ones) and runs the new version in its place;
                       one not running runs it from its next start. If the
                       new version does
                       not reconnect to imsd within --confirm-within, or
                       starts more than 3 times without doing so, it
                       puts the old binaries back and runs them.
    --auto             apply as an automatic update (a scheduled job of
                       yours): a manual policy refuses it
  status               print the update in progress, if any (and a
                       refused rollback: a *.prev file that is not the
                       one the update replaced is never run)

Every update applied, refused, confirmed or rolled back is written to the
agent's journal (agentd audit) at its next start. See
docs/customer/agent-updates.md.
`

// updateStateFile is the update in progress, in the state dir.
const updateStateFile = "update.json"

// updateNotesFile holds the journal entries of agentd update, which the
// agent writes to its journal at its next start (one writer per journal).
const updateNotesFile = "update-notes.jsonl"

// maxUpdateStarts is how many starts a new version has to reconnect
// before the agent rolls back.
const maxUpdateStarts = 3

// updateState is an update in progress (updateStateFile).
type updateState struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Release string `json:"release"`
	// Dir holds agentd and byoc-plugins; the old ones are DIR/NAME.prev.
	Dir       string    `json:"dir"`
	AppliedAt time.Time `json:"applied_at"`
	AppliedBy string    `json:"applied_by"`
	// ConfirmWithin is how long the new version has, from its first
	// start, to reconnect and pass its self-check.
	ConfirmWithin time.Duration `json:"confirm_within"`
	// OfferID is the imsd offer applied ("" for one applied by hand).
	OfferID string `json:"offer_id,omitempty"`
	// Starts counts the new version's starts; FirstStart is the first.
	Starts     int       `json:"starts"`
	FirstStart time.Time `json:"first_start,omitzero"`
	// Prev is each old binary's SHA-256 and size, by its name in Dir,
	// taken when the update was applied: a rollback puts back and runs
	// only *.prev files that still match (checkPrev).
	Prev map[string]binarySum `json:"prev,omitempty"`
	// RollbackRefused says why a rollback did not put *.prev back (a
	// file that does not match Prev, or no Prev); the agent then keeps
	// the binaries it has and tries no other rollback of this update.
	RollbackRefused   string    `json:"rollback_refused,omitempty"`
	RollbackRefusedAt time.Time `json:"rollback_refused_at,omitzero"`
}

// binarySum is a file's SHA-256 (hex) and size.
type binarySum struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// sumFile is the SHA-256 and size of the file at path.
func sumFile(path string) (binarySum, error) {
	f, err := os.Open(path)
	if err != nil {
		return binarySum{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return binarySum{}, fmt.Errorf("read %s: %w", path, err)
	}
	return binarySum{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}

// updateNote is one journal entry of agentd update.
type updateNote struct {
	Kind    string            `json:"kind"`
	Subject string            `json:"subject"`
	Data    map[string]string `json:"data"`
}

// updateLastFile is the agent's latest update decision, which its hello
// and heartbeats report to imsd (lastUpdate).
const updateLastFile = "update-last.json"

// lastUpdate is the latest update decision (updateLastFile).
type lastUpdate struct {
	// Kind is applied, deferred, refused, failed, confirmed,
	// rolled_back, rollback_refused or withdrawn (imsd took the offer
	// back before it was applied); Cause what refused, failed or rolled
	// it back (policy, signature, download, self_check, window,
	// crash_loop, reconnect; prev_check: a *.prev file that does not
	// match the one the update replaced; withdrawn).
	Kind    string    `json:"kind"`
	Cause   string    `json:"cause,omitempty"`
	Release string    `json:"release"`
	OfferID string    `json:"offer_id,omitempty"`
	Version string    `json:"version,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"`
	// Confirm, for a deferred offer, is that it applies when the window
	// opens only once imsd confirms it still stands (UpdateOffer.confirm).
	Confirm bool `json:"confirm,omitempty"`
}

// saveLastUpdate records the decision note n as the latest.
func saveLastUpdate(dir string, n updateNote) error {
	l := lastUpdate{Kind: strings.TrimPrefix(n.Kind, "agent_update_"), Release: n.Subject, OfferID: n.Data["offer"],
		Version: cmpOr(n.Data["to"], n.Data["version"]), Reason: n.Data["reason"], Cause: n.Data["cause"], At: time.Now().UTC(),
		Confirm: n.Data["confirm"] == confirmByIMSD}
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, updateLastFile), append(b, '\n'), 0o600)
}

// loadLastUpdate reads the latest decision (nil: none, or unreadable).
func loadLastUpdate(dir string) *lastUpdate {
	b, err := os.ReadFile(filepath.Join(dir, updateLastFile))
	if err != nil {
		return nil
	}
	var l lastUpdate
	if json.Unmarshal(b, &l) != nil || l.Kind == "" {
		return nil
	}
	return &l
}

// addUpdateNote appends n to the state dir's notes, and records it as
// the latest decision.
func addUpdateNote(dir string, n updateNote) error {
	if err := saveLastUpdate(dir, n); err != nil {
		return err
	}
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, updateNotesFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// takeUpdateNotes reads and removes the state dir's notes.
func takeUpdateNotes(dir string) ([]updateNote, error) {
	// Renamed first, so that a note added meanwhile goes to a new file.
	path := filepath.Join(dir, updateNotesFile+".taking")
	if err := os.Rename(filepath.Join(dir, updateNotesFile), path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []updateNote
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var n updateNote
		if json.Unmarshal(sc.Bytes(), &n) == nil && n.Kind != "" {
			out = append(out, n)
		}
	}
	return out, os.Remove(path)
}

// updateWithdrawnFile lists the latest offers imsd withdrew
// (withdrawOffer), which the agent never applies.
const updateWithdrawnFile = "update-withdrawn.json"

// maxWithdrawn is how many withdrawn offers updateWithdrawnFile keeps.
const maxWithdrawn = 32

// errOfferWithdrawn is an offer imsd withdrew: not applied.
var errOfferWithdrawn = errors.New("imsd withdrew this offer: it is not applied")

// loadWithdrawnOffers reads the withdrawn offers' ids (none: unreadable).
func loadWithdrawnOffers(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, updateWithdrawnFile))
	if err != nil {
		return nil
	}
	var ids []string
	_ = json.Unmarshal(b, &ids)
	return ids
}

// addWithdrawnOffer records offer id as withdrawn, keeping the latest
// maxWithdrawn.
func addWithdrawnOffer(dir, id string) error {
	ids := loadWithdrawnOffers(dir)
	if slices.Contains(ids, id) {
		return nil
	}
	ids = append(ids, id)
	if len(ids) > maxWithdrawn {
		ids = ids[len(ids)-maxWithdrawn:]
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, updateWithdrawnFile), append(b, '\n'), 0o600)
}

// updateLockFile is flocked by the update being applied.
const updateLockFile = "update.lock"

// lockUpdate takes the state dir's update lock, or says that another
// update is being applied. Closing the file releases it.
func lockUpdate(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, updateLockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errors.New("another agentd update apply (or an offer from imsd) is applying an update to this agent now: try again once it is done (agentd update status)")
		}
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return f, nil
}

func loadUpdateState(dir string) (*updateState, error) {
	b, err := os.ReadFile(filepath.Join(dir, updateStateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s updateState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, updateStateFile), err)
	}
	return &s, nil
}

func saveUpdateState(dir string, s *updateState) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, updateStateFile), append(b, '\n'), 0o600)
}

// updateCmd runs "agentd update ...".
func updateCmd(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) int {
	fs := flag.NewFlagSet("agentd update", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), updateUsage) }
	stateDir := fs.String("state-dir", os.Getenv("BYOC_STATE_DIR"), "the agent's state `directory`; also $BYOC_STATE_DIR")
	manual := fs.Bool("manual", false, "policy: only agentd update apply, run by the customer, updates the agent")
	pin := fs.String("pin", "", "policy: the only `version` ever applied")
	allow := fs.String("allow", "", "policy: the `range` of versions applied, such as \">=1.4 <2\"")
	win := fs.String("window", "", "policy: apply only while this `window` is open, such as \"Sun 03:00-05:00 UTC\"")
	noWindow := fs.Bool("no-window", false, "policy: remove the window")
	auto := fs.Bool("auto", false, "apply: an automatic update, which a manual policy refuses")
	installDir := fs.String("install-dir", "", "apply: the `directory` of agentd and byoc-plugins; default: that of this agentd")
	registry := fs.String("install-registry", os.Getenv("BYOC_INSTALL_REGISTRY"), "apply: the install registry `location`; default oci:STATE-DIR/registry")
	confirmWithin := fs.Duration("confirm-within", 2*time.Minute, "apply: how long the new version has to reconnect and pass its self-check before the agent rolls back")
	words, code := parseWords(fs, args, stdout)
	if words == nil {
		return code
	}
	cmd, rest := words[0], words[1:]
	dir, code := stateDirArg("agentd update", *stateDir, stderr)
	if code != 0 {
		return code
	}
	switch cmd {
	case "policy":
		if len(rest) != 0 {
			fmt.Fprintln(stderr, "agentd update policy: takes flags only")
			return 2
		}
		return updatePolicyCmd(dir, *manual, *pin, *allow, *win, *noWindow, stdout, stderr, now())
	case "apply":
		if len(rest) != 1 {
			fmt.Fprintln(stderr, "agentd update apply: give the release: oci://HOST/REPOSITORY@sha256:...")
			return 2
		}
		u := &updater{stateDir: dir, installDir: *installDir, registry: *registry, auto: *auto, confirmWithin: *confirmWithin,
			platform: runtime.GOOS + "/" + runtime.GOARCH, now: now, stdout: stdout}
		if err := u.apply(ctx, rest[0]); err != nil {
			fmt.Fprintf(stderr, "agentd update apply: %v\n", err)
			return 1
		}
		return 0
	case "status":
		s, err := loadUpdateState(dir)
		if err != nil {
			fmt.Fprintf(stderr, "agentd update status: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "This agentd: %s\n", buildinfo.Get().Short())
		if s == nil {
			fmt.Fprintln(stdout, "No update in progress.")
			if d := deferredText(dir, now()); d != "" {
				fmt.Fprintln(stdout, d)
			}
			return 0
		}
		if s.RollbackRefused != "" {
			fmt.Fprintf(stdout, "Update %s -> %s (%s), applied %s by %s in %s: ROLLBACK REFUSED at %s: %s\n",
				s.From, s.To, s.Release, s.AppliedAt.UTC().Format(time.RFC3339), s.AppliedBy, s.Dir, s.RollbackRefusedAt.UTC().Format(time.RFC3339), s.RollbackRefused)
			fmt.Fprintf(stdout, "The agent keeps the binaries in %s and rolls nothing back. Find out who changed the *.prev files there (agentd audit), then apply a release by hand (agentd update apply), which keeps the binaries in place as *.prev.\n", s.Dir)
			return 0
		}
		fmt.Fprintf(stdout, "Update in progress: %s -> %s (%s), applied %s by %s in %s; started %d time(s); confirmed once it reconnects within %s of its first start\n",
			s.From, s.To, s.Release, s.AppliedAt.UTC().Format(time.RFC3339), s.AppliedBy, s.Dir, s.Starts, s.ConfirmWithin)
		return 0
	default:
		fmt.Fprintf(stderr, "agentd update: unknown command %q\n\n%s", cmd, updateUsage)
		return 2
	}
}

func updatePolicyCmd(dir string, manual bool, pin, allow, win string, noWindow bool, stdout, stderr io.Writer, now time.Time) int {
	set := 0
	for _, b := range []bool{manual, pin != "", allow != ""} {
		if b {
			set++
		}
	}
	if set > 1 {
		fmt.Fprintln(stderr, "agentd update policy: give one of --manual, --pin and --allow")
		return 2
	}
	if win != "" && noWindow {
		fmt.Fprintln(stderr, "agentd update policy: give --window or --no-window, not both")
		return 2
	}
	var st permissions.State
	var err error
	if set == 0 && win == "" && !noWindow {
		st, err = permissions.Load(dir)
	} else {
		if win != "" {
			if win, err = permissions.NormalizeWindow(win); err != nil {
				fmt.Fprintf(stderr, "agentd update policy: --window: %v\n", err)
				return 2
			}
		}
		var p permissions.UpdatePolicy
		if st, err = permissions.Load(dir); err == nil {
			p = st.Update
			if set == 1 {
				p.Pin, p.Allow = pin, allow
			}
			if win != "" {
				p.Window = win
			} else if noWindow {
				p.Window = ""
			}
			if err := p.Check(); err != nil {
				fmt.Fprintf(stderr, "agentd update policy: %v\n", err)
				return 2
			}
			st, err = permissions.Update(dir, now, whoami(), func(s *permissions.State) { s.Update = p })
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "agentd update policy: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "Update policy of the agent in %s: %s\n", dir, st.Update)
	fmt.Fprintf(stdout, "This agentd: %s\n", buildinfo.Get().Short())
	if st.Update.Window != "" {
		if s, err := window.ParseSchedule([]string{st.Update.Window}); err == nil {
			if s.Contains(now) {
				fmt.Fprintf(stdout, "Window: open now, until %s\n", s.CloseAfter(now).UTC().Format(time.RFC3339))
			} else {
				fmt.Fprintf(stdout, "Window: closed now; next opens %s\n", s.NextOpening(now).UTC().Format(time.RFC3339))
			}
		}
	}
	return 0
}

// updater applies an agent release.
type updater struct {
	stateDir, installDir, registry string
	auto                           bool
	confirmWithin                  time.Duration
	platform                       string
	now                            func() time.Time
	stdout                         io.Writer
	// version is the running agentd's; empty: buildinfo's.
	version string
	// offerID is the imsd offer being applied ("" for agentd update
	// apply); by who decided ("" for the local user).
	offerID, by string
	// confirm is the offer's UpdateOffer.confirm: deferred, it applies
	// only once imsd confirms it.
	confirm bool
	// refusedVersion is the release's version once read, for a refusal.
	refusedVersion string
}

// who is the update's actor for the journal.
func (u *updater) who() string {
	if u.by != "" {
		return u.by
	}
	return whoami()
}

// The causes of an update not applied: the customer's policy and the
// release's signature refuse it; a download or self-check that fails
// fails it.
const (
	causePolicy    = "policy"
	causeSignature = "signature"
	causeDownload  = "download"
	causeSelfCheck = "self_check"
)

// refuse records an update not applied for cause (refused for the policy
// and the signature, failed otherwise) in the agent's journal and
// returns err.
func (u *updater) refuse(ref, cause string, err error) error {
	kind := "agent_update_failed"
	if cause == causePolicy || cause == causeSignature {
		kind = "agent_update_refused"
	}
	if nerr := addUpdateNote(u.stateDir, updateNote{Kind: kind, Subject: ref,
		Data: map[string]string{"reason": err.Error(), "cause": cause, "by": u.who(), "offer": u.offerID, "version": u.refusedVersion}}); nerr != nil {
		return fmt.Errorf("%w (and recording the refusal failed: %v)", err, nerr)
	}
	return err
}

// deferredError is an offer the customer's update window deferred: the
// agent applies it at the window's next opening.
type deferredError struct{ at time.Time }

func (e deferredError) Error() string {
	return "deferred to the update window's next opening, " + e.at.UTC().Format(time.RFC3339)
}

// deferredText says which offer the update window deferred and when it
// applies ("" for none): agentd update status.
func deferredText(dir string, now time.Time) string {
	l := loadLastUpdate(dir)
	if l == nil || l.Kind != "deferred" || l.OfferID == "" {
		return ""
	}
	s := fmt.Sprintf("Deferred: imsd's offer %s of %s (%s), deferred %s to the update window", l.OfferID, cmpOr(l.Version, "an agent release"),
		l.Release, l.At.UTC().Format(time.RFC3339))
	st, err := permissions.Load(dir)
	if err != nil {
		return s + fmt.Sprintf("; the update policy cannot be read (%v): it applies nothing until it can", err)
	}
	shut, next := st.Update.WindowShut(now)
	switch {
	case shut && next.IsZero():
		return s + ", which never opens: it applies when you change the window, as the policy then says"
	case shut && l.Confirm:
		return s + fmt.Sprintf(": it applies when the window opens, %s, once imsd confirms the offer still stands", next.UTC().Format(time.RFC3339))
	case shut:
		return s + fmt.Sprintf(": it applies when the window opens, %s", next.UTC().Format(time.RFC3339))
	case l.Confirm:
		return s + ": the window is open, and the agent asks imsd at each heartbeat whether the offer still stands; it applies it on imsd's answer (if imsd withdrew it, it drops it)"
	default:
		return s + ": the window is open, and the agent applies it now"
	}
}

// confirmByIMSD is a deferred offer's note's "confirm": the offer
// applies once imsd, asked when the window opens, confirms it stands.
const confirmByIMSD = "imsd"

// deferTo records offer u.offerID of release ref (version) as deferred
// to next, when the customer's window opens.
func (u *updater) deferTo(ref, version, window string, next time.Time) error {
	err := deferredError{at: next}
	reason := fmt.Sprintf("the update window %s is closed; the agent applies %s when it next opens, %s", window, version, next.UTC().Format(time.RFC3339))
	data := map[string]string{"cause": "window", "by": u.who(), "offer": u.offerID, "version": version,
		"applies_at": next.UTC().Format(time.RFC3339)}
	if u.confirm {
		reason += ", once imsd confirms the offer still stands"
		data["confirm"] = confirmByIMSD
	}
	data["reason"] = reason
	if nerr := addUpdateNote(u.stateDir, updateNote{Kind: "agent_update_deferred", Subject: ref, Data: data}); nerr != nil {
		return fmt.Errorf("%w (and recording it failed: %v)", err, nerr)
	}
	return err
}

func (u *updater) apply(ctx context.Context, refArg string) error {
	from := u.version
	if from == "" {
		from = buildinfo.Get().Short()
	}
	id, err := identity.Load(u.stateDir)
	if err != nil {
		return fmt.Errorf("the agent's identity holds the imsd keys a release's signature is checked with: %w", err)
	}
	// One update at a time (an offer and the customer's apply, or two
	// applies): the second would swap over the first and keep the first's
	// new agentd as agentd.prev, losing the old one.
	lock, err := lockUpdate(u.stateDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if u.offerID != "" && slices.Contains(loadWithdrawnOffers(u.stateDir), u.offerID) {
		return errOfferWithdrawn
	}
	st, err := permissions.Load(u.stateDir)
	if err != nil {
		return fmt.Errorf("the update policy: %w", err)
	}
	if cur, err := loadUpdateState(u.stateDir); err != nil {
		return err
	} else if cur != nil && cur.RollbackRefused != "" && u.offerID == "" {
		// The customer, having looked (agentd update status), moves on
		// by hand: the binaries in place become *.prev below.
		fmt.Fprintf(u.stdout, "replacing the update to %s whose rollback was refused (%s)\n", cur.To, cur.RollbackRefused)
	} else if cur != nil && cur.RollbackRefused != "" {
		return fmt.Errorf("the rollback of the update to %s (%s) was refused: %s; only agentd update apply, run by the customer, replaces it (agentd update status)", cur.To, cur.Release, cur.RollbackRefused)
	} else if cur != nil {
		return fmt.Errorf("an update to %s (%s) is in progress: start the agent, and it confirms or rolls back that one first (agentd update status)", cur.To, cur.Release)
	}
	ref, err := plugindist.ParseRef(refArg)
	if err != nil {
		return err
	}
	if u.registry == "" {
		u.registry = "oci:" + filepath.Join(u.stateDir, "registry")
	}
	reg, err := ocicopy.ParseRegistry(u.registry)
	if err != nil {
		return fmt.Errorf("--install-registry: %w", err)
	}
	creds := credsFromEnv("BYOC_INSTALL_REGISTRY")
	// Custody: vendor registry -> install registry, by digest, with the
	// signatures; everything after reads the install registry only.
	if ref.Registry != reg {
		src, err := ocicopy.Open(ctx, ref.Registry, ref.Repository, credsFromEnv("BYOC_VENDOR_REGISTRY"))
		if err != nil {
			return err
		}
		defer src.Close()
		dst, err := ocicopy.Open(ctx, reg, ref.Repository, creds)
		if err != nil {
			return err
		}
		defer dst.Close()
		if _, err := ocicopy.Copy(ctx, src, dst, ref.Digest, ocicopy.Options{RefuseImageReferrers: true}); err != nil {
			return u.refuse(refArg, causeDownload, fmt.Errorf("copy %s into the install registry %s: %w", refArg, reg, err))
		}
	}
	repo, err := ocicopy.Open(ctx, reg, ref.Repository, creds)
	if err != nil {
		return err
	}
	defer repo.Close()
	at := ocicopy.Reference{Registry: reg, Repository: ref.Repository, Digest: ref.Digest}.String()
	m, err := plugindist.ReadAgent(ctx, repo, ref.Digest)
	if err != nil {
		return u.refuse(at, causeDownload, fmt.Errorf("failed: %w", err))
	}
	u.refusedVersion = m.Version
	keyID, err := plugindist.Verify(ctx, repo, m, id.IMSDKeys)
	if err != nil {
		return u.refuse(at, causeSignature, fmt.Errorf("refused: %w", err))
	}
	if r := st.Update.Refusal(m.Version, u.now(), !u.auto); r != "" {
		// Only the window refuses an offer it would allow at the
		// window's next opening: not final, deferred to then.
		if shut, next := st.Update.WindowShut(u.now()); shut && u.offerID != "" && !next.IsZero() && st.Update.Refusal(m.Version, next, !u.auto) == "" {
			return u.deferTo(refArg, m.Version, st.Update.Window, next)
		}
		return u.refuse(at, causePolicy, fmt.Errorf("agent %s: %s", m.Version, r))
	}
	bins := map[string][]byte{}
	for _, f := range plugindist.AgentFiles {
		if bins[f], err = plugindist.FetchBinary(ctx, repo, m, plugindist.AgentKey(u.platform, f)); err != nil {
			return u.refuse(at, causeDownload, fmt.Errorf("failed: %w", err))
		}
	}
	dir := u.installDir
	if dir == "" {
		self, err := os.Executable()
		if err == nil {
			self, err = filepath.EvalSymlinks(self)
		}
		if err != nil {
			return fmt.Errorf("find agentd's own executable (give --install-dir): %w", err)
		}
		dir = filepath.Dir(self)
	}
	names := map[string]string{"agentd": "agentd", "byoc-plugins": bundle.Binary}
	for _, f := range plugindist.AgentFiles {
		if _, err := os.Stat(filepath.Join(dir, names[f])); err != nil {
			return fmt.Errorf("--install-dir %s: %w (it must hold agentd and %s)", dir, err, bundle.Binary)
		}
	}
	// New files beside the old ones, each checked by running it.
	staged := map[string]string{}
	defer func() {
		for _, p := range staged {
			os.Remove(p)
		}
	}()
	for _, f := range plugindist.AgentFiles {
		p := filepath.Join(dir, "."+names[f]+".new")
		if err := atomicfile.Write(p, bins[f], 0o755); err != nil {
			return err
		}
		staged[f] = p
		out, err := exec.CommandContext(ctx, p, "--version").Output()
		if err != nil || !strings.Contains(string(out), " "+m.Version+" ") {
			return u.refuse(at, causeSelfCheck, fmt.Errorf("failed: the release's %s does not run here or is not version %s (%s --version: %q, %v)", f, m.Version, f, strings.TrimSpace(string(out)), err))
		}
	}
	sums := map[string]binarySum{}
	for _, f := range plugindist.AgentFiles {
		cur, prev := filepath.Join(dir, names[f]), filepath.Join(dir, names[f]+".prev")
		if err := os.Remove(prev); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.Link(cur, prev); err != nil {
			return fmt.Errorf("keep the old %s: %w", f, err)
		}
		// What a rollback may put back and run: checked then (checkPrev).
		if sums[names[f]], err = sumFile(prev); err != nil {
			return fmt.Errorf("keep the old %s: %w", f, err)
		}
	}
	s := &updateState{From: from, To: m.Version, Release: at, Dir: dir, AppliedAt: u.now().UTC(), AppliedBy: u.who(), ConfirmWithin: u.confirmWithin,
		OfferID: u.offerID, Prev: sums}
	if err := saveUpdateState(u.stateDir, s); err != nil {
		return err
	}
	// byoc-plugins first: a crash between the renames leaves agentd
	// old, which rolls back at its start (the state file says so).
	for _, f := range []string{"byoc-plugins", "agentd"} {
		if err := os.Rename(staged[f], filepath.Join(dir, names[f])); err != nil {
			return fmt.Errorf("swap %s: %w (start agentd: it rolls back)", f, err)
		}
		delete(staged, f)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return err
	}
	if err := addUpdateNote(u.stateDir, updateNote{Kind: "agent_update_applied", Subject: at,
		Data: map[string]string{"from": from, "to": m.Version, "signed_by": keyID, "by": s.AppliedBy, "dir": dir, "offer": u.offerID}}); err != nil {
		return err
	}
	fmt.Fprintf(u.stdout, "agent release %s (%s) verified: signed by imsd key %s; allowed by the update policy (%s)\n", m.Version, m.Descriptor.Digest, keyID, st.Update)
	fmt.Fprintf(u.stdout, "swapped agentd and %s in %s: %s -> %s (the old ones kept as *.prev)\n", bundle.Binary, dir, from, m.Version)
	fmt.Fprintf(u.stdout, "a running agent drains (its running jobs finish; it takes no new ones) and runs %s in its place; one not running runs it from its next start\n", m.Version)
	fmt.Fprintf(u.stdout, "%s must reconnect within %s of its first start, or the agent rolls back to %s\n", m.Version, u.confirmWithin, from)
	return nil
}
