package main

import (
	"context"
	"crypto/ed25519"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/internal/plural"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
)

const auditUsage = `usage: agentd audit [--state-dir DIR] verify|compare

  verify    check the agent's copy of its install's audit chain
            (STATE/audit/install.jsonl), imsd's signed checkpoints of it
            (STATE/audit/install.checkpoints.jsonl) and the agent's own
            journal (STATE/audit/agent.jsonl); name the first record
            changed, removed or inserted, and the first that imsd never
            signed
  compare   fetch imsd's chain of the install (a call signed with the
            agent's key) and name the first record where it and the
            agent's copy disagree

flags:
  --state-dir DIR   the agent's state directory; also $BYOC_STATE_DIR
  --ims URL         imsd (compare; default: the one the agent enrolled with)

Exit status: 0 when everything agrees, 1 on a problem found, 2 on misuse.
`

// auditCmd runs `agentd audit`.
func auditCmd(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) int {
	fs := flag.NewFlagSet("agentd audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), auditUsage) }
	stateDir := fs.String("state-dir", os.Getenv("BYOC_STATE_DIR"), "the agent's state `directory`; also $BYOC_STATE_DIR")
	ims := fs.String("ims", os.Getenv("BYOC_IMS_URL"), "imsd `URL`")
	words, code := parseWords(fs, args, stdout)
	if words == nil {
		return code
	}
	if len(words) != 1 || (words[0] != "verify" && words[0] != "compare") {
		fmt.Fprintf(stderr, "agentd audit: want verify or compare, got %q\n\n%s", strings.Join(words, " "), auditUsage)
		return 2
	}
	dir, id, code := agentIdentity("agentd audit", *stateDir, stderr)
	if code != 0 {
		return code
	}
	copyPath := filepath.Join(auditlog.Dir(dir), auditlog.InstallFile)
	local, err := auditlog.ReadFile(copyPath)
	if err != nil {
		fmt.Fprintf(stderr, "agentd audit: %v\n", err)
		return 1
	}
	if words[0] == "verify" {
		bad := verifyFile(stdout, copyPath, id.InstallID, local)
		if !bad && len(local) > 0 {
			bad = verifyCheckpoints(stdout, filepath.Join(auditlog.Dir(dir), auditlog.CheckpointFile), id, local)
		}
		journalPath := filepath.Join(auditlog.Dir(dir), auditlog.AgentFile)
		journal, err := auditlog.ReadFile(journalPath)
		if err != nil {
			fmt.Fprintf(stderr, "agentd audit: %v\n", err)
			return 1
		}
		bad = verifyFile(stdout, journalPath, auditlog.AgentChain(id.AgentID), journal) || bad
		if bad {
			return 1
		}
		return 0
	}
	if *ims == "" {
		*ims = id.IMSURL
	}
	client, done := commandClient(dir, id.InstallID, *ims, stderr)
	defer done()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	remote, err := fetchChain(ctx, client, id, now)
	if err != nil {
		fmt.Fprintf(stderr, "agentd audit compare: read imsd's chain of install %s from %s: %s\n", id.InstallID, *ims, shown(err.Error()))
		return 1
	}
	fmt.Fprintf(stdout, "the agent's copy (%s): %s; imsd's chain of install %s: %s\n", copyPath, plural.Count(len(local), "record"), id.InstallID, plural.Count(len(remote), "record"))
	if d := auditlog.Compare(local, remote); d != nil {
		// The records' text is imsd's (kinds, subjects, data): shown,
		// not obeyed, like every other text imsd sent.
		fmt.Fprintf(stdout, "DISAGREE at record %d: %s: %s\n", d.Seq, d.What, shown(d.Detail))
		if p := auditchain.Verify(remote); p != nil {
			fmt.Fprintf(stdout, "imsd's chain does not verify: %s\n", shown(p.Error()))
		}
		if p := auditchain.Verify(local); p != nil {
			fmt.Fprintf(stdout, "the agent's copy does not verify: %s\n", shown(p.Error()))
		}
		return 1
	}
	if n := len(remote) - len(local); n > 0 {
		fmt.Fprintf(stdout, "they agree on every record the agent holds; imsd's chain has %d more, not received yet\n", n)
	} else {
		fmt.Fprintln(stdout, "they agree on every record")
	}
	return 0
}

// verifyFile prints what auditchain.Verify finds in one file and reports
// whether it found a problem.
func verifyFile(w io.Writer, path, chain string, rs []auditchain.Record) bool {
	if len(rs) == 0 {
		fmt.Fprintf(w, "%s: no records\n", path)
		return false
	}
	if rs[0].Chain != chain {
		fmt.Fprintf(w, "%s: record %d inserted (it names chain %q; the file is chain %q's)\n", path, rs[0].Seq, rs[0].Chain, chain)
		return true
	}
	if p := auditchain.Verify(rs); p != nil {
		fmt.Fprintf(w, "%s: record %d %s (%s)\n", path, p.Seq, p.What, shown(p.Detail))
		return true
	}
	last := rs[len(rs)-1]
	fmt.Fprintf(w, "%s: %s, intact (last: record %d, hash %s)\n", path, plural.Count(len(rs), "record"), last.Seq, last.Hash)
	return false
}

// verifyCheckpoints checks that imsd's signed checkpoints cover every
// record of the copy (a record that links but that imsd never vouched
// for was added by someone else), prints what it finds and reports
// whether it found a problem.
func verifyCheckpoints(w io.Writer, path string, id identity.Identity, rs []auditchain.Record) bool {
	cps, err := auditlog.ReadCheckpoints(path)
	if err != nil {
		fmt.Fprintf(w, "%s: %v\n", path, err)
		return true
	}
	keys := make(map[string]ed25519.PublicKey, len(id.IMSDKeys))
	for _, k := range id.IMSDKeys {
		keys[agentproto.KeyID(k)] = k
	}
	signed, err := auditlog.CheckCheckpoints(rs, cps, id.InstallID, keys)
	if err != nil {
		fmt.Fprintf(w, "%s: %v\n", path, err)
		return true
	}
	fmt.Fprintf(w, "%s: every record signed by imsd (checkpoint of record %d)\n", path, signed)
	return false
}

// fetchChain reads imsd's chain of the agent's install, page by page.
func fetchChain(ctx context.Context, c agentv1connect.AgentServiceClient, id identity.Identity, now func() time.Time) ([]auditchain.Record, error) {
	var out []auditchain.Record
	var after int64
	for {
		t := now()
		r, err := c.ListAuditRecords(ctx, connect.NewRequest(&agentv1.ListAuditRecordsRequest{
			AgentId: id.AgentID, Time: timestamppb.New(t), Signature: agentproto.SignListAudit(id.PrivateKey, id.AgentID, t),
			AfterSeq: after,
		}))
		if err != nil {
			return nil, err
		}
		if len(r.Msg.Records) == 0 {
			return out, nil
		}
		for _, x := range r.Msg.Records {
			out = append(out, auditchain.Record{Chain: x.Chain, Seq: x.Seq, At: x.At, Kind: x.Kind, Actor: x.Actor,
				Subject: x.Subject, Data: x.Data, Prev: x.Prev, Hash: x.Hash})
		}
		after = out[len(out)-1].Seq
	}
}
