package operatorapi

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/agentapi"
	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/workflow"
	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/internal/stagedir"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// The files of a results file (agentd bundle export-results).
const (
	resultsFileName = "results.json"
	journalFileName = "journal.jsonl"
	// The bundle's own manifest and imsd's signature of it, which the
	// agent kept when it imported the bundle.
	bundleManifestName  = "bundle-manifest.json"
	bundleSignatureName = "bundle-manifest.sig"
)

// kindResultsImported is the audit event of an imported results file; its
// data holds the agent's journal head, which the next import must
// continue.
const kindResultsImported = "bundle.results_imported"

// offlineResults is a results file's results.json.
type offlineResults struct {
	Bundle       string `json:"bundle"`
	InstallID    string `json:"install_id"`
	AgentID      string `json:"agent_id"`
	Revision     int64  `json:"revision"`
	WorkflowKind string `json:"workflow_kind"`
	Jobs         []struct {
		JobID     string            `json:"job_id"`
		Step      string            `json:"step"`
		Outcome   string            `json:"outcome"`
		ExitCode  int32             `json:"exit_code"`
		Error     string            `json:"error"`
		Outputs   map[string]string `json:"outputs"`
		Log       []string          `json:"log"`
		StartedAt time.Time         `json:"started_at"`
		EndedAt   time.Time         `json:"ended_at"`
	} `json:"jobs"`
}

// resultsStaging is the folders results imports unpack into
// (internal/stagedir).
var resultsStaging = stagedir.Kind{Prefix: "byoc-results-", Noun: "results import"}

// jobStates maps the agent's outcome words to job states.
var jobStates = map[string]store.JobState{"succeeded": store.JobSucceeded, "failed": store.JobFailed, "refused": store.JobRefused,
	"cancelled": store.JobCancelled, "timed_out": store.JobTimedOut, "timed out": store.JobTimedOut}

// ImportBundleResults implements byoc bundle import-results.
func (s *Service) ImportBundleResults(ctx context.Context, req *connect.Request[imsv1.ImportBundleResultsRequest]) (*connect.Response[imsv1.ImportBundleResultsResponse], error) {
	out, err := s.importResults(ctx, req.Msg.Install, bytes.NewReader(req.Msg.File), sha256.Sum256(req.Msg.File))
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(out), nil
}

// importResults checks and records the results file file (whose SHA-256
// is sum) of install: ImportBundleResults has it in its one message,
// UploadBundleResults staged its parts.
func (s *Service) importResults(ctx context.Context, install string, file io.Reader, sum [sha256.Size]byte) (*imsv1.ImportBundleResultsResponse, error) {
	e, err := s.engine()
	if err != nil {
		return nil, err
	}
	in, err := s.store.GetInstall(ctx, install)
	if err != nil {
		return nil, err
	}
	// The file's small files are unpacked into a staging folder locked
	// while this import runs: one an imsd killed mid-check left (on
	// this host, by any imsd) goes before this one is made.
	stage, err := resultsStaging.Stage(os.TempDir(), func(msg string) { s.log.WarnContext(ctx, msg) })
	if err != nil {
		return nil, err
	}
	defer stage.Close()
	tmp := stage.Path
	var agent store.Agent
	man, _, err := bundlefile.Read(file, filepath.Join(tmp, "r"), func(raw []byte, man *bundlefile.Manifest, sig bundlefile.Signature) error {
		if man.Kind != bundlefile.KindResults {
			return fmt.Errorf("a %s file, not a results file (agentd bundle export-results)", man.Kind)
		}
		if man.InstallID != in.ID {
			return fmt.Errorf("the results are of install %s, not %s (%s)", man.InstallID, in.Name, in.ID)
		}
		if !agentproto.ValidBundleID(man.ID) {
			return fmt.Errorf("bundle id %q is not one imsd makes", man.ID)
		}
		a, err := s.store.GetAgent(ctx, man.AgentID)
		if err != nil {
			return err
		}
		if a.InstallID != in.ID {
			return fmt.Errorf("agent %s is not an agent of install %s", a.ID, in.Name)
		}
		for _, k := range [][]byte{a.PublicKey, a.NextPublicKey} {
			if len(k) == ed25519.PublicKeySize && agentproto.VerifyBundleResults(k, raw, sig.Signature) {
				agent = a
				return nil
			}
		}
		return fmt.Errorf("the signature is not agent %s's (tampered with, or signed by another key)", a.ID)
	})
	if err != nil {
		return nil, errs.E(errs.Invalid, "results file refused, nothing was recorded: %v", err)
	}
	dir := filepath.Join(tmp, "r")
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, errs.E(errs.Invalid, "results file refused, nothing was recorded: %s: %v", name, err)
		}
		return b, nil
	}
	resB, err := read(resultsFileName)
	if err != nil {
		return nil, err
	}
	var res offlineResults
	if err := json.Unmarshal(resB, &res); err != nil {
		return nil, errs.E(errs.Invalid, "results file refused, nothing was recorded: %s: %v", resultsFileName, err)
	}
	if res.Bundle != man.ID || res.AgentID != agent.ID || res.InstallID != in.ID {
		return nil, errs.E(errs.Invalid, "results file refused, nothing was recorded: %s names bundle %s of agent %s, the manifest %s of agent %s", resultsFileName, res.Bundle, res.AgentID, man.ID, agent.ID)
	}
	// The jobs came back sealed to the imsd key that signed them (they
	// carry the install's sensitive values; jobs.json is their masked
	// view): the current key, or one it replaced (a bundle made before
	// imsd key rotate) within auth.PreviousKeyUse of that rotation. A key
	// imsd never held, or replaced longer ago, opens nothing.
	sealedB, err := read(BundleSealedJobsFile)
	if err != nil {
		return nil, err
	}
	now := s.now()
	held := []auth.SigningKey{s.cfg.SigningKey}
	var past []string
	for _, k := range s.cfg.PreviousSigningKeys {
		if k.Private != nil && k.UsableAt(now) {
			held = append(held, k.SigningKey)
		} else {
			past = append(past, fmt.Sprintf("%s (replaced %s, used until %s)", k.ID, k.ReplacedAt.UTC().Format(time.RFC3339), k.UsableUntil().UTC().Format(time.RFC3339)))
		}
	}
	var jobsB []byte
	var openErr error
	opened := -1
	for i, k := range held {
		if jobsB, openErr = agentchannel.OpenWith(k.Private, agentproto.ResultsJobsInfo(in.ID, agent.ID), sealedB); openErr == nil {
			opened = i
			break
		}
	}
	if openErr != nil {
		ids := make([]string, len(held))
		for i, k := range held {
			ids[i] = k.ID
		}
		msg := fmt.Sprintf("results file refused, nothing was recorded: %s opens with no key this imsd holds (%s; %v): sealed by another agent, to a key this imsd never held, or changed", BundleSealedJobsFile, strings.Join(ids, ", "), openErr)
		if len(past) > 0 {
			msg += fmt.Sprintf("; or to a key replaced longer ago than imsd keeps using one (%d days after imsd key rotate: a bundle's longest validity and a margin to carry its results back), which this imsd no longer uses: %s", int(auth.PreviousKeyUse/(24*time.Hour)), strings.Join(past, ", "))
		}
		return nil, errs.E(errs.Invalid, "%s", msg)
	}
	if opened > 0 {
		k := s.cfg.PreviousSigningKeys[slices.IndexFunc(s.cfg.PreviousSigningKeys, func(p auth.PreviousKey) bool { return p.ID == held[opened].ID })]
		s.log.InfoContext(ctx, "results of a bundle signed before a key rotation opened with the previous key", "install", in.Name, "bundle", man.ID,
			"key", k.ID, "replaced", k.ReplacedAt.UTC().Format(time.RFC3339), "used_until", k.UsableUntil().UTC().Format(time.RFC3339))
	}
	var jobs []agentproto.BundleJob
	if err := json.Unmarshal(jobsB, &jobs); err != nil {
		return nil, errs.E(errs.Invalid, "results file refused, nothing was recorded: %s: %v", BundleSealedJobsFile, err)
	}
	// Only jobs imsd signed for this agent, with a key it held; expired
	// signatures are fine: they ran before (the journal says when).
	keys := map[string]ed25519.PublicKey{}
	for _, k := range held {
		keys[k.ID] = k.Public
	}
	cfgs := make([]map[string]any, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		cfg, err := j.DecodeConfig()
		if err == nil {
			var c agentproto.JobClaims
			if c, err = j.Claims(agent.ID, cfg); err == nil {
				err = agentproto.VerifyJob(keys, &c, j.Signature, time.UnixMilli(j.ExpireUnixMs))
			}
		}
		if err != nil || j.InstallID != in.ID {
			return nil, errs.E(errs.Invalid, "results file refused, nothing was recorded: %s: job %s (step %s) is not one this imsd signed for agent %s: %v", BundleJobsFile, j.JobID, j.Step, agent.ID, err)
		}
		cfgs[i] = cfg
	}
	if err := checkResultsBundle(keys, in, agent.ID, man.ID, res, jobs, dir); err != nil {
		return nil, errs.E(errs.Invalid, "results file refused, nothing was recorded: %v", err)
	}
	// The agent's journal: whole, chained, and continuing what an
	// earlier import took. Read as it streams from the file: it may be
	// most of a file of hundreds of MiB.
	jf, err := os.Open(filepath.Join(dir, journalFileName))
	if err != nil {
		return nil, errs.E(errs.Invalid, "results file refused, nothing was recorded: %s: %v", journalFileName, err)
	}
	defer jf.Close()
	prevSeq, prevHash, newest, err := s.lastImport(ctx, in.ID, agent.ID)
	if err != nil {
		return nil, err
	}
	jr, err := parseJournal(jf, "agent:"+agent.ID, prevSeq, prevHash, man.ID)
	if err != nil {
		return nil, errs.E(errs.Invalid, "results file refused, nothing was recorded: %s: %v", journalFileName, err)
	}
	// A journal from record 1 (or any record up to the head imported
	// before: older agents, a bundle made before the last import) must
	// hold that head; one starting after it was chained to it above.
	if prevSeq > 0 && jr.first <= prevSeq && jr.atHead != prevHash {
		return nil, errs.E(errs.Invalid, "results file refused, nothing was recorded: %s: the agent's journal does not continue the one imported before (record %d had hash %s)", journalFileName, prevSeq, prevHash)
	}
	finished := jr.finished
	byJob := map[string]int{}
	for i, j := range jobs {
		byJob[j.JobID] = i
	}
	for _, r := range res.Jobs {
		i, ok := byJob[r.JobID]
		if !ok || jobs[i].Step != r.Step {
			return nil, errs.E(errs.Invalid, "results file refused, nothing was recorded: %s: job %s (step %s) is not a job of bundle %s", resultsFileName, r.JobID, r.Step, man.ID)
		}
		if _, ok := jobStates[r.Outcome]; !ok {
			return nil, errs.E(errs.Invalid, "results file refused, nothing was recorded: %s: job %s: outcome %q", resultsFileName, r.JobID, r.Outcome)
		}
		d := finished[r.JobID]
		if d == nil || d["outcome"] != strings.ReplaceAll(r.Outcome, "_", " ") {
			return nil, errs.E(errs.Invalid, "results file refused, nothing was recorded: %s: job %s's result (%s) is not what the agent's journal recorded (%s)", resultsFileName, r.JobID, r.Outcome, d["outcome"])
		}
	}
	head := jr.head
	out := &imsv1.ImportBundleResultsResponse{BundleId: man.ID, WorkflowId: "wf_" + strings.TrimPrefix(man.ID, "bdl_"), Jobs: int32(len(res.Jobs)),
		JournalRecords: head.Seq, JournalHash: head.Hash}
	// added, for a bundle imported before, are the steps this file (a
	// later one of the bundle) ran that imsd holds as not run or
	// refused, true for a refused job run again; nil: a first import.
	var added map[string]bool
	if wf, steps, err := s.store.GetWorkflow(ctx, out.WorkflowId); err == nil {
		if added, err = s.newResults(ctx, man.ID, wf, steps, res); err != nil {
			return nil, err
		}
		if len(added) == 0 {
			out.AlreadyImported, out.WorkflowState = true, workflowStatesToProto[wf.State]
			return out, nil
		}
	} else if !errs.Is(err, errs.NotFound) {
		return nil, err
	}
	// Results in the order their bundles were made: those of an older
	// bundle, after a newer one's, would set the install back to what
	// the older one deployed, though the newer one ran after it.
	if newest > man.ID {
		return nil, errs.E(errs.Conflict, "results file refused, nothing was recorded: bundle %s was made before bundle %s, whose results were imported already: results of an older bundle would set the install back to what it deployed", man.ID, newest)
	}

	// Record it as the online path would have: the workflow, each step's
	// job and result, what the install runs, the install's state.
	now = s.now()
	kind := cmp.Or(res.WorkflowKind, workflow.Provision)
	wf := store.Workflow{ID: out.WorkflowId, InstallID: in.ID, Kind: kind, AppRevision: res.Revision, Parallelism: 1, CreatedAt: now,
		CreatedBy: "bundle " + man.ID, Reason: "offline bundle " + man.ID + " run by agent " + agent.ID}
	steps := make([]store.Step, len(jobs))
	for i, j := range jobs {
		steps[i] = store.Step{Name: j.Step, Component: j.Component, ComponentType: j.ComponentType, Operation: j.Operation, Needs: j.Needs,
			Config: j.Config, Timeout: time.Duration(j.TimeoutSeconds) * time.Second, Reason: "offline bundle " + man.ID}
		if j.Component == "" {
			steps[i].Action = j.Step
		}
	}
	rec := store.OfflineWorkflow{Workflow: wf, Steps: steps, AgentID: agent.ID, NotRunMsg: "not run on the agent", Now: now}
	ran := map[string]bool{}
	failed := []string{}
	// The jobs' configs as the agent ran them: output references filled
	// in from the results before them, as imsd fills them in online.
	outputs := map[string]map[string]string{}
	lookup := func(comp, name string) (string, bool) {
		v, ok := outputs[comp][name]
		return v, ok
	}
	for _, r := range res.Jobs {
		i := byJob[r.JobID]
		j, st := jobs[i], steps[i]
		config := j.Config
		if rendered, err := agentproto.RenderOutputs(cfgs[i], lookup); err == nil {
			if b, err := json.Marshal(rendered); err == nil {
				config = b
			}
		}
		if jobStates[r.Outcome] == store.JobSucceeded && j.Component != "" {
			outputs[j.Component] = r.Outputs
		}
		sj := store.Job{ID: j.JobID, InstallID: in.ID, ComponentType: j.ComponentType, Operation: j.Operation, Component: j.Component,
			Config: config, MaxAttempts: 1, Timeout: st.Timeout, CreatedAt: now, CreatedBy: "bundle " + man.ID, Mode: store.Mode(j.Mode)}
		state := jobStates[r.Outcome]
		logs, leftOut := importedLog(r.Log, r.EndedAt)
		// The error is cut as a live agent's result's is.
		rerr := agentapi.CutUTF8(r.Error, agentapi.MaxLogLineBytes)
		step := store.OfflineStep{Name: j.Step, Job: sj, Result: store.Result{State: state, ExitCode: int(r.ExitCode), Error: rerr, Outputs: r.Outputs},
			Logs: logs, LeftOut: leftOut, Started: r.StartedAt, Ended: r.EndedAt, StepState: store.StepFailed, Msg: rerr}
		if state == store.JobSucceeded {
			step.StepState, step.Msg = store.StepSucceeded, ""
			if j.Component != "" && j.Operation == workflow.OpApply {
				sj.Outputs = r.Outputs
				d, err := e.BundleDeployed(ctx, wf, st, sj)
				if err != nil {
					return nil, err
				}
				step.Deployed = &d
			}
			if j.Operation == workflow.OpDestroy {
				step.Removed = j.Component
			}
		} else {
			failed = append(failed, j.Step+" "+string(state))
		}
		if added == nil || added[j.Step] {
			rec.Ran = append(rec.Ran, step)
		}
		ran[j.Step] = true
	}
	for _, j := range jobs {
		if !ran[j.Step] {
			rec.NotRun = append(rec.NotRun, j.Step)
		}
	}
	failed = append(failed, rec.NotRun...)
	state, installState, msg := store.WorkflowSucceeded, store.InstallActive, ""
	if len(failed) > 0 {
		state, installState, msg = store.WorkflowFailed, store.InstallFailed, "steps not succeeded: "+strings.Join(failed, ", ")
	}
	rec.State, rec.InstallState, rec.Msg = state, installState, msg
	rec.Audit = store.AuditEvent{Chain: in.ID, At: now, Kind: kindResultsImported, Actor: "imsd", Subject: "bundle:" + man.ID,
		Data: map[string]string{"agent": agent.ID, "workflow": wf.ID, "journal_seq": strconv.FormatInt(head.Seq, 10), "journal_hash": head.Hash,
			"results_sha256": hex.EncodeToString(sum[:]), "jobs": strconv.Itoa(len(res.Jobs))}}
	if added != nil {
		// The steps run after the results imsd holds, in one
		// transaction likewise.
		err := s.store.RecordOfflineRerun(ctx, store.OfflineRerun{WorkflowID: wf.ID, AgentID: agent.ID, Ran: rec.Ran, Rerun: added,
			State: state, Msg: msg, InstallState: installState, Revision: res.Revision, Audit: rec.Audit, Now: now})
		if errs.Is(err, errs.Conflict) {
			return nil, errs.E(errs.Conflict, "results file refused, nothing was recorded: %v", err)
		}
		if err != nil {
			return nil, err
		}
		s.hub.FleetChanged()
		out.WorkflowState, out.AddedJobs = workflowStatesToProto[state], int32(len(rec.Ran))
		return out, nil
	}
	// All of it in one transaction, or nothing: the workflow engine
	// would start the pending steps of a workflow half recorded online,
	// and a failed import must leave nothing a later one takes for done.
	switch err := s.store.RecordOfflineWorkflow(ctx, rec); {
	case errs.Is(err, errs.Conflict):
		return nil, errs.E(errs.Conflict, "results file not recorded: install %s has a workflow running or awaiting approval: let it end, then import the results again", in.Name)
	case errs.Is(err, errs.AlreadyExists):
		// Another import of the same bundle won the race.
		out.AlreadyImported = true
		if wf, steps, err := s.store.GetWorkflow(ctx, out.WorkflowId); err == nil {
			if added, err := s.newResults(ctx, man.ID, wf, steps, res); err != nil {
				return nil, err
			} else if len(added) > 0 {
				return nil, errs.E(errs.Conflict, "results file not recorded: another import of bundle %s's results ran at the same time: import this file again", man.ID)
			}
			out.WorkflowState = workflowStatesToProto[wf.State]
		}
		return out, nil
	case err != nil:
		return nil, err
	}
	s.hub.FleetChanged()
	out.WorkflowState = workflowStatesToProto[state]
	return out, nil
}

// newResults compares res, a results file of bundle whose workflow wf
// (its steps steps) imsd recorded from an earlier file, with the results
// imsd holds: it returns the steps the file adds (true for a job the
// agent refused then, run again at a later import of the bundle; false
// for a step not run then), and refuses a file that contradicts a result
// imsd holds, naming each job: a result imported is never changed.
func (s *Service) newResults(ctx context.Context, bundle string, wf store.Workflow, steps []store.Step, res offlineResults) (map[string]bool, error) {
	byName := map[string]store.Step{}
	for _, st := range steps {
		byName[st.Name] = st
	}
	added := map[string]bool{}
	var diffs []string
	for _, r := range res.Jobs {
		st, ok := byName[r.Step]
		want := jobStates[r.Outcome]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("job %s (step %s) %s in this file, and imsd's workflow %s has no such step", r.JobID, r.Step, r.Outcome, wf.ID))
		case st.JobID == "" && (st.State == store.StepSkipped || st.State == store.StepCancelled):
			added[r.Step] = false
		case st.JobID == "":
			diffs = append(diffs, fmt.Sprintf("job %s (step %s) %s in this file, and imsd holds the step %s", r.JobID, r.Step, r.Outcome, st.State))
		case st.JobID != r.JobID:
			diffs = append(diffs, fmt.Sprintf("job %s (step %s) %s in this file, and imsd holds job %s for the step", r.JobID, r.Step, r.Outcome, st.JobID))
		default:
			j, err := s.store.GetJob(ctx, st.JobID)
			if err != nil {
				return nil, err
			}
			switch {
			case j.State == want:
			case j.State == store.JobRefused:
				// Refused by the customer's controls, so never run:
				// the agent runs it at a later import once allowed.
				added[r.Step] = true
			default:
				diffs = append(diffs, fmt.Sprintf("job %s (step %s) %s in this file, and imsd holds it %s", r.JobID, r.Step, r.Outcome, j.State))
			}
		}
	}
	if len(diffs) > 0 {
		return nil, errs.E(errs.Conflict, "results file refused, nothing was recorded: the results of bundle %s were imported before (workflow %s, %s), and this later file of it contradicts them: %s; a result imported is never changed",
			bundle, wf.ID, wf.State, strings.Join(diffs, "; "))
	}
	return added, nil
}

// checkResultsBundle checks a results file (unpacked in dir; of bundle
// id by its agent-signed manifest, results res, its jobs opened) against
// the bundle it is of, as imsd signed it (its manifest, kept by the
// agent): signed by a key this imsd holds (keys), a bundle of that id for
// this install and agent, of the revision and workflow kind results.json
// names, and whose view of its jobs (jobs.json, by the digest the
// manifest lists) is the view of the jobs the file carries. So the file
// can neither claim another revision, nor bring jobs of another bundle
// (or online ones) as this one's: imsd stores nothing of a bundle when
// it makes it, its signature is the record.
func checkResultsBundle(keys map[string]ed25519.PublicKey, in store.Install, agentID, id string, res offlineResults, jobs []agentproto.BundleJob, dir string) error {
	raw, err := os.ReadFile(filepath.Join(dir, bundleManifestName))
	if err != nil {
		return fmt.Errorf("%s: %w: the file carries no copy of bundle %s as imsd signed it, so its results cannot be checked against it (an agentd before this check exported it: import the bundle again with a current agentd, which runs no job twice, and export the results again)", bundleManifestName, err, id)
	}
	sigB, err := os.ReadFile(filepath.Join(dir, bundleSignatureName))
	if err != nil {
		return fmt.Errorf("%s: %w", bundleSignatureName, err)
	}
	var sig bundlefile.Signature
	if err := json.Unmarshal(sigB, &sig); err != nil {
		return fmt.Errorf("%s: %w", bundleSignatureName, err)
	}
	if err := agentproto.VerifyBundleManifest(keys, sig.KeyID, raw, sig.Signature); err != nil {
		return fmt.Errorf("%s: %w", bundleManifestName, err)
	}
	var bm bundlefile.Manifest
	if err := json.Unmarshal(raw, &bm); err != nil {
		return fmt.Errorf("%s: %w", bundleManifestName, err)
	}
	switch {
	case bm.Kind != bundlefile.KindBundle:
		return fmt.Errorf("%s: a %s manifest, not a bundle's", bundleManifestName, bm.Kind)
	case bm.ID != id:
		return fmt.Errorf("%s: the results are of bundle %s, and the bundle manifest carried is bundle %s's", bundleManifestName, id, bm.ID)
	case bm.InstallID != in.ID || bm.AgentID != agentID:
		return fmt.Errorf("%s: bundle %s was made for agent %s of install %s, and the results are agent %s's of install %s (%s)", bundleManifestName, bm.ID, bm.AgentID, bm.InstallID, agentID, in.Name, in.ID)
	case res.Revision != bm.Revision || res.WorkflowKind != bm.WorkflowKind:
		return fmt.Errorf("%s: names revision %d (%s workflow), and bundle %s is of revision %d (%s workflow), as imsd signed it", resultsFileName, res.Revision, res.WorkflowKind, bm.ID, bm.Revision, bm.WorkflowKind)
	}
	view, err := os.ReadFile(filepath.Join(dir, BundleJobsFile))
	if err != nil {
		return fmt.Errorf("%s: %w", BundleJobsFile, err)
	}
	sum := sha256.Sum256(view)
	listed := slices.IndexFunc(bm.Files, func(f bundlefile.File) bool { return f.Path == BundleJobsFile })
	if listed < 0 || bm.Files[listed].SHA256 != hex.EncodeToString(sum[:]) {
		return fmt.Errorf("%s: not the jobs of bundle %s (its manifest lists another, or none)", BundleJobsFile, bm.ID)
	}
	if err := agentproto.CheckBundleJobsView(view, jobs); err != nil {
		return fmt.Errorf("the jobs are not bundle %s's: %w", bm.ID, err)
	}
	return nil
}

// importedLog is the log lines of an imported job (its results' log,
// at ended), held to the limits of a live agent's log batch: each line
// at most agentapi.MaxLogLineBytes (a longer one is cut, and says so),
// and at most agentapi.MaxLogBatch lines and agentapi.MaxLogBatchBytes
// of text in all; the lines past those are left out, and a last line
// (from imsd) says how many. A results file is the agent's (or the
// customer's, who holds its key) to write: nothing in it makes imsd
// store more of a job's log than a live agent could send in one batch.
// It returns how many lines it left out too, which the store counts in
// byoc_job_log_lines_dropped_total once the step is recorded.
func importedLog(texts []string, at time.Time) ([]store.LogLine, int64) {
	cutMark := fmt.Sprintf(" [imsd: line cut, over the %d KiB a log line may have]", agentapi.MaxLogLineBytes>>10)
	logs := make([]store.LogLine, 0, min(len(texts), agentapi.MaxLogBatch))
	size, left, leftBytes := 0, 0, 0
	for _, text := range texts {
		if len(text) > agentapi.MaxLogLineBytes {
			text = agentapi.CutUTF8(text, agentapi.MaxLogLineBytes-len(cutMark)) + cutMark
		}
		// Room is kept for the note, if one is needed; from the first
		// line left out on, all are.
		if left > 0 || len(logs) >= agentapi.MaxLogBatch-1 || size+len(text) > agentapi.MaxLogBatchBytes-1024 {
			left++
			leftBytes += len(text)
			continue
		}
		stream := 1
		if strings.HasPrefix(text, "[agentd] ") {
			stream = 3
		}
		size += len(text)
		logs = append(logs, store.LogLine{Seq: int64(len(logs) + 1), Time: at, Stream: stream, Text: text})
	}
	if left > 0 {
		logs = append(logs, store.LogLine{Seq: int64(len(logs) + 1), Time: at, Stream: 3,
			Text: fmt.Sprintf("[imsd] %d more log lines (%d bytes) of this job were left out: imsd keeps of an imported job's log what a live agent sends in one batch, %d lines and %d MiB",
				left, leftBytes, agentapi.MaxLogBatch, agentapi.MaxLogBatchBytes>>20)})
	}
	return logs, int64(left)
}

// journalRead is what an import takes from an agent's journal.
type journalRead struct {
	// first is the first record's number; head the last record.
	first int64
	head  auditchain.Record
	// atHead is the hash of the record numbered as the head imported
	// before ("" when the journal does not hold it).
	atHead string
	// finished is the data of the bundle's bundle.job.finished records,
	// by job id.
	finished map[string]map[string]string
}

// parseJournal reads an agent's journal (JSON lines of auditchain.Record)
// as it streams, keeping only what an import needs of it, and checks
// that it is one chain named chain: whole (from record 1), or
// continuing the head an earlier import took (record headSeq, hash
// headHash; 0, "": none), or starting at or before that head (the
// caller checks the head's record, atHead).
func parseJournal(rd io.Reader, chain string, headSeq int64, headHash, bundle string) (journalRead, error) {
	out := journalRead{finished: map[string]map[string]string{}}
	var v auditchain.Verifier
	var prev auditchain.Record
	n := 0
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var r auditchain.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return out, fmt.Errorf("line %d: %w", line, err)
		}
		if r.Chain != chain {
			return out, fmt.Errorf("line %d: chain %q, want %q", line, r.Chain, chain)
		}
		first := n == 0
		if first {
			out.first = r.Seq
		}
		switch {
		case out.first == 1:
			if p := v.Add(r); p != nil {
				return out, p
			}
		case first && (headSeq == 0 || r.Seq < 1 || r.Seq > headSeq+1):
			return out, fmt.Errorf("the journal starts at record %d, and imsd holds the agent's journal up to record %d only: records %d to %d are missing", r.Seq, headSeq, headSeq+1, r.Seq-1)
		case first && r.Seq == headSeq+1 && r.Prev != headHash:
			return out, fmt.Errorf("record %d: changed: its prev is not the hash %s of record %d, imported before", r.Seq, headHash, headSeq)
		case !first && r.Seq != prev.Seq+1:
			return out, fmt.Errorf("record %d: the chain goes from record %d to record %d", prev.Seq+1, prev.Seq, r.Seq)
		case !first && r.Prev != prev.Hash:
			return out, fmt.Errorf("record %d: changed: its prev is not the hash of the record before it", r.Seq)
		case auditchain.Hash(r) != r.Hash:
			return out, fmt.Errorf("record %d: changed: its content does not match its hash", r.Seq)
		}
		if r.Seq == headSeq {
			out.atHead = r.Hash
		}
		if r.Kind == "bundle.job.finished" {
			var d map[string]string
			if json.Unmarshal([]byte(r.Data), &d) == nil && d["bundle"] == bundle {
				out.finished[strings.TrimPrefix(r.Subject, "job:")] = d
			}
		}
		// Only the chain's fields are kept of the record before.
		prev = auditchain.Record{Seq: r.Seq, Hash: r.Hash}
		out.head = r
		n++
	}
	if err := sc.Err(); err != nil {
		return out, err
	}
	if n == 0 {
		return out, fmt.Errorf("no records")
	}
	return out, nil
}

// lastImport is what the install's imported results files recorded: the
// agent's journal head the last one of agentID's recorded (0, "": none),
// and the newest bundle whose results were imported ("": none).
func (s *Service) lastImport(ctx context.Context, installID, agentID string) (seq int64, hash, newest string, err error) {
	evs, err := s.store.ListAuditEvents(ctx, store.AuditFilter{Chain: installID, OneChain: true})
	if err != nil {
		return 0, "", "", err
	}
	for _, ev := range slices.Backward(evs) {
		if ev.Kind != kindResultsImported {
			continue
		}
		newest = max(newest, strings.TrimPrefix(ev.Subject, "bundle:"))
		if hash == "" && ev.Data["agent"] == agentID {
			seq, _ = strconv.ParseInt(ev.Data["journal_seq"], 10, 64)
			hash = ev.Data["journal_hash"]
		}
	}
	return seq, hash, newest, nil
}
