package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/internal/auditchain"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
)

// chainImsd answers ListAuditRecords with a fixed chain.
type chainImsd struct {
	agentv1connect.UnimplementedAgentServiceHandler
	chain []auditchain.Record
}

func (s *chainImsd) ListAuditRecords(_ context.Context, req *connect.Request[agentv1.ListAuditRecordsRequest]) (*connect.Response[agentv1.ListAuditRecordsResponse], error) {
	var out []*agentv1.AuditRecord
	for _, r := range s.chain {
		if r.Seq > req.Msg.AfterSeq {
			out = append(out, &agentv1.AuditRecord{Chain: r.Chain, Seq: r.Seq, At: r.At, Kind: r.Kind, Actor: r.Actor,
				Subject: r.Subject, Data: r.Data, Prev: r.Prev, Hash: r.Hash})
		}
	}
	return connect.NewResponse(&agentv1.ListAuditRecordsResponse{Records: out}), nil
}

// A compromised imsd removes a record from its chain: agentd audit
// compare names it, and what imsd once wrote into it (its kind and
// subject, kept in the agent's copy as sent) is shown, never obeyed: an
// escape sequence there cannot rewrite the lines the customer reads.
func TestAuditCompareShowsARemovedRecord(t *testing.T) {
	srv := &chainImsd{}
	dir := bgImsd(t, srv)
	var copy []auditchain.Record
	var prev *auditchain.Record
	for i, subject := range []string{"job:job_1", "job:job_2\x1b[1A\x1b[2K\x1b]52;c;cm0gLXJmIC8=\a"} {
		r := auditchain.Next(prev, auditchain.Record{Chain: "ins_1", At: int64(i + 1), Kind: "job.acked", Actor: "agent:agt_1", Subject: subject, Data: "{}"})
		copy = append(copy, r)
		prev = &copy[len(copy)-1]
	}
	l, err := auditlog.Open(filepath.Join(auditlog.Dir(dir), auditlog.InstallFile), "ins_1")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.AppendCopy(copy); err != nil {
		t.Fatal(err)
	}
	l.Close()
	// imsd's chain now: record 1, then a record 3 where 2 was.
	third := auditchain.Next(&copy[0], auditchain.Record{Chain: "ins_1", At: 3, Kind: "job.acked", Actor: "agent:agt_1", Subject: "job:job_3", Data: "{}"})
	third.Seq = 3
	srv.chain = []auditchain.Record{copy[0], third}
	var out, errOut bytes.Buffer
	code := auditCmd(context.Background(), []string{"compare", "--state-dir", dir}, &out, &errOut, time.Now)
	if code != 1 || !strings.Contains(out.String(), "DISAGREE at record 2: missing from imsd") {
		t.Fatalf("audit compare of a chain with a record removed: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if strings.ContainsAny(out.String()+errOut.String(), "\x1b\a") {
		t.Fatalf("imsd's text reached the terminal as it was:\n%q", out.String()+errOut.String())
	}
}
