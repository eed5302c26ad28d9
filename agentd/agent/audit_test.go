package agent

import (
	"crypto/ed25519"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/internal/auditchain"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// agentJournal reads the agent's own audit journal in dir, and fails t
// unless it verifies.
func agentJournal(t *testing.T, dir string) []auditchain.Record {
	t.Helper()
	rs, err := auditlog.ReadFile(filepath.Join(auditlog.Dir(dir), auditlog.AgentFile))
	if err != nil {
		t.Fatal(err)
	}
	if p := auditchain.Verify(rs); p != nil {
		t.Fatalf("the agent's journal does not verify: %v", p)
	}
	return rs
}

// saveTestIdentity saves an identity for agent agt_1 of install ins_1 in
// dir, trusting a fresh imsd key.
func saveTestIdentity(t *testing.T, dir string) {
	t.Helper()
	key, _ := identity.NewKey()
	imsKey, _ := identity.NewKey()
	if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: "http://127.0.0.1:1", PrivateKey: key,
		IMSDKeys: []ed25519.PublicKey{imsKey.Public().(ed25519.PublicKey)}}); err != nil {
		t.Fatal(err)
	}
}

// wantJournal fails t unless the agent's own audit journal in dir holds
// a record of kind about subject whose data contains text, and verifies.
func wantJournal(t *testing.T, dir, kind, subject, text string) {
	t.Helper()
	rs := agentJournal(t, dir)
	for _, r := range rs {
		var data map[string]string
		if err := json.Unmarshal([]byte(r.Data), &data); err != nil {
			t.Fatalf("record %d: data %s: %v", r.Seq, r.Data, err)
		}
		for _, v := range data {
			if r.Kind == kind && r.Subject == subject && strings.Contains(v, text) {
				return
			}
		}
	}
	t.Fatalf("the agent's journal holds no %s record of %s with %q: %+v", kind, subject, text, rs)
}

func accept(id uint64) *agentv1.ConnectResponse {
	return &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: id}}}
}

// The agent keeps imsd's records in its copy of the chain (checked link by
// link, synced) and starts a job only once the copy holds the record of
// its ack; after a restart its hello says how far its copy goes.
func TestAgentKeepsItsCopyOfTheChain(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{}
	dir := t.TempDir()
	_, stop := startFakeIn(t, f, rr, dir, nil)
	fs := <-f.streams
	f.record("install.created", "install:x", "{}")
	fs.down <- f.assign("job_a", 7, "ins_1")
	ack := fs.next(t).GetAck()
	fs.down <- accept(ack.WriteId)
	eventually(t, "job_a to start", func() bool { s, _ := rr.get(); return len(s) == 1 })
	rs, err := auditlog.ReadFile(filepath.Join(auditlog.Dir(dir), auditlog.InstallFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[1].Kind != "job.acked" || rs[1].Subject != "job:job_a" {
		t.Fatalf("the copy holds %+v, want install.created then job_a's ack", rs)
	}
	f.auditMu.Lock()
	imsd := append([]auditchain.Record(nil), f.chain...)
	f.auditMu.Unlock()
	if d := auditlog.Compare(rs, imsd); d != nil {
		t.Fatalf("the copy and imsd's chain disagree: %v", d)
	}
	stop()

	// A new agent process on the same state dir asks for what follows.
	f2 := &fakeIMS{key: f.key}
	hello := make(chan *agentv1.Hello, 1)
	f2.onHello = func(h *agentv1.Hello) { hello <- h }
	startFakeIn(t, f2, rr, dir, nil)
	h := <-hello
	if !h.AuditCopy || h.AuditSeq != 2 {
		t.Fatalf("hello: audit_copy %v, audit_seq %d; want true, 2", h.AuditCopy, h.AuditSeq)
	}
}

// No record, no action: an attempt whose ack record never reached the
// agent's copy (here imsd sends none) ends failed without starting, and
// the agent's journal says so.
func TestAgentStartsNothingWithoutItsAuditRecord(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{noAudit: true}
	dir := t.TempDir()
	startFakeIn(t, f, rr, dir, nil)
	fs := <-f.streams
	fs.down <- f.assign("job_a", 7, "ins_1")
	ack := fs.next(t).GetAck()
	fs.down <- accept(ack.WriteId)
	res := nextResult(t, fs)
	if res.JobId != "job_a" || res.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(res.Error, "holds no record of its ack") {
		t.Fatalf("result %v, want job_a failed for want of its audit record", res)
	}
	if s, _ := rr.get(); len(s) != 0 {
		t.Fatalf("started %v without an audit record", s)
	}
	wantJournal(t, dir, "job.not_started", "job:job_a", "holds no record")
}

// A record that does not follow the copy (imsd's chain was changed under
// it) is not kept, nor anything after it, and the job whose ack it
// carried does not start.
func TestAgentRefusesRecordsThatDoNotFollowItsCopy(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{}
	dir := t.TempDir()
	startFakeIn(t, f, rr, dir, nil)
	fs := <-f.streams
	f.record("install.created", "install:x", "{}")
	fs.down <- f.assign("job_a", 7, "ins_1")
	ack := fs.next(t).GetAck()
	fs.down <- accept(ack.WriteId)
	eventually(t, "job_a to start", func() bool { s, _ := rr.get(); return len(s) == 1 })

	// Someone edits record 2 in imsd's database, recomputing its hash, and
	// the fake sends the chain again from record 2.
	f.auditMu.Lock()
	f.chain[1].Subject = "job:job_forged"
	f.chain[1].Hash = auditchain.Hash(f.chain[1])
	f.auditMu.Unlock()
	fs.down <- f.auditAfter(1)
	fs.down <- f.assign("job_b", 8, "ins_1")
	ack = fs.next(t).GetAck()
	fs.down <- accept(ack.WriteId)
	res := nextResult(t, fs)
	if res.JobId != "job_b" || res.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(res.Error, "record 2") {
		t.Fatalf("result %v, want job_b failed naming record 2", res)
	}
	rs, _ := auditlog.ReadFile(filepath.Join(auditlog.Dir(dir), auditlog.InstallFile))
	if len(rs) != 2 || rs[1].Subject != "job:job_a" {
		t.Fatalf("the copy holds %+v, want its two records unchanged", rs)
	}
}

// nextResult returns the agent's next result, skipping logs (accepted).
func nextResult(t *testing.T, fs *fakeStream) *agentv1.JobResult {
	t.Helper()
	for {
		m := fs.next(t)
		if l := m.GetLogs(); l != nil {
			fs.down <- accept(l.WriteId)
			continue
		}
		if r := m.GetResult(); r != nil {
			return r
		}
		t.Fatalf("want a result, got %v", m)
	}
}
