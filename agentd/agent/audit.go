package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// openAudit opens the agent's copy of its install's audit chain and its
// own journal (package auditlog) in the state dir.
func (a *Agent) openAudit() error {
	dir := auditlog.Dir(a.cfg.StateDir)
	var err error
	if a.auditCopy, err = auditlog.Open(filepath.Join(dir, auditlog.InstallFile), a.id.InstallID); err != nil {
		return err
	}
	if a.journal, err = auditlog.Open(filepath.Join(dir, auditlog.AgentFile), auditlog.AgentChain(a.id.AgentID)); err != nil {
		a.auditCopy.Close()
		return err
	}
	return nil
}

// takeAudit appends records imsd sent to the agent's copy of the chain.
// A record that does not follow the copy is logged at ERROR once per
// stream and not kept, nor anything after it: the jobs whose ack records
// are then missing are not started (ackRecorded).
func (a *Agent) takeAudit(m *agentv1.AuditRecords, ss *sessionState) {
	rs := make([]auditchain.Record, len(m.Records))
	for i, r := range m.Records {
		rs[i] = auditchain.Record{Chain: r.Chain, Seq: r.Seq, At: r.At, Kind: r.Kind, Actor: r.Actor,
			Subject: r.Subject, Data: r.Data, Prev: r.Prev, Hash: r.Hash}
	}
	err := a.auditCopy.AppendCopy(rs)
	if err == nil && m.Checkpoint != nil {
		err = a.keepCheckpoint(m.Checkpoint)
	}
	if err != nil {
		a.mu.Lock()
		a.auditErr = err
		a.mu.Unlock()
		if !ss.auditLogged {
			ss.auditLogged = true
			a.log.Error("cannot keep imsd's audit records in the agent's copy; no job is started until it can", "file", a.auditCopy.Path(), "err", err)
			a.note("audit.copy_failed", "install:"+a.id.InstallID, map[string]string{"error": err.Error()})
		}
	}
}

// keepCheckpoint keeps imsd's signature of the copy's head beside the copy
// (auditlog.CheckpointFile) once it checks: a key the agent trusts, over
// the record the copy holds last.
func (a *Agent) keepCheckpoint(cp *agentv1.AuditCheckpoint) error {
	seq, hash := a.auditCopy.Head()
	if cp.Seq != seq || cp.Hash != hash {
		return fmt.Errorf("imsd's checkpoint names record %d (hash %.12s…), the copy's last is %d (%.12s…)", cp.Seq, cp.Hash, seq, hash)
	}
	if !agentproto.VerifyAuditCheckpoint(a.keys, cp.KeyId, a.id.InstallID, cp.Seq, cp.Hash, cp.Signature) {
		return fmt.Errorf("imsd's checkpoint of record %d is not signed by a key this agent trusts", cp.Seq)
	}
	return auditlog.AppendCheckpoint(filepath.Join(auditlog.Dir(a.cfg.StateDir), auditlog.CheckpointFile),
		auditlog.Checkpoint{Seq: cp.Seq, Hash: cp.Hash, KeyID: cp.KeyId, Signature: cp.Signature})
}

// ackRecorded returns nil when the agent's copy of the chain holds imsd's
// record of j's ack, the agent's record of the job, which must exist
// before the job starts; else why not. a.mu is held.
func (a *Agent) ackRecordedLocked(j *jobRun) error {
	if a.auditCopy.FindAck(j.id, j.token) != 0 {
		return nil
	}
	seq, _ := a.auditCopy.Head()
	why := fmt.Sprintf("the agent's copy of the audit chain (%s, %d records) holds no record of its ack", a.auditCopy.Path(), seq)
	if a.auditErr != nil {
		why += ": " + a.auditErr.Error()
	}
	return fmt.Errorf("not started: %s; the agent runs nothing it holds no audit record of", why)
}

// note appends an event of the agent's own to its journal; a failure is
// logged, since what it records (a refusal, a job not started) happens
// either way.
func (a *Agent) note(kind, subject string, data map[string]string) {
	d, err := auditlog.EncodeData(data)
	if err == nil {
		_, err = a.journal.Add(auditchain.Record{At: a.now().UnixNano(), Kind: kind, Actor: "agent:" + a.id.AgentID, Subject: subject, Data: d})
	}
	if err != nil {
		a.log.Error("cannot write the agent's audit journal", "kind", kind, "subject", subject, "err", err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Note appends an event the agent's own commands recorded while it was
// not running (such as an update applied, refused or rolled back:
// agentd update) to its journal.
func (a *Agent) Note(kind, subject string, data map[string]string) { a.note(kind, subject, data) }

// Drain waits until the agent holds no job (every attempt ended and its
// result written back, every plugin exited), then stops it taking any
// more: an assignment after that is neither acked nor started, so its
// lease runs out and imsd hands it out again. An update's swap of the
// process follows (agentd update). It polls every interval until ctx
// ends.
func (a *Agent) Drain(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		a.mu.Lock()
		if len(a.jobs) == 0 && len(a.live) == 0 {
			a.draining = true
			a.mu.Unlock()
			return nil
		}
		a.mu.Unlock()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
