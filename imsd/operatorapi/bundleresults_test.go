package operatorapi

import (
	"archive/tar"
	"bytes"
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
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/agentapi"
	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/workflow"
	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// resultsFiles are results files as agentd bundle export-results writes
// them, by bundle id: agent agentID (key agentKey) of inst-1 ran each
// bundle's one action job (signed by imsd's key), in the order given,
// and each succeeded; every file carries the agent's whole journal.
func resultsFiles(t *testing.T, key auth.SigningKey, agentID string, agentKey ed25519.PrivateKey, t0 time.Time, bundleIDs ...string) map[string][]byte {
	t.Helper()
	return resultsFilesWith(t, key, agentID, agentKey, t0, journalShape{}, bundleIDs...)
}

// journalShape shapes the journal resultsFilesWith writes: pad[id]
// records of padBytes each before bundle id's, and each bundle's file
// carrying only its journal's records from from[id] on (0: all);
// edit, if set, edits the journal's records of a file before it is
// signed; ownOnly ends each file's journal at its bundle's records
// (exported right after the bundle ran), not at the last bundle's;
// sealTo, if set, is the imsd key the jobs go back sealed to (else the
// key that signed them).
type journalShape struct {
	sealTo   ed25519.PublicKey
	ownOnly  bool
	pad      map[string]int
	padBytes int
	from     map[string]int64
	edit     func(id string, rs []auditchain.Record) []auditchain.Record
	// outcomes, if set for a bundle, are its job's runs' outcomes, in
	// order (a step refused, then re-run); the results carry the last.
	outcomes map[string][]string
	// bundle, if set, changes a file's parts before they are written.
	bundle func(id string, p *resultsParts)
}

// resultsParts are what resultsFilesWith writes into a results file:
// the bundle's manifest as imsd signed it (nil: the file carries none,
// as an older agentd's), the jobs the file sends back, and its
// results.json.
type resultsParts struct {
	manifest *bundlefile.Manifest
	jobs     []agentproto.BundleJob
	results  map[string]any
	// signer, if set, signs the manifest instead of imsd's key (under
	// imsd's key id).
	signer ed25519.PrivateKey
}

// runsOf is the outcomes of bundle id's job's runs under sh.
func runsOf(sh journalShape, id string) []string {
	if o := sh.outcomes[id]; len(o) > 0 {
		return o
	}
	return []string{"succeeded"}
}

// resultsFilesWith is resultsFiles with the journal shaped by sh.
func resultsFilesWith(t *testing.T, key auth.SigningKey, agentID string, agentKey ed25519.PrivateKey, t0 time.Time, sh journalShape, bundleIDs ...string) map[string][]byte {
	t.Helper()
	var journal []auditchain.Record
	var prev *auditchain.Record
	jobs := map[string]agentproto.BundleJob{}
	ends := map[string]int{}
	for _, id := range bundleIDs {
		for range sh.pad[id] {
			r := auditchain.Record{Kind: "agent.padding", Subject: "agent:" + agentID, Data: `{"x":"` + strings.Repeat("x", sh.padBytes) + `"}`,
				Chain: "agent:" + agentID, At: t0.UnixNano(), Actor: "agent:" + agentID}
			r = auditchain.Next(prev, r)
			prev = &r
			journal = append(journal, r)
		}
		job := agentproto.BundleJob{Step: "hello", JobID: "job_" + strings.TrimPrefix(id, "bdl_"), InstallID: "inst-1", Attempt: 1, FencingToken: 1,
			Mode: "maintenance", ComponentType: "action", Operation: "apply", TimeoutSeconds: 60, Config: json.RawMessage(`{"command":"echo hi"}`)}
		cfg, _ := job.DecodeConfig()
		c, err := job.Claims(agentID, cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.Expires = t0.Add(time.Hour)
		job.Signature, job.KeyID, job.ExpireUnixMs = key.Sign(&c), key.ID, c.Expires.UnixMilli()
		jobs[id] = job
		for _, o := range runsOf(sh, id) {
			for _, r := range []auditchain.Record{
				{Kind: "bundle.job.started", Subject: "job:" + job.JobID, Data: `{"bundle":"` + id + `"}`},
				{Kind: "bundle.job.finished", Subject: "job:" + job.JobID, Data: `{"bundle":"` + id + `","outcome":"` + o + `"}`},
			} {
				r.Chain, r.At, r.Actor = "agent:"+agentID, t0.UnixNano(), "agent:"+agentID
				r = auditchain.Next(prev, r)
				prev = &r
				journal = append(journal, r)
			}
		}
		ends[id] = len(journal)
	}
	out := map[string][]byte{}
	for _, id := range bundleIDs {
		job := jobs[id]
		view, err := agentproto.BundleJobsView([]agentproto.BundleJob{job})
		if err != nil {
			t.Fatal(err)
		}
		vb, _ := json.MarshalIndent(view, "", "  ")
		vb = append(vb, '\n')
		vsum := sha256.Sum256(vb)
		p := resultsParts{
			manifest: &bundlefile.Manifest{Format: bundlefile.Format, Kind: bundlefile.KindBundle, ID: id, InstallID: "inst-1", AgentID: agentID, Revision: 1,
				WorkflowKind: "update", Created: t0, Files: []bundlefile.File{{Path: BundleJobsFile, Size: int64(len(vb)), SHA256: hex.EncodeToString(vsum[:])}}},
			jobs: []agentproto.BundleJob{job},
			results: map[string]any{"bundle": id, "install_id": "inst-1", "agent_id": agentID, "revision": 1, "workflow_kind": "update",
				"jobs": []map[string]any{{"job_id": job.JobID, "step": "hello", "outcome": runsOf(sh, id)[len(runsOf(sh, id))-1], "log": []string{"hi"},
					"started_at": t0, "ended_at": t0.Add(time.Second)}}},
		}
		if sh.bundle != nil {
			sh.bundle(id, &p)
		}
		b, _ := json.Marshal(p.jobs)
		sealTo := key.Public
		if sh.sealTo != nil {
			sealTo = sh.sealTo
		}
		sealed, err := agentchannel.SealTo(sealTo, agentproto.ResultsJobsInfo("inst-1", agentID), b)
		if err != nil {
			t.Fatal(err)
		}
		res, _ := json.Marshal(p.results)
		rs := journal
		if sh.ownOnly {
			rs = rs[:ends[id]]
		}
		if f := sh.from[id]; f > 0 {
			rs = rs[f-1:]
		}
		if sh.edit != nil {
			rs = sh.edit(id, slices.Clone(rs))
		}
		var jb bytes.Buffer
		for _, r := range rs {
			b, _ := json.Marshal(r)
			jb.Write(append(b, '\n'))
		}
		dir := t.TempDir()
		parts := map[string][]byte{resultsFileName: res, journalFileName: jb.Bytes(), BundleJobsFile: vb, BundleSealedJobsFile: sealed}
		if p.manifest != nil {
			raw, _ := json.Marshal(p.manifest)
			signer := key.Private
			if p.signer != nil {
				signer = p.signer
			}
			sig, _ := json.Marshal(bundlefile.Signature{KeyID: key.ID, Signature: agentproto.SignBundleManifest(signer, raw)})
			parts[bundleManifestName], parts[bundleSignatureName] = raw, sig
		}
		for name, b := range parts {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		files, err := bundlefile.Scan(dir)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(bundlefile.Manifest{Format: bundlefile.Format, Kind: bundlefile.KindResults, ID: id, InstallID: "inst-1", AgentID: agentID,
			Revision: 1, Created: t0, Files: files})
		var f bytes.Buffer
		pub := agentKey.Public().(ed25519.PublicKey)
		if err := bundlefile.Write(&f, dir, raw, bundlefile.Signature{KeyID: agentproto.KeyID(pub), Signature: agentproto.SignBundleResults(agentKey, raw)}); err != nil {
			t.Fatal(err)
		}
		out[id] = f.Bytes()
	}
	return out
}

// resultsAgent enrols agent ag-1 of inst-1 in s's store, and gives s a
// workflow engine.
func resultsAgent(t *testing.T, s *Service, st *store.Store, t0 time.Time) (store.Agent, ed25519.PrivateKey) {
	t.Helper()
	_, agentKey, _ := ed25519.GenerateKey(nil)
	return resultsAgentWithKey(t, s, st, t0, agentKey)
}

// resultsAgentWithKey is resultsAgent with the agent's key given.
func resultsAgentWithKey(t *testing.T, s *Service, st *store.Store, t0 time.Time, agentKey ed25519.PrivateKey) (store.Agent, ed25519.PrivateKey) {
	t.Helper()
	ctx := context.Background()
	s.cfg.Engine = workflow.NewEngine(st, s.hub, s.now, s.log)
	agentPub := agentKey.Public().(ed25519.PublicKey)
	if err := st.CreateEnrollmentToken(ctx, store.EnrollmentToken{Hash: "h-ag", InstallID: "inst-1", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	ag, err := st.Enroll(ctx, "h-ag", store.Agent{ID: "ag-1", PublicKey: agentPub, Hostname: "host", Version: "v1"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return ag, agentKey
}

// importResults imports file into install acme.
func importResults(s *Service, file []byte) (*imsv1.ImportBundleResultsResponse, error) {
	r, err := s.ImportBundleResults(context.Background(), connect.NewRequest(&imsv1.ImportBundleResultsRequest{Install: "acme", File: file}))
	if err != nil {
		return nil, err
	}
	return r.Msg, nil
}

// A results file imported while the install runs another workflow is
// refused with nothing recorded, and imports once that one ended. It
// used to leave its workflow behind, queued: the import after the other
// workflow ended said the results were imported before (they never
// were), and the workflow engine started that workflow online.
func TestImportResultsWhileAWorkflowRuns(t *testing.T) {
	ctx := context.Background()
	s, st, key, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	bundleID := auth.NewSortableID("bdl_", t0)
	file := resultsFiles(t, key, ag.ID, agentKey, t0, bundleID)[bundleID]
	wfID := "wf_" + strings.TrimPrefix(bundleID, "bdl_")

	// Another workflow runs on the install (an operator's action run).
	other := store.Workflow{ID: "wf-other", InstallID: "inst-1", Kind: "action", Action: "migrate", Parallelism: 1, CreatedAt: t0}
	if err := st.CreateWorkflow(ctx, other); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.StartWorkflow(ctx, other.ID, []store.Step{{Name: "migrate", Action: "migrate", ComponentType: "action", Operation: "apply",
		Config: []byte("{}"), Timeout: time.Minute}}, store.WorkflowRunning, []byte("{}"), t0); err != nil || !ok {
		t.Fatalf("start the other workflow: %v %v", ok, err)
	}
	imp := func() (*imsv1.ImportBundleResultsResponse, error) { return importResults(s, file) }
	if _, err := imp(); err == nil || !strings.Contains(err.Error(), "has a workflow running or awaiting approval") {
		t.Fatalf("import while another workflow runs: %v", err)
	}
	if _, _, err := st.GetWorkflow(ctx, wfID); !errs.Is(err, errs.NotFound) {
		t.Fatalf("the refused import left its workflow: %v", err)
	}
	if _, err := st.GetJob(ctx, resultsJobID(t, file)); !errs.Is(err, errs.NotFound) {
		t.Fatalf("the refused import left its job: %v", err)
	}

	if _, err := st.EndWorkflow(ctx, other.ID, store.WorkflowSucceeded, "", store.InstallActive, 0, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	out, err := imp()
	if err != nil || out.AlreadyImported || out.WorkflowState != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
		t.Fatalf("import once the other workflow ended: %v, %v", out, err)
	}
	// Again: nothing changes, and it says so.
	events := func() int {
		evs, err := st.ListAuditEvents(ctx, store.AuditFilter{Chain: "inst-1", OneChain: true})
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	n := events()
	if out, err := imp(); err != nil || !out.AlreadyImported {
		t.Fatalf("the second import: %v, %v", out, err)
	}
	if events() != n {
		t.Fatalf("the second import wrote %d audit events", events()-n)
	}
}

// resultsJobID is the id of the one job of a results file.
func resultsJobID(t *testing.T, file []byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "r")
	if _, _, err := bundlefile.Read(bytes.NewReader(file), dir, func([]byte, *bundlefile.Manifest, bundlefile.Signature) error { return nil }); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, resultsFileName))
	var r offlineResults
	if err := json.Unmarshal(raw, &r); err != nil || len(r.Jobs) != 1 {
		t.Fatalf("results.json: %v", err)
	}
	return r.Jobs[0].JobID
}

// Results files imported out of the order their bundles were made: the
// older bundle's, after the newer one's (the customer exported it later
// with --bundle; its journal continues), are refused with nothing
// recorded: they would set the install back to what the older bundle
// deployed, though the newer one ran after it. In order, both import.
func TestImportResultsOutOfOrder(t *testing.T) {
	ctx := context.Background()
	s, st, key, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	older, newer := auth.NewSortableID("bdl_", t0), auth.NewSortableID("bdl_", t0.Add(time.Minute))
	files := resultsFiles(t, key, ag.ID, agentKey, t0, older, newer)
	if out, err := importResults(s, files[newer]); err != nil || out.AlreadyImported {
		t.Fatalf("the newer bundle's results: %v, %v", out, err)
	}
	_, err := importResults(s, files[older])
	if err == nil || !strings.Contains(err.Error(), "bundle "+older+" was made before bundle "+newer+", whose results were imported already") {
		t.Fatalf("the older bundle's results after the newer's: %v", err)
	}
	if _, _, err := st.GetWorkflow(ctx, "wf_"+strings.TrimPrefix(older, "bdl_")); !errs.Is(err, errs.NotFound) {
		t.Fatalf("the refused results left a workflow: %v", err)
	}
	// The newer's again: imported before, as it says.
	if out, err := importResults(s, files[newer]); err != nil || !out.AlreadyImported {
		t.Fatalf("the newer bundle's results again: %v, %v", out, err)
	}

	// In order, on a fresh imsd: both import.
	s2, st2, _, _ := bundleService(t)
	s2.cfg.SigningKey = key
	ag2, _ := resultsAgentWithKey(t, s2, st2, t0, agentKey)
	files = resultsFiles(t, key, ag2.ID, agentKey, t0, older, newer)
	for _, id := range []string{older, newer} {
		if out, err := importResults(s2, files[id]); err != nil || out.AlreadyImported {
			t.Fatalf("bundle %s's results, in order: %v, %v", id, out, err)
		}
	}
}

// A results file from elsewhere records nothing: one of install acme
// imported into another install, one signed by a key that is not its
// agent's (another install's agent, naming acme's agent), and one naming
// an agent of another install as its signer.
func TestImportResultsFromElsewhere(t *testing.T) {
	ctx := context.Background()
	s, st, key, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	if err := st.CreateInstall(ctx, store.Install{ID: "inst-2", AppID: "app-1", Name: "globex", CreatedAt: t0},
		store.EnrollmentToken{Hash: "h-2", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	otherPub, otherKey, _ := ed25519.GenerateKey(nil)
	if _, err := st.Enroll(ctx, "h-2", store.Agent{ID: "ag-2", PublicKey: otherPub, Hostname: "host", Version: "v1"}, t0); err != nil {
		t.Fatal(err)
	}
	id := auth.NewSortableID("bdl_", t0)
	for _, bad := range []struct {
		name, install string
		file          []byte
		want          string
	}{
		{"into another install", "globex", resultsFiles(t, key, ag.ID, agentKey, t0, id)[id], "the results are of install inst-1, not globex"},
		{"signed by another install's agent", "acme", resultsFiles(t, key, ag.ID, otherKey, t0, id)[id], "the signature is not agent ag-1's"},
		{"of another install's agent", "acme", resultsFiles(t, key, "ag-2", otherKey, t0, id)[id], "agent ag-2 is not an agent of install acme"},
	} {
		_, err := s.ImportBundleResults(ctx, connect.NewRequest(&imsv1.ImportBundleResultsRequest{Install: bad.install, File: bad.file}))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "nothing was recorded") {
			t.Errorf("%s: %v, want %q", bad.name, err, bad.want)
		}
	}
	for _, in := range []string{"inst-1", "inst-2"} {
		if wfs, err := st.ListWorkflows(ctx, store.WorkflowFilter{InstallID: in}); err != nil || len(wfs) > 0 {
			t.Fatalf("install %s: workflows %v, %v", in, wfs, err)
		}
	}
}

// The same results file imported twice at once (two operators, or a
// retry racing the first call) is recorded once: one import records it,
// the other says it was imported; one workflow, one record of the
// import, the job finished once.
func TestImportResultsTwiceAtOnce(t *testing.T) {
	ctx := context.Background()
	s, st, key, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	id := auth.NewSortableID("bdl_", t0)
	file := resultsFiles(t, key, ag.ID, agentKey, t0, id)[id]
	type res struct {
		out *imsv1.ImportBundleResultsResponse
		err error
	}
	ch := make(chan res, 2)
	for range 2 {
		go func() {
			out, err := importResults(s, file)
			ch <- res{out, err}
		}()
	}
	recorded := 0
	for range 2 {
		r := <-ch
		if r.err != nil {
			t.Fatalf("an import: %v", r.err)
		}
		if !r.out.AlreadyImported {
			recorded++
		}
	}
	if recorded != 1 {
		t.Fatalf("%d of the two imports recorded the results", recorded)
	}
	evs, err := st.ListAuditEvents(ctx, store.AuditFilter{Chain: "inst-1", OneChain: true})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, ev := range evs {
		kinds[ev.Kind]++
	}
	if kinds[kindResultsImported] != 1 || kinds["job.finished"] != 1 || kinds["workflow.started"] != 1 {
		t.Fatalf("audit events: %v", kinds)
	}
}

// editEntry rewrites the tar file with entry name's content changed by
// edit (the manifest and the other entries as they were).
func editEntry(t *testing.T, file []byte, name string, edit func([]byte) []byte) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(file))
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			b, found = edit(b), true
			h.Size = int64(len(b))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(b)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("no %s in the file", name)
	}
	return out.Bytes()
}

// A results file edited after the agent signed it, in any of its files
// (the manifest, the results, the journal, the jobs' view, the sealed
// jobs), records nothing, and the refusal names the file.
func TestImportResultsEditedAfterSigning(t *testing.T) {
	ctx := context.Background()
	s, st, key, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	id := auth.NewSortableID("bdl_", t0)
	file := resultsFiles(t, key, ag.ID, agentKey, t0, id)[id]
	flip := func(b []byte) []byte {
		b = bytes.Clone(b)
		b[len(b)/2] ^= 0x01
		return b
	}
	for _, c := range []struct{ entry, want string }{
		{bundlefile.ManifestName, "manifest.sig: the signature is not agent ag-1's"},
		{resultsFileName, "results.json: sha256 "},
		{journalFileName, "journal.jsonl: sha256 "},
		{BundleJobsFile, "jobs.json: sha256 "},
		{BundleSealedJobsFile, "jobs.sealed: sha256 "},
		{resultsFileName + "+", "results.json: "},
	} {
		edit, name := flip, c.entry
		if c.entry == bundlefile.ManifestName {
			edit = func(b []byte) []byte { return bytes.Replace(b, []byte(`"revision":1`), []byte(`"revision":2`), 1) }
		}
		if n, ok := strings.CutSuffix(c.entry, "+"); ok {
			// One line of log more, the size changed too.
			name, edit = n, func(b []byte) []byte { return bytes.Replace(b, []byte(`["hi"]`), []byte(`["hi","more"]`), 1) }
		}
		_, err := importResults(s, editEntry(t, file, name, edit))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "nothing was recorded") {
			t.Errorf("%s edited: %v, want %q", c.entry, err, c.want)
		}
	}
	if wfs, err := st.ListWorkflows(ctx, store.WorkflowFilter{InstallID: "inst-1"}); err != nil || len(wfs) > 0 {
		t.Fatalf("workflows after the edited files: %v, %v", wfs, err)
	}
	if out, err := importResults(s, file); err != nil || out.AlreadyImported {
		t.Fatalf("the file as signed: %v, %v", out, err)
	}
}

// The results of a bundle made before imsd key rotate import after it:
// their jobs come back sealed to, and signed by, the key imsd replaced,
// which the rotation kept (auth.LoadPreviousKeys). They used to be
// refused: imsd opened them with its current key only. Results whose
// jobs a key imsd never held sealed and signed are still refused, and
// so are those of a key replaced longer than auth.PreviousKeyUse ago
// (imsd used a previous key for ever before), the refusal naming it.
func TestImportResultsOfABundleMadeBeforeARotation(t *testing.T) {
	ctx := context.Background()
	s, st, _, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	keyFile := filepath.Join(t.TempDir(), "signing.key")
	old, err := auth.LoadSigningKey(keyFile, true)
	if err != nil {
		t.Fatal(err)
	}
	before := auth.NewSortableID("bdl_", t0)
	files := resultsFiles(t, old, ag.ID, agentKey, t0, before)

	// imsd key rotate, then imsd restarts with what the rotation wrote.
	if _, err := auth.RotateSigningKey(keyFile, t0); err != nil {
		t.Fatal(err)
	}
	next, err := auth.LoadSigningKey(keyFile, false)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := auth.LoadKeyChain(keyFile, next)
	if err != nil {
		t.Fatal(err)
	}
	prev, err := auth.LoadPreviousKeys(keyFile, next, chain, t0)
	if err != nil || len(prev) != 1 || prev[0].ID != old.ID || !prev[0].ReplacedAt.Equal(t0) {
		t.Fatalf("the previous keys after a rotation: %v, %v; want %s replaced at %s", prev, err, old.ID, t0)
	}
	s.cfg.SigningKey, s.cfg.SigningKeyID, s.cfg.PreviousSigningKeys = next, next.ID, prev

	// Sealed and signed by a key this imsd never held: refused.
	_, otherPriv, _ := ed25519.GenerateKey(nil)
	stranger := auth.NewSigningKey(otherPriv)
	strange := auth.NewSortableID("bdl_", t0.Add(time.Minute))
	_, err = importResults(s, resultsFiles(t, stranger, ag.ID, agentKey, t0, strange)[strange])
	if err == nil || !strings.Contains(err.Error(), "opens with no key this imsd holds ("+next.ID+", "+old.ID+";") || !strings.Contains(err.Error(), "nothing was recorded") {
		t.Fatalf("results of jobs a stranger's key sealed and signed: %v", err)
	}
	// Sealed to a key imsd held, but its jobs signed by the stranger's.
	forged := resultsFilesWith(t, stranger, ag.ID, agentKey, t0, journalShape{sealTo: old.Public}, strange)[strange]
	if _, err := importResults(s, forged); err == nil || !strings.Contains(err.Error(), "is not one this imsd signed for agent "+ag.ID) {
		t.Fatalf("results of jobs a stranger's key signed, sealed to a key imsd held: %v", err)
	}

	// Past the old key's use (a running imsd's clock moved on): refused,
	// nothing recorded, the key and its dates named.
	until := t0.Add(auth.PreviousKeyUse)
	s.now = func() time.Time { return until }
	_, err = importResults(s, files[before])
	if err == nil || !strings.Contains(err.Error(), "opens with no key this imsd holds ("+next.ID+";") || !strings.Contains(err.Error(), "nothing was recorded") ||
		!strings.Contains(err.Error(), "which this imsd no longer uses: "+old.ID+" (replaced "+t0.UTC().Format(time.RFC3339)+", used until "+until.UTC().Format(time.RFC3339)+")") {
		t.Fatalf("results of a bundle whose key was replaced %s ago: %v", auth.PreviousKeyUse, err)
	}
	if wfs, err := st.ListWorkflows(ctx, store.WorkflowFilter{InstallID: "inst-1"}); err != nil || len(wfs) != 0 {
		t.Fatalf("a refused import recorded workflows: %v, %v", wfs, err)
	}

	// Within it: imported.
	s.now = func() time.Time { return until.Add(-time.Second) }
	out, err := importResults(s, files[before])
	if err != nil || out.AlreadyImported || out.Jobs != 1 {
		t.Fatalf("results of a bundle made before the rotation: %v, %v", out, err)
	}
	if wf, _, err := st.GetWorkflow(ctx, out.WorkflowId); err != nil || wf.State != store.WorkflowSucceeded {
		t.Fatalf("the bundle's workflow: %+v, %v", wf, err)
	}
}

// A results file is checked against the bundle it is of, as imsd signed
// it (the agent keeps the bundle's manifest and carries it back): one
// that carries no copy of it, names another revision or workflow kind,
// brings a job of another bundle (signed by imsd for the same agent) as
// this one's, or carries the manifest of another bundle or install's, or
// one imsd never signed, records nothing; the file as exported imports.
func TestImportResultsTiedToTheirBundle(t *testing.T) {
	ctx := context.Background()
	s, st, key, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	id := auth.NewSortableID("bdl_", t0)
	// A job imsd signed for the same agent, in another bundle.
	other := agentproto.BundleJob{Step: "hello", JobID: auth.NewSortableID("job_", t0), InstallID: "inst-1", Attempt: 1, FencingToken: 1,
		Mode: "maintenance", ComponentType: "action", Operation: "apply", TimeoutSeconds: 60, Config: json.RawMessage(`{"command":"rm -rf /data"}`)}
	cfg, _ := other.DecodeConfig()
	c, err := other.Claims(ag.ID, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Expires = t0.Add(time.Hour)
	other.Signature, other.KeyID, other.ExpireUnixMs = key.Sign(&c), key.ID, c.Expires.UnixMilli()
	_, stranger, _ := ed25519.GenerateKey(nil)
	file := func(edit func(p *resultsParts)) []byte {
		return resultsFilesWith(t, key, ag.ID, agentKey, t0, journalShape{bundle: func(_ string, p *resultsParts) { edit(p) }}, id)[id]
	}
	result := func(j agentproto.BundleJob) map[string]any {
		return map[string]any{"job_id": j.JobID, "step": j.Step, "outcome": "succeeded", "started_at": t0, "ended_at": t0.Add(time.Second)}
	}
	for _, bad := range []struct {
		name string
		file []byte
		want string
	}{
		{"without the bundle's manifest", file(func(p *resultsParts) { p.manifest = nil }),
			"bundle-manifest.json: open "},
		{"of another revision", file(func(p *resultsParts) { p.results["revision"] = 2 }),
			"results.json: names revision 2 (update workflow), and bundle " + id + " is of revision 1 (update workflow), as imsd signed it"},
		{"of another workflow kind", file(func(p *resultsParts) { p.results["workflow_kind"] = "provision" }),
			"names revision 1 (provision workflow)"},
		{"with a job of another bundle added", file(func(p *resultsParts) {
			p.jobs = append(p.jobs, other)
			p.results["jobs"] = append(p.results["jobs"].([]map[string]any), result(other))
		}), "the jobs are not bundle " + id + "'s: jobs.json lists 1 jobs and jobs.sealed holds 2"},
		{"with a job of another bundle instead", file(func(p *resultsParts) {
			p.jobs = []agentproto.BundleJob{other}
			p.results["jobs"] = []map[string]any{result(other)}
		}), "the jobs are not bundle " + id + "'s: jobs.json: step hello"},
		{"with another bundle's manifest", file(func(p *resultsParts) { p.manifest.ID = auth.NewSortableID("bdl_", t0) }),
			"the results are of bundle " + id + ", and the bundle manifest carried is bundle bdl_"},
		{"with another install's bundle manifest", file(func(p *resultsParts) { p.manifest.InstallID = "inst-2" }),
			"bundle " + id + " was made for agent ag-1 of install inst-2, and the results are agent ag-1's of install acme"},
		{"with a results file's manifest", file(func(p *resultsParts) { p.manifest.Kind = bundlefile.KindResults }),
			"a results manifest, not a bundle's"},
		{"with a bundle manifest imsd did not sign", file(func(p *resultsParts) { p.signer = stranger }),
			"bundle-manifest.json: bundle manifest: the signature does not match"},
	} {
		_, err := importResults(s, bad.file)
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "nothing was recorded") {
			t.Errorf("%s: %v, want %q", bad.name, err, bad.want)
		}
	}
	if wfs, err := st.ListWorkflows(ctx, store.WorkflowFilter{InstallID: "inst-1"}); err != nil || len(wfs) > 0 {
		t.Fatalf("the refused files recorded workflows %v, %v", wfs, err)
	}
	if out, err := importResults(s, file(func(*resultsParts) {})); err != nil || out.Jobs != 1 {
		t.Fatalf("the file as exported: %v, %v", out, err)
	}
}

// An imported job's log is held to a live agent's log batch limits:
// a line over the line limit is cut and says so, and the lines past the
// batch's line or byte limit are left out, a last line from imsd saying
// how many; the job's error is cut as a live result's is. A results file
// is the agent's key holder's to write, and one job's log of millions of
// lines would otherwise all go into one transaction.
func TestImportResultsLogHeldToBatchLimits(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		log       []string
		kept      int
		left      string
		firstLine int
		leftOut   int64
	}{
		{"many lines", slices.Repeat([]string{"line"}, 3*agentapi.MaxLogBatch), agentapi.MaxLogBatch - 1,
			fmt.Sprintf("[imsd] %d more log lines (%d bytes) of this job were left out", 2*agentapi.MaxLogBatch+1, 4*(2*agentapi.MaxLogBatch+1)), 4, 2*agentapi.MaxLogBatch + 1},
		{"long lines", slices.Repeat([]string{strings.Repeat("é", agentapi.MaxLogLineBytes)}, 100), 63,
			"[imsd] 37 more log lines (", agentapi.MaxLogLineBytes, 37},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, st, key, t0 := bundleService(t)
			ag, agentKey := resultsAgent(t, s, st, t0)
			id := auth.NewSortableID("bdl_", t0)
			file := resultsFilesWith(t, key, ag.ID, agentKey, t0, journalShape{bundle: func(_ string, p *resultsParts) {
				j := p.results["jobs"].([]map[string]any)[0]
				j["log"], j["error"] = tc.log, strings.Repeat("x", 1<<20)
			}}, id)[id]
			if _, err := importResults(s, file); err != nil {
				t.Fatal(err)
			}
			// The lines left out count as dropped (imsd's
			// byoc_job_log_lines_dropped_total), once: the same file
			// imported again adds nothing.
			if n := st.LogLinesDropped(); n != tc.leftOut {
				t.Fatalf("log lines dropped after the import: %d, want %d", n, tc.leftOut)
			}
			if out, err := importResults(s, file); err != nil || !out.AlreadyImported || st.LogLinesDropped() != tc.leftOut {
				t.Fatalf("imported again: %v, %v; dropped %d, want %d", out, err, st.LogLinesDropped(), tc.leftOut)
			}
			jobID := resultsJobID(t, file)
			logs, err := st.ListLogs(ctx, jobID, 0, 0, 10*agentapi.MaxLogBatch)
			if err != nil {
				t.Fatal(err)
			}
			if last := logs[len(logs)-1]; len(logs) != tc.kept+1 || !strings.HasPrefix(last.Text, tc.left) || last.Stream != 3 {
				t.Fatalf("%d lines kept, the last %.120q; want %d and a note %q", len(logs), last.Text, tc.kept+1, tc.left)
			}
			size := 0
			for _, l := range logs {
				if len(l.Text) > agentapi.MaxLogLineBytes || !utf8.ValidString(l.Text) {
					t.Fatalf("line %d: %d bytes, valid UTF-8 %v", l.Seq, len(l.Text), utf8.ValidString(l.Text))
				}
				size += len(l.Text)
			}
			if size > agentapi.MaxLogBatchBytes {
				t.Fatalf("%d bytes of log kept", size)
			}
			if first := logs[0].Text; len(first) < tc.firstLine-100 || (len(tc.log[0]) > agentapi.MaxLogLineBytes && !strings.HasSuffix(first, "[imsd: line cut, over the 64 KiB a log line may have]")) {
				t.Fatalf("the first line: %d bytes, ending %q", len(first), first[max(0, len(first)-60):])
			}
			j, err := st.GetJob(ctx, jobID)
			if err != nil || len(j.Error) > agentapi.MaxLogLineBytes {
				t.Fatalf("the job's error: %d bytes, %v", len(j.Error), err)
			}
		})
	}
}
