package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/atomicfile"
	"github.com/byoc-dev/byoc/internal/buildinfo"
	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/internal/bundlefile/bundleload"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/plugindist"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

const bundleUsage = `usage: agentd bundle import [agentd flags] FILE
       agentd bundle export-results --state-dir DIR [--bundle ID] -o FILE
       agentd bundle inventory [--state-dir DIR | --install-registry LOCATION]

import runs an offline bundle (byoc bundle create) with no connection to
imsd. Before anything is written it checks the bundle's manifest against
imsd's keys this agent pinned at enrolment, every small file of the
bundle against the manifest, and every job's own signature (for this
agent and install). Then it loads the bundle's artifacts (images, charts,
modules) into the install registry, the layers straight from the bundle
(they are not unpacked), each checked against the manifest as it streams:
a layer that does not match refuses the import, naming it, before any
image is loaded (blobs the registry holds already are not sent; it prints
the blob bytes it moved; an artifact the supply-chain policy refuses is
not loaded) and runs the workflow's jobs in order, each through the checks
an assigned job passes: the customer's permission modes, maintenance
windows, policies and supply-chain policy, in the plugin sandbox. The
audit records go into the agent's journal; the results into
STATE-DIR/bundles/BUNDLE/results.json. Importing the same bundle again
runs only the jobs that did not succeed (none again: a job is never run
twice). An agent release in the bundle must be signed by an imsd key this
agent pinned (or nothing is written); it is loaded into the install
registry, not applied: the import prints whether the update policy allows
it and the agentd update apply command that applies it. Plugin releases
likewise: checked, loaded, and the agentd plugin install command printed. It takes agentd's
own flags (--state-dir, --install-registry,
--stack-config, --secrets-file, --policy-dir, --sandbox ...), before FILE.

export-results writes the results of a bundle's jobs (default: the bundle
imported last), the bundle's manifest imsd signed (imsd checks the
results against it) and the agent's audit journal into FILE, signed with the
agent's own key: you can read both (tar -xOf FILE results.json) before the
file leaves; byoc bundle import-results gives it to imsd, which checks the
signature and that the journal continues what it had before.

inventory prints the digest of every blob and manifest the install
registry holds (one a line) under the repositories given (default: every
repository of an oci: install registry), for byoc bundle create
--have-digests: an incremental bundle then carries only what is missing.
`

func bundleCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, bundleUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "import":
		return runAgent(ctx, args[1:], &offlineFunc{name: "bundle import", run: func(ctx context.Context, a *agent.Agent, runner *agent.PluginRunner, reg string, rest []string) int {
			if len(rest) != 1 {
				fmt.Fprintf(stderr, "agentd bundle import: want one FILE after the flags, got %d arguments\n%s", len(rest), bundleUsage)
				return 2
			}
			if err := importBundle(ctx, a, runner, reg, rest[0], stdout); err != nil {
				fmt.Fprintf(stderr, "agentd bundle import: %v\n", err)
				return 1
			}
			return 0
		}})
	case "inventory":
		return inventoryCmd(args[1:], stdout, stderr)
	case "export-results":
		return exportResultsCmd(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "agentd bundle: unknown command %q\n%s", args[0], bundleUsage)
	return 2
}

// bundleResults is STATE-DIR/bundles/BUNDLE/results.json.
type bundleResults struct {
	Bundle    string `json:"bundle"`
	InstallID string `json:"install_id"`
	AgentID   string `json:"agent_id"`
	Revision  int64  `json:"revision"`
	// WorkflowKind is the bundle's workflow's kind (provision, update).
	WorkflowKind string      `json:"workflow_kind"`
	Jobs         []jobResult `json:"jobs"`
}

type jobResult struct {
	JobID         string            `json:"job_id"`
	Step          string            `json:"step"`
	Component     string            `json:"component,omitempty"`
	ComponentType string            `json:"component_type"`
	Operation     string            `json:"operation"`
	Outcome       string            `json:"outcome"`
	ExitCode      int32             `json:"exit_code"`
	Error         string            `json:"error,omitempty"`
	Outputs       map[string]string `json:"outputs,omitempty"`
	Log           []string          `json:"log,omitempty"`
	StartedAt     time.Time         `json:"started_at"`
	EndedAt       time.Time         `json:"ended_at"`
}

// maxResultLogLines and maxResultLogBytes bound the log a result keeps
// of a job, each line cut to agent.MaxLineBytes: within what imsd keeps
// of an imported job's log (a live agent's log batch, 1000 lines and 4
// MiB), so imsd cuts nothing of what an agent carried.
const (
	maxResultLogLines = 500
	maxResultLogBytes = 3 << 20
)

// resultLog collects a job's log for its result, within
// maxResultLogLines and maxResultLogBytes: the first lines, each cut to
// agent.MaxLineBytes, then a line saying how many were left out.
type resultLog struct {
	lines       []string
	bytes, left int
}

func (l *resultLog) add(text string) {
	text = agent.CutLogLine(text)
	if l.left > 0 || len(l.lines) >= maxResultLogLines || l.bytes+len(text) > maxResultLogBytes {
		l.left++
		return
	}
	l.bytes += len(text)
	l.lines = append(l.lines, text)
}

// done is the lines kept, and the note of those left out, if any.
func (l *resultLog) done() []string {
	if l.left == 0 {
		return l.lines
	}
	return append(l.lines, fmt.Sprintf("[agentd] %d more log lines were left out: a job's results keep at most %d lines and %d MiB of its log", l.left, maxResultLogLines, maxResultLogBytes>>20))
}

func importBundle(ctx context.Context, a *agent.Agent, runner *agent.PluginRunner, installRegistry, file string, stdout io.Writer) error {
	if installRegistry == "" {
		return errors.New("no install registry (--install-registry)")
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	// The bundle's small files are unpacked into the state directory
	// (STATE-DIR/staging), never beside the bundle: it may be on a
	// read-only medium, and nothing is written where it lies. Plugins
	// read the artifacts from there, in their sandbox, which shows that
	// folder only, read-only, not the rest of the state directory. What
	// imports killed there before left goes first.
	stage, err := stageImport(filepath.Join(filepath.Dir(runner.StateRoot), stagingDir), stdout)
	if err != nil {
		return err
	}
	defer stage.Close()
	staging := filepath.Join(stage.Path, "bundle")
	keys := a.IMSDKeys()
	start := time.Now()
	// Only the small files are unpacked (the jobs, manifests, index.json,
	// small blobs); the layers stay in the tar and stream from there
	// into the install registry, checked against the signed manifest as
	// they go (bundleload.Stream).
	bundlesDir := filepath.Join(runner.StateRoot, "..", "bundles")
	var bundleSig bundlefile.Signature
	bdl, err := bundlefile.Open(f, staging, func(raw []byte, m *bundlefile.Manifest, sig bundlefile.Signature) error {
		bundleSig = sig
		return checkBundleManifest(keys, a.InstallID(), a.ID(), bundlesDir, a.NewestJob(), raw, m, sig)
	}, bundleload.Stream)
	if err != nil {
		return fmt.Errorf("%s refused, nothing was written: %w", file, err)
	}
	m := bdl.Manifest
	verified := time.Since(start)
	// The jobs themselves are sealed to this agent (they carry the
	// install's sensitive values); jobs.json is only their readable view.
	sealed, err := os.ReadFile(filepath.Join(staging, "jobs.sealed"))
	if err != nil {
		return fmt.Errorf("%s refused, nothing was written: jobs.sealed: %w", file, err)
	}
	b, err := a.OpenBundleJobs(sealed)
	if err != nil {
		return fmt.Errorf("%s refused, nothing was written: %w", file, err)
	}
	var jobs []agentproto.BundleJob
	if err := json.Unmarshal(b, &jobs); err != nil {
		return fmt.Errorf("%s refused, nothing was written: jobs.sealed: %w", file, err)
	}
	// What the customer reads of the bundle (jobs.json) must be what
	// runs: imsd signs only a view it made of these jobs, and the agent
	// checks it too.
	view, err := os.ReadFile(filepath.Join(staging, "jobs.json"))
	if err != nil {
		return fmt.Errorf("%s refused, nothing was written: jobs.json: %w", file, err)
	}
	if err := agentproto.CheckBundleJobsView(view, jobs); err != nil {
		return fmt.Errorf("%s refused, nothing was written: %w", file, err)
	}
	for i := range jobs {
		if err := a.CheckOffline(&jobs[i]); err != nil {
			return fmt.Errorf("%s refused, nothing was written: %w", file, err)
		}
	}
	// The customer's controls first: a bundle whose jobs they would
	// refuse loads nothing either (each job is checked again before it
	// runs).
	for i := range jobs {
		if why := a.Refusal(jobs[i].Mode); why != "" {
			return fmt.Errorf("%s refused, nothing was written: step %s needs the %s mode: %s", file, jobs[i].Step, jobs[i].Mode, why)
		}
	}
	layout := filepath.Join(staging, "oci")
	// An agent release must carry imsd's signature by a key this agent
	// pinned, as agentd update apply requires.
	var relKey string
	if r := m.AgentRelease; r != nil {
		if relKey, err = checkRelease(ctx, a, layout, r, true); err != nil {
			return fmt.Errorf("%s refused, nothing was written: agent release %s (%s@%s): %w", file, r.Version, r.Repository, r.Digest, err)
		}
	}
	pluginKeys := make([]string, len(m.PluginReleases))
	for i, r := range m.PluginReleases {
		if pluginKeys[i], err = checkRelease(ctx, a, layout, &r, false); err != nil {
			return fmt.Errorf("%s refused, nothing was written: plugin release %s %s (%s@%s): %w", file, r.Type, r.Version, r.Repository, r.Digest, err)
		}
	}
	fmt.Fprintf(stdout, "bundle %s verified (imsd's signature, %d files, %d jobs) in %s; %d bytes of layers stay in the bundle and are checked as they load\n",
		m.ID, len(m.Files), len(jobs), verified.Round(time.Millisecond), bdl.StreamedBytes())

	// The artifacts, into the install registry.
	reg, err := ocicopy.ParseRegistry(installRegistry)
	if err != nil {
		return err
	}
	creds := ocicopy.CredentialsFromEnv(runner.Secrets, "BYOC_INSTALL_REGISTRY")
	var extra []bundleload.Load
	if r := m.AgentRelease; r != nil {
		extra = append(extra, bundleload.Load{Repository: r.Repository, Target: r.Repository, Digest: digest.Digest(r.Digest)})
	}
	for _, r := range m.PluginReleases {
		extra = append(extra, bundleload.Load{Repository: r.Repository, Target: r.Repository, Digest: digest.Digest(r.Digest)})
	}
	// An artifact the customer's supply-chain policy refuses stays out
	// of the install registry, as online (an image's check runs before
	// its copy): whatever the install's cluster pulls from there passed
	// it. Its job is refused in its turn.
	refusal := func(j *agentproto.BundleJob, art agentproto.BundleArtifact) (bool, error) {
		why, err := a.OfflineArtifactRefusal(ctx, runner, j, "oci:"+layout)
		if err != nil || why == "" {
			return false, err
		}
		fmt.Fprintf(stdout, "step %s: %s@%s (config.%s) not loaded into the install registry: %s\n", j.Step, art.Repository, art.Digest, art.Field, why)
		return true, nil
	}
	st, err := loadArtifacts(ctx, jobs, bundleload.Source{Layout: ocicopy.Registry{LayoutRoot: layout}, Bundle: bdl}, reg, creds, extra, refusal)
	if errors.Is(err, bundlefile.ErrTampered) {
		return fmt.Errorf("%s refused, no image was loaded (the install registry may hold blobs of it that nothing references): %w", file, err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "artifacts: %d loaded into the install registry %s: %d blobs sent (%d blob bytes moved), %d blobs already there\n",
		st.Artifacts, reg, st.BlobsSent, st.BlobBytes, st.BlobsHeld)
	if r := m.AgentRelease; r != nil {
		agentReleaseNext(stdout, filepath.Dir(runner.StateRoot), installRegistry, reg, r, relKey)
	}
	for i, r := range m.PluginReleases {
		pluginReleaseNext(stdout, filepath.Dir(runner.StateRoot), installRegistry, reg, &r, pluginKeys[i])
	}

	// The jobs, in order.
	dir := filepath.Join(bundlesDir, m.ID)
	resPath := filepath.Join(dir, "results.json")
	res := bundleResults{Bundle: m.ID, InstallID: m.InstallID, AgentID: m.AgentID, Revision: m.Revision, WorkflowKind: m.WorkflowKind}
	// The bundle's jobs, signed by imsd, go back with the results: imsd
	// records them from there.
	if err := atomicfile.Write(filepath.Join(dir, "jobs.json"), b, 0o600); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	// And the bundle itself, as imsd signed it: its manifest, signature
	// and view of the jobs go back too, so imsd ties the results to the
	// bundle it made (its id, install, agent, revision and jobs).
	sigB, err := json.Marshal(bundleSig)
	if err != nil {
		return err
	}
	for name, content := range map[string][]byte{bundleManifestFile: bdl.Raw, bundleSignatureFile: sigB, bundleViewFile: view} {
		if err := atomicfile.Write(filepath.Join(dir, name), content, 0o600); err != nil {
			return fmt.Errorf("results: %w", err)
		}
	}
	// The journal head imsd took last, as imsd signed it: the results
	// file carries the journal after it only.
	head, err := json.Marshal(journalHead{Seq: m.JournalSeq, Hash: m.JournalHash})
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, journalHeadFile), head, 0o600); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if b, err := os.ReadFile(resPath); err == nil {
		if err := json.Unmarshal(b, &res); err != nil {
			return fmt.Errorf("%s: %w", resPath, err)
		}
	}
	done := map[string]*jobResult{}
	for i := range res.Jobs {
		done[res.Jobs[i].Step] = &res.Jobs[i]
	}
	outputs := func(comp, out string) (string, bool) {
		for i := len(res.Jobs) - 1; i >= 0; i-- {
			if r := res.Jobs[i]; r.Component == comp && r.Outcome == "succeeded" {
				v, ok := r.Outputs[out]
				return v, ok
			}
		}
		return "", false
	}
	save := func() error {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		return atomicfile.Write(resPath, append(b, '\n'), 0o600)
	}
	runner.SandboxReadOnly = append(runner.SandboxReadOnly, staging)
	failed := 0
	for i := range jobs {
		j := &jobs[i]
		if r := done[j.Step]; r != nil && r.Outcome == "succeeded" {
			fmt.Fprintf(stdout, "  %-30s succeeded before (job %s)\n", j.Step, j.JobID)
			continue
		}
		if blocked := slices.IndexFunc(j.Needs, func(n string) bool { r := done[n]; return r == nil || r.Outcome != "succeeded" }); blocked >= 0 {
			fmt.Fprintf(stdout, "  %-30s not run: %s did not succeed\n", j.Step, j.Needs[blocked])
			failed++
			continue
		}
		r := jobResult{JobID: j.JobID, Step: j.Step, Component: j.Component, ComponentType: j.ComponentType, Operation: j.Operation, StartedAt: time.Now().UTC()}
		var rlog resultLog
		out, err := a.RunOffline(ctx, agent.OfflineJob{Bundle: m.ID, Job: j, Outputs: outputs, VendorRegistry: "oci:" + layout}, func(_ int32, text string) {
			rlog.add(text)
		})
		r.Log = rlog.done()
		if errors.Is(err, agent.ErrAlreadyRun) {
			fmt.Fprintf(stdout, "  %-30s not run: %v\n", j.Step, err)
			failed++
			continue
		}
		if err != nil {
			return err
		}
		r.EndedAt = time.Now().UTC()
		r.Outcome, r.ExitCode, r.Error, r.Outputs = outcomeWord(out.Outcome), out.ExitCode, out.Error, out.Outputs
		if prev := done[j.Step]; prev != nil {
			*prev = r
		} else {
			res.Jobs = append(res.Jobs, r)
			done[j.Step] = &res.Jobs[len(res.Jobs)-1]
			// done's pointers into res.Jobs move when it grows.
			for k := range res.Jobs {
				done[res.Jobs[k].Step] = &res.Jobs[k]
			}
		}
		if err := save(); err != nil {
			return fmt.Errorf("results: %w", err)
		}
		line := fmt.Sprintf("  %-30s %s", j.Step, r.Outcome)
		if r.Error != "" {
			line += ": " + r.Error
		}
		fmt.Fprintln(stdout, line)
		if r.Outcome != "succeeded" {
			failed++
		}
	}
	fmt.Fprintf(stdout, "results: %s\n", resPath)
	if failed > 0 {
		return fmt.Errorf("%d of %d steps did not succeed", failed, len(jobs))
	}
	return nil
}

// checkBundleManifest is the check of a bundle's manifest before
// anything else of it is read: signed by an imsd key this agent pinned,
// a bundle (not a results file), for this agent and install, of a
// bundle id as imsd makes them (its results are kept under it), and no
// older than a bundle imported here already (bundlesDir's bundles) nor
// than the newest job the agent accepted, online or from a bundle
// (newest): an older bundle, replayed, would roll the install back to
// what it carries. Its own id, again, resumes it (its jobs were made
// when it was). The times compared are imsd's, from the ids it made
// and signed (agentproto.IDTime), never the agent's clock.
func checkBundleManifest(keys map[string]ed25519.PublicKey, installID, agentID, bundlesDir string, newest agent.Newest, raw []byte, m *bundlefile.Manifest, sig bundlefile.Signature) error {
	if err := agentproto.VerifyBundleManifest(keys, sig.KeyID, raw, sig.Signature); err != nil {
		return err
	}
	if m.Kind != bundlefile.KindBundle {
		return fmt.Errorf("a %s file, not a bundle", m.Kind)
	}
	if m.InstallID != installID || m.AgentID != agentID {
		return fmt.Errorf("the bundle is for agent %s of install %s, and this is agent %s of install %s", m.AgentID, m.InstallID, agentID, installID)
	}
	if !agentproto.ValidBundleID(m.ID) {
		return fmt.Errorf("bundle id %q is not one imsd makes", m.ID)
	}
	ents, err := os.ReadDir(bundlesDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range slices.Backward(ents) { // sorted by name: newest last
		if agentproto.ValidBundleID(e.Name()) && e.Name() > m.ID {
			return fmt.Errorf("bundle %s was made before bundle %s, which was imported here already: an older bundle is not imported after a newer one (it would roll the install back)", m.ID, e.Name())
		}
	}
	made, _ := agentproto.IDTime(m.ID)
	if newest.JobID != "" && made.Before(newest.Made) {
		return fmt.Errorf("bundle %s was made by imsd at %s, before job %s (made at %s), which this agent accepted already: an older bundle is not imported after newer work (it would roll the install back); make a fresh bundle (byoc bundle create) and import that",
			m.ID, made.Format(time.RFC3339Nano), newest.JobID, newest.Made.Format(time.RFC3339Nano))
	}
	return nil
}

func outcomeWord(o agentv1.Outcome) string {
	return strings.ToLower(strings.TrimPrefix(o.String(), "OUTCOME_"))
}

// loadArtifacts copies every artifact the bundle's jobs read (images'
// sources, charts and modules by digest) from the bundle's layout root
// into the install registry, at the repository each job reads it from,
// but those refused says to leave out.
// A chart or module the bundle left out (the install held it when the
// bundle was made) must be in the install registry whole: otherwise
// nothing is loaded and the error names the step.
func loadArtifacts(ctx context.Context, jobs []agentproto.BundleJob, src bundleload.Source, reg ocicopy.Registry, creds ocicopy.Credentials, extra []bundleload.Load,
	refused func(*agentproto.BundleJob, agentproto.BundleArtifact) (bool, error)) (bundleload.LoadStats, error) {
	loads := slices.Clone(extra)
	seen := map[agentproto.BundleArtifact]bool{}
	held := 0
	for i := range jobs {
		j := &jobs[i]
		art, ok, err := j.Artifact()
		if err != nil {
			return bundleload.LoadStats{}, err
		}
		if !ok || seen[art] {
			continue
		}
		seen[art] = true
		dg := digest.Digest(art.Digest)
		if !ocicopy.ValidRepository(art.Repository) || dg.Validate() != nil || !src.Has(art.Repository, dg) {
			if j.ComponentType == agentproto.ImageType {
				return bundleload.LoadStats{}, fmt.Errorf("step %s: %s %s@%s is not in the bundle", j.Step, art.Field, art.Repository, dg)
			}
			if err := heldWhole(ctx, reg, creds, art); err != nil {
				return bundleload.LoadStats{}, fmt.Errorf("step %s: %s %s@%s is not in the bundle, and the install registry does not hold it whole: %w", j.Step, art.Field, art.Target, dg, err)
			}
			held++
			continue
		}
		if no, err := refused(j, art); err != nil {
			return bundleload.LoadStats{}, fmt.Errorf("step %s: %w", j.Step, err)
		} else if no {
			continue
		}
		loads = append(loads, bundleload.Load{Repository: art.Repository, Target: art.Target, Digest: dg})
	}
	st, err := bundleload.LoadImages(ctx, src, reg, creds, loads)
	st.Artifacts += held
	return st, err
}

// checkRelease checks the agent release (agentRel) or plugin release r
// of a bundle's layout: a release of the type and version the manifest
// names, signed by a key of imsd's this agent pinned (as agentd update
// apply and agentd plugin install require). It returns the signing key's
// id.
func checkRelease(ctx context.Context, a *agent.Agent, layout string, r *bundlefile.Release, agentRel bool) (string, error) {
	dg, err := digest.Parse(r.Digest)
	if err != nil {
		return "", err
	}
	if !ocicopy.ValidRepository(r.Repository) {
		return "", fmt.Errorf("repository %q is not a repository name", r.Repository)
	}
	repo, err := ocicopy.Open(ctx, ocicopy.Registry{LayoutRoot: layout}, r.Repository, ocicopy.Credentials{})
	if err != nil {
		return "", err
	}
	defer repo.Close()
	var rm *plugindist.Manifest
	if agentRel {
		rm, err = plugindist.ReadAgent(ctx, repo, dg)
	} else {
		rm, err = plugindist.Read(ctx, repo, dg)
	}
	if err != nil {
		return "", err
	}
	if rm.Version != r.Version || rm.Type != r.Type {
		return "", fmt.Errorf("the manifest names %s %s, the release is %s %s", r.Type, r.Version, rm.Type, rm.Version)
	}
	keys := a.IMSDKeys()
	trusted := make([]ed25519.PublicKey, 0, len(keys))
	for _, id := range slices.Sorted(maps.Keys(keys)) {
		trusted = append(trusted, keys[id])
	}
	sig, err := plugindist.Verify(ctx, repo, rm, trusted)
	if err != nil {
		return "", err
	}
	return sig, nil
}

// agentReleaseNext says what the customer's update policy makes of an
// agent release a bundle loaded, and the command that applies it. An
// import does not apply it: agentd update apply swaps the binaries this
// process runs from, and the update's confirmation is the new version's
// reconnection, which an install with no route to imsd never makes.
func agentReleaseNext(w io.Writer, stateDir, installRegistry string, reg ocicopy.Registry, r *bundlefile.Release, keyID string) {
	ref := ocicopy.Reference{Registry: reg, Repository: r.Repository, Digest: digest.Digest(r.Digest)}.String()
	if !reg.IsLayout() {
		ref = "oci://" + ref
	}
	fmt.Fprintf(w, "agent release %s (%s) loaded into the install registry, signed by imsd key %s; this agentd is %s\n", r.Version, r.Digest, keyID, buildinfo.Get().Short())
	st, err := permissions.Load(stateDir)
	if err != nil {
		fmt.Fprintf(w, "  the update policy: %v\n", err)
		return
	}
	if why := st.Update.Refusal(r.Version, time.Now(), true); why != "" {
		fmt.Fprintf(w, "  your update policy (%s) does not allow it now: %s; it stays in the install registry\n", st.Update, why)
		return
	}
	regFlag := ""
	if installRegistry != "oci:"+filepath.Join(stateDir, "registry") {
		regFlag = " --install-registry " + installRegistry
	}
	fmt.Fprintf(w, "  your update policy (%s) allows it; apply it with:\n  agentd update --state-dir %s%s apply %s\n", st.Update, stateDir, regFlag, ref)
}

// pluginReleaseNext prints the command that installs and pins a plugin
// release a bundle loaded (agentd plugin install, the customer's choice).
func pluginReleaseNext(w io.Writer, stateDir, installRegistry string, reg ocicopy.Registry, r *bundlefile.Release, keyID string) {
	ref := ocicopy.Reference{Registry: reg, Repository: r.Repository, Digest: digest.Digest(r.Digest)}.String()
	if !reg.IsLayout() {
		ref = "oci://" + ref
	}
	regFlag := ""
	if installRegistry != "oci:"+filepath.Join(stateDir, "registry") {
		regFlag = " --install-registry " + installRegistry
	}
	fmt.Fprintf(w, "plugin release %s %s (%s) loaded into the install registry, signed by imsd key %s; install and pin it with:\n  agentd plugin --state-dir %s%s install %s\n",
		r.Type, r.Version, r.Digest, keyID, stateDir, regFlag, ref)
}

// heldWhole checks that the install registry holds art's graph whole.
func heldWhole(ctx context.Context, reg ocicopy.Registry, creds ocicopy.Credentials, art agentproto.BundleArtifact) error {
	r, err := ocicopy.Open(ctx, reg, art.Target, creds)
	if err != nil {
		return err
	}
	defer r.Close()
	missing, err := ocicopy.Missing(ctx, r, digest.Digest(art.Digest), false)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d of its blobs are missing, %s the first", len(missing), missing[0].Descriptor.Digest)
	}
	return nil
}

// inventoryCmd prints the digests an oci: install registry holds.
func inventoryCmd(args []string, stdout, stderr io.Writer) int {
	var stateDir, registry string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "--state-dir" && i+1 < len(args):
			stateDir = args[i+1]
			i++
		case args[i] == "--install-registry" && i+1 < len(args):
			registry = args[i+1]
			i++
		default:
			fmt.Fprintf(stderr, "agentd bundle inventory: unexpected %q\n%s", args[i], bundleUsage)
			return 2
		}
	}
	if registry == "" && stateDir != "" {
		registry = "oci:" + filepath.Join(stateDir, "registry")
	}
	reg, err := ocicopy.ParseRegistry(registry)
	if err != nil {
		fmt.Fprintf(stderr, "agentd bundle inventory: --install-registry: %v\n", err)
		return 2
	}
	if !reg.IsLayout() {
		fmt.Fprintf(stderr, "agentd bundle inventory: %s is a registry server: list an oci: install registry (a server's inventory is not supported yet)\n", reg)
		return 2
	}
	seen := map[string]bool{}
	err = filepath.WalkDir(reg.LayoutRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || filepath.Base(filepath.Dir(p)) != "sha256" || filepath.Base(filepath.Dir(filepath.Dir(p))) != "blobs" {
			return nil
		}
		dg := "sha256:" + d.Name()
		if !seen[dg] {
			seen[dg] = true
			fmt.Fprintln(stdout, dg)
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(stderr, "agentd bundle inventory: %v\n", err)
		return 1
	}
	return 0
}
