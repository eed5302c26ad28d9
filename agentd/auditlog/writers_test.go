package auditlog_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/internal/auditchain"
)

// addN adds n records of actor to l.
func addN(t *testing.T, l *auditlog.Log, actor string, n int) {
	t.Helper()
	for i := range n {
		if _, err := l.Add(auditchain.Record{At: int64(i), Kind: "k", Actor: actor, Subject: "s", Data: "{}"}); err != nil {
			t.Fatal(err)
		}
	}
}

// wantChain checks the file holds n records forming one chain.
func wantChain(t *testing.T, path string, n int) []auditchain.Record {
	t.Helper()
	rs, err := auditlog.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if p := auditchain.Verify(rs); p != nil || len(rs) != n {
		t.Fatalf("the journal holds %d records (want %d); its chain: %v", len(rs), n, p)
	}
	return rs
}

// Two writers of one journal, each with the file open since before the
// other appended (the running agent, and agentd plugin install recording
// a refusal): every record follows the one on disk before it, none is
// overwritten, and the file verifies as one chain.
func TestJournalTwoWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit", auditlog.AgentFile)
	agent, err := auditlog.Open(path, "agent:agt_1")
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	addN(t, agent, "agent", 1)
	cmd, err := auditlog.Open(path, "agent:agt_1")
	if err != nil {
		t.Fatal(err)
	}
	addN(t, cmd, "cmd", 1)
	addN(t, agent, "agent", 1)
	addN(t, cmd, "cmd", 2)
	cmd.Close()
	addN(t, agent, "agent", 1)
	rs := wantChain(t, path, 6)
	var actors []string
	for _, r := range rs {
		actors = append(actors, r.Actor)
	}
	if got := fmt.Sprint(actors); got != "[agent cmd agent cmd cmd agent]" {
		t.Fatalf("writers in file order: %s", got)
	}
	if seq, hash := agent.Head(); seq != 6 || hash != rs[5].Hash {
		t.Fatalf("the agent's head: %d %s", seq, hash)
	}
}

// The same across processes, appending at once: a second process (this
// test binary again) adds records while this one does; the file holds
// every record of both, as one chain.
func TestJournalWriterProcesses(t *testing.T) {
	if path := os.Getenv("AUDITLOG_TEST_WRITER"); path != "" {
		l, err := auditlog.Open(path, "agent:agt_1")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(os.Getenv("AUDITLOG_TEST_N"))
		addN(t, l, "child", n)
		l.Close()
		return
	}
	const n = 200
	path := filepath.Join(t.TempDir(), "audit", auditlog.AgentFile)
	l, err := auditlog.Open(path, "agent:agt_1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	child := exec.Command(os.Args[0], "-test.run=^TestJournalWriterProcesses$", "-test.count=1")
	child.Env = append(os.Environ(), "AUDITLOG_TEST_WRITER="+path, "AUDITLOG_TEST_N="+strconv.Itoa(n))
	var out bytes.Buffer
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	addN(t, l, "parent", n)
	if err := child.Wait(); err != nil {
		t.Fatalf("the other writer: %v\n%s", err, out.Bytes())
	}
	rs := wantChain(t, path, 2*n)
	count := map[string]int{}
	for _, r := range rs {
		count[r.Actor]++
	}
	if count["parent"] != n || count["child"] != n {
		t.Fatalf("records by writer: %v", count)
	}
}
