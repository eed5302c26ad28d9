package agentapi

import (
	"context"
	"crypto/ed25519"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// sendAudit sends an agent that keeps a copy of its install's audit chain
// (Hello.audit_copy) the records it lacks, as they are stored, in pages
// of store.MaxAuditPage. The handler calls it after the welcome, before
// the answer to an ack (so the agent holds the ack's record before it
// starts the job: it runs nothing it holds no record of), and at the
// first heartbeat after a result (else once a minute). A record the agent does not take (its copy disagrees) is
// its to report: imsd sends the chain as it has it.
func (c *conn) sendAudit(ctx context.Context) error {
	if !c.auditCopy {
		return nil
	}
	for {
		rs, err := c.svc.store.AuditRecordsToSend(ctx, c.agent.InstallID, c.auditSeq)
		if err != nil {
			return c.svc.err(ctx, err)
		}
		if len(rs) == 0 {
			return nil
		}
		last := rs[len(rs)-1]
		if err := c.send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Audit{Audit: &agentv1.AuditRecords{
			Records: auditRecords(rs), Checkpoint: c.svc.checkpoint(last.Chain, last.Seq, last.Hash)}}}); err != nil {
			return err
		}
		c.auditSeq = rs[len(rs)-1].Seq
		if len(rs) < store.MaxAuditPage {
			return nil
		}
	}
}

// sendHeadCheckpoint signs, at the welcome, the head the agent's copy
// already holds (Hello.audit_seq), so that records it kept just before it
// last stopped, before their checkpoint, are covered too.
func (c *conn) sendHeadCheckpoint(ctx context.Context) error {
	if !c.auditCopy || c.auditSeq <= 0 {
		return nil
	}
	rs, err := c.svc.store.AuditRecordsAfter(ctx, c.agent.InstallID, c.auditSeq-1, 1)
	if err != nil {
		return c.svc.err(ctx, err)
	}
	if len(rs) == 0 || rs[0].Seq != c.auditSeq {
		return nil // the agent holds more than imsd: its copy is its to check
	}
	r := rs[0]
	return c.send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Audit{Audit: &agentv1.AuditRecords{
		Checkpoint: c.svc.checkpoint(r.Chain, r.Seq, r.Hash)}}})
}

// checkpoint signs chain's record seq with imsd's key.
func (s *Service) checkpoint(chain string, seq int64, hash string) *agentv1.AuditCheckpoint {
	k := s.cfg.SigningKey
	return &agentv1.AuditCheckpoint{Seq: seq, Hash: hash, KeyId: k.ID, Signature: agentproto.SignAuditCheckpoint(k.Private, chain, seq, hash)}
}

func auditRecords(rs []auditchain.Record) []*agentv1.AuditRecord {
	out := make([]*agentv1.AuditRecord, len(rs))
	for i, r := range rs {
		out[i] = &agentv1.AuditRecord{Chain: r.Chain, Seq: r.Seq, At: r.At, Kind: r.Kind, Actor: r.Actor,
			Subject: r.Subject, Data: r.Data, Prev: r.Prev, Hash: r.Hash}
	}
	return out
}

// ListAuditRecords returns records of the calling agent's install's audit
// chain, as stored, for agentd audit compare. The call is signed by the
// agent.
func (s *Service) ListAuditRecords(ctx context.Context, req *connect.Request[agentv1.ListAuditRecordsRequest]) (*connect.Response[agentv1.ListAuditRecordsResponse], error) {
	m := req.Msg
	if m.AgentId == "" || m.Time == nil {
		return nil, s.err(ctx, errs.Field("agent_id", "and time are required"))
	}
	if m.AfterSeq < 0 || m.Limit < 0 {
		return nil, s.err(ctx, errs.Field("after_seq", "and limit must not be negative"))
	}
	at := m.Time.AsTime()
	if d := s.now().Sub(at); d > signedCallSkew || d < -signedCallSkew {
		return nil, s.err(ctx, errs.E(errs.Unauthenticated, "the call's time is %s from imsd's clock: check the agent's clock", d.Round(time.Second)))
	}
	a, err := s.store.GetAgent(ctx, m.AgentId)
	if err != nil || !verifiesWith(a, func(k ed25519.PublicKey) bool { return agentproto.VerifyListAudit(k, m.AgentId, at, m.Signature) }) {
		return nil, s.err(ctx, errs.E(errs.Unauthenticated, "the call is not signed by agent %s", m.AgentId))
	}
	rs, err := s.store.AuditRecordsAfter(ctx, a.InstallID, m.AfterSeq, int(m.Limit))
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&agentv1.ListAuditRecordsResponse{Records: auditRecords(rs)}), nil
}
