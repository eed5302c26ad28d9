package operatorapi

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

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

// resultsFile is a results file as agentd bundle export-results writes
// it: agent agentID (key agentKey) of inst-1 ran bundle bundleID's one
// action job (signed by imsd's key), which succeeded.
func resultsFile(t *testing.T, key auth.SigningKey, agentID string, agentKey ed25519.PrivateKey, bundleID string, t0 time.Time) []byte {
	t.Helper()
	job := agentproto.BundleJob{Step: "hello", JobID: auth.NewSortableID("job_", t0), InstallID: "inst-1", Attempt: 1, FencingToken: 1,
		Mode: "maintenance", ComponentType: "action", Operation: "apply", TimeoutSeconds: 60, Config: json.RawMessage(`{"command":"echo hi"}`)}
	cfg, _ := job.DecodeConfig()
	c, err := job.Claims(agentID, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Expires = t0.Add(time.Hour)
	job.Signature, job.KeyID, job.ExpireUnixMs = key.Sign(&c), key.ID, c.Expires.UnixMilli()
	jobs, _ := json.Marshal([]agentproto.BundleJob{job})
	sealed, err := agentchannel.SealTo(key.Public, agentproto.ResultsJobsInfo("inst-1", agentID), jobs)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := json.Marshal(map[string]any{"bundle": bundleID, "install_id": "inst-1", "agent_id": agentID, "revision": 1, "workflow_kind": "update",
		"jobs": []map[string]any{{"job_id": job.JobID, "step": "hello", "outcome": "succeeded", "log": []string{"hi"},
			"started_at": t0, "ended_at": t0.Add(time.Second)}}})
	var journal bytes.Buffer
	var prev *auditchain.Record
	for _, r := range []auditchain.Record{
		{Kind: "bundle.job.started", Subject: "job:" + job.JobID, Data: `{"bundle":"` + bundleID + `"}`},
		{Kind: "bundle.job.finished", Subject: "job:" + job.JobID, Data: `{"bundle":"` + bundleID + `","outcome":"succeeded"}`},
	} {
		r.Chain, r.At, r.Actor = "agent:"+agentID, t0.UnixNano(), "agent:"+agentID
		r = auditchain.Next(prev, r)
		prev = &r
		b, _ := json.Marshal(r)
		journal.Write(append(b, '\n'))
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{resultsFileName: res, journalFileName: journal.Bytes(), BundleJobsFile: []byte("[]\n"), BundleSealedJobsFile: sealed} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files, err := bundlefile.Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(bundlefile.Manifest{Format: bundlefile.Format, Kind: bundlefile.KindResults, ID: bundleID, InstallID: "inst-1", AgentID: agentID,
		Revision: 1, Created: t0, Files: files})
	var out bytes.Buffer
	pub := agentKey.Public().(ed25519.PublicKey)
	if err := bundlefile.Write(&out, dir, raw, bundlefile.Signature{KeyID: agentproto.KeyID(pub), Signature: agentproto.SignBundleResults(agentKey, raw)}); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// A results file imported while the install runs another workflow is
// refused with nothing recorded, and imports once that one ended. It
// used to leave its workflow behind, queued: the import after the other
// workflow ended said the results were imported before (they never
// were), and the workflow engine started that workflow online.
func TestImportResultsWhileAWorkflowRuns(t *testing.T) {
	ctx := context.Background()
	s, st, key, t0 := bundleService(t)
	s.cfg.Engine = workflow.NewEngine(st, s.hub, s.now, s.log)
	agentPub, agentKey, _ := ed25519.GenerateKey(nil)
	if err := st.CreateEnrollmentToken(ctx, store.EnrollmentToken{Hash: "h-ag", InstallID: "inst-1", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	ag, err := st.Enroll(ctx, "h-ag", store.Agent{ID: "ag-1", PublicKey: agentPub, Hostname: "host", Version: "v1"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	bundleID := auth.NewSortableID("bdl_", t0)
	file := resultsFile(t, key, ag.ID, agentKey, bundleID, t0)
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
	imp := func() (*imsv1.ImportBundleResultsResponse, error) {
		r, err := s.ImportBundleResults(ctx, connect.NewRequest(&imsv1.ImportBundleResultsRequest{Install: "acme", File: file}))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	}
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
