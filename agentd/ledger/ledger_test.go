package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

func TestRecordsKindSizeJobAndHash(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{Install: "ins_1"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []*agentv1.ConnectRequest{
		{Msg: &agentv1.ConnectRequest_Hello{Hello: &agentv1.Hello{AgentId: "agt_1"}}},
		{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: 1}}},
		{Msg: &agentv1.ConnectRequest_Ack{Ack: &agentv1.JobAck{JobId: "job_1", WriteId: 1}}},
		{Msg: &agentv1.ConnectRequest_Logs{Logs: &agentv1.JobLogs{JobId: "job_1", Lines: []*agentv1.LogLine{{Seq: 1, Text: "hello"}}}}},
		{Msg: &agentv1.ConnectRequest_Result{Result: &agentv1.JobResult{JobId: "job_1", Outputs: map[string]string{"url": "db"}}}},
	}
	var sums []string
	for _, m := range msgs {
		b, _ := proto.Marshal(m)
		l.Tap(m, b)
		s := sha256.Sum256(b)
		sums = append(sums, hex.EncodeToString(s[:]))
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	es, err := Read(dir, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ kind, job string }{{"hello", ""}, {"heartbeat", ""}, {"ack", "job_1"}, {"logs", "job_1"}, {"result", "job_1"}}
	if len(es) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(es), len(want), es)
	}
	for i, e := range es {
		b, _ := proto.Marshal(msgs[i])
		if e.Kind != want[i].kind || e.Job != want[i].job || e.Install != "ins_1" || e.Size != len(b) || e.SHA256 != sums[i] {
			t.Errorf("entry %d = %+v, want kind %s job %s size %d sha %s", i, e, want[i].kind, want[i].job, len(b), sums[i])
		}
		if e.Content != nil {
			t.Errorf("entry %d keeps content %s without the customer turning it on", i, e.Content)
		}
	}
	byKind, total := Stats(es)
	if len(byKind) != 5 || total.Messages != 5 {
		t.Fatalf("stats %+v total %+v", byKind, total)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestContentOnlyWhereTurnedOn(t *testing.T) {
	dir := t.TempDir()
	content, err := ParseContent("logs, outputs")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(dir, Options{Content: content})
	if err != nil {
		t.Fatal(err)
	}
	logs := &agentv1.JobLogs{JobId: "j", FencingToken: 7, Lines: []*agentv1.LogLine{{Seq: 1, Text: "applied 3 resources"}}}
	res := &agentv1.JobResult{JobId: "j", Error: "e", Outputs: map[string]string{"endpoint": "db.internal"}}
	l.RecordMessage("logs", "j", logs, nil)
	l.RecordMessage("result", "j", res, nil)
	l.RecordMessage("heartbeat", "", &agentv1.Heartbeat{Seq: 9}, nil)
	l.Close()
	es, err := Read(dir, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 || !strings.Contains(string(es[0].Content), "applied 3 resources") || strings.Contains(string(es[0].Content), "fencing") ||
		!strings.Contains(string(es[1].Content), "db.internal") || strings.Contains(string(es[1].Content), `"error"`) || es[2].Content != nil {
		t.Fatalf("entries: %+v", es)
	}
	if _, err := ParseContent("logs,inputs"); err == nil || !strings.Contains(err.Error(), `"inputs"`) {
		t.Fatalf("ParseContent(logs,inputs) = %v, want an error naming inputs", err)
	}
}

func TestRotatesAtMaxBytes(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{MaxBytes: 2000})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		l.RecordBytes("heartbeat", "", []byte{byte(i)})
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	for _, name := range []string{File, OldFile} {
		fi, err := os.Stat(filepath.Join(Dir(dir), name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 2000 {
			t.Errorf("%s is %d bytes, want at most 2000", name, fi.Size())
		}
	}
	es, err := Read(dir, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) == 0 || len(es) >= 100 {
		t.Fatalf("%d entries kept of 100, want the newest ones within two files", len(es))
	}
	last := es[len(es)-1]
	s := sha256.Sum256([]byte{99})
	if last.SHA256 != hex.EncodeToString(s[:]) {
		t.Fatalf("last entry is not the newest: %+v", last)
	}
}

func TestTornLastLineIsCutOff(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.RecordBytes("heartbeat", "", []byte("a"))
	l.Close()
	path := filepath.Join(Dir(dir), File)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"time":"2026-01-01T00:00:00Z","kind":"he`)
	f.Close()
	if es, err := Read(dir, time.Time{}); err != nil || len(es) != 1 {
		t.Fatalf("read with a torn line: %d entries, %v", len(es), err)
	}
	l, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.RecordBytes("heartbeat", "", []byte("b"))
	l.Close()
	es, err := Read(dir, time.Time{})
	if err != nil || len(es) != 2 {
		t.Fatalf("after reopening: %d entries, %v", len(es), err)
	}
	// A line that is not an entry is named.
	os.WriteFile(path, []byte("{}\nnot json\n"), 0o600)
	if _, err := Read(dir, time.Time{}); err == nil || !strings.Contains(err.Error(), File+":2") {
		t.Fatalf("Read of a bad line = %v, want it named with its line", err)
	}
}

func TestSince(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := Open(dir, Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	l.RecordBytes("old", "", nil)
	now = now.Add(time.Hour)
	l.RecordBytes("new", "", nil)
	l.Close()
	es, err := Read(dir, now.Add(-time.Minute))
	if err != nil || len(es) != 1 || es[0].Kind != "new" {
		t.Fatalf("since: %+v %v", es, err)
	}
}

func TestUnaryKind(t *testing.T) {
	for in, want := range map[string]string{
		"/byoc.agent.v1.AgentService/Enroll":           "enroll",
		"/byoc.agent.v1.AgentService/ListBreakGlass":   "list_break_glass",
		"/byoc.agent.v1.AgentService/ListAuditRecords": "list_audit_records",
	} {
		if got := UnaryKind(in); got != want {
			t.Errorf("UnaryKind(%s) = %s, want %s", in, got, want)
		}
	}
}

// BenchmarkRecord is the cost on the agent's stream of recording one
// heartbeat-sized message (the write is the writer goroutine's).
func BenchmarkRecord(b *testing.B) {
	l, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	m := &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: 1, Condition: &agentv1.AgentCondition{DiskUsedPercent: 40}}}}
	plain, _ := proto.Marshal(m)
	b.ReportAllocs()
	for b.Loop() {
		l.Tap(m, plain)
	}
}

// Entries the disk did not take are counted, and a "dropped" entry says
// how many once it takes them again; Flush reports the error.
func TestDroppedEntriesAreCounted(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.RecordBytes("heartbeat", "", []byte("a"))
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	// The disk stops taking writes (closing the file under the writer
	// raced with it).
	l.failWrites.Store(true)
	l.RecordBytes("heartbeat", "", []byte("b"))
	l.RecordBytes("heartbeat", "", []byte("c"))
	if err := l.Flush(); err == nil {
		t.Fatal("Flush after a failed write: no error")
	}
	l.failWrites.Store(false)
	l.RecordBytes("heartbeat", "", []byte("d"))
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	es, err := Read(dir, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	dropped := 0
	for _, e := range es {
		kinds = append(kinds, e.Kind)
		dropped += e.Count
	}
	if len(es) != 3 || dropped != 2 {
		t.Fatalf("entries %v (dropped %d), want heartbeat, then d with a dropped entry counting 2", kinds, dropped)
	}
}
