package auditlog_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/internal/auditchain"
)

// A torn last line (a crash mid-append) is cut off at the next start.
func TestAuditLogCutsATornLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit", auditlog.InstallFile)
	l, err := auditlog.Open(path, "ins_1")
	if err != nil {
		t.Fatal(err)
	}
	r1 := auditchain.Next(nil, auditchain.Record{Chain: "ins_1", Kind: "a", Data: "{}"})
	if err := l.AppendCopy([]auditchain.Record{r1}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	fh, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	fh.WriteString(`{"chain":"ins_1","seq":2,"at"`)
	fh.Close()
	l, err = auditlog.Open(path, "ins_1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if seq, hash := l.Head(); seq != 1 || hash != r1.Hash {
		t.Fatalf("head %d %s, want record 1", seq, hash)
	}
	r2 := auditchain.Next(&r1, auditchain.Record{Chain: "ins_1", Kind: "b", Data: "{}"})
	if err := l.AppendCopy([]auditchain.Record{r2}); err != nil {
		t.Fatal(err)
	}
	rs, err := auditlog.ReadFile(path)
	if err != nil || len(rs) != 2 || auditchain.Verify(rs) != nil {
		t.Fatalf("after the torn line: %v %+v", err, rs)
	}
}

func chain(n int) []auditchain.Record {
	var rs []auditchain.Record
	for i := range n {
		var prev *auditchain.Record
		if i > 0 {
			prev = &rs[i-1]
		}
		rs = append(rs, auditchain.Next(prev, auditchain.Record{Chain: "ins_1", At: int64(i), Kind: "k", Subject: "s", Data: "{}"}))
	}
	return rs
}

// Compare names the first record where the agent's copy and imsd's chain
// disagree, and how.
func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		name       string
		copy, imsd func([]auditchain.Record) []auditchain.Record
		seq        int64
		what       string
	}{
		{"same", same, same, 0, ""},
		{"imsd ahead", func(rs []auditchain.Record) []auditchain.Record { return rs[:3] }, same, 0, ""},
		{"edited in imsd", same, func(rs []auditchain.Record) []auditchain.Record { rs[2].Actor = "x"; return rs }, 3, "differs"},
		{"deleted in imsd", same, func(rs []auditchain.Record) []auditchain.Record { return append(rs[:1:1], rs[2:]...) }, 2, "missing from imsd"},
		{"last deleted in imsd", same, func(rs []auditchain.Record) []auditchain.Record { return rs[:4] }, 5, "missing from imsd"},
		{"deleted in the copy", func(rs []auditchain.Record) []auditchain.Record { return append(rs[:1:1], rs[2:]...) }, same, 2, "missing from the copy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := auditlog.Compare(tc.copy(chain(5)), tc.imsd(chain(5)))
			if tc.what == "" {
				if d != nil {
					t.Fatalf("Compare: %v, want agreement", d)
				}
				return
			}
			if d == nil || d.Seq != tc.seq || d.What != tc.what {
				t.Fatalf("Compare: %v, want record %d %s", d, tc.seq, tc.what)
			}
		})
	}
}

func same(rs []auditchain.Record) []auditchain.Record { return rs }

// Open reads only the file's end, however long the file: the head of a
// copy of several chunks' worth of records is its last one.
func TestOpenFindsTheHeadOfALongFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit", auditlog.InstallFile)
	l, err := auditlog.Open(path, "ins_1")
	if err != nil {
		t.Fatal(err)
	}
	rs := chain(2000) // about 400 KB
	if err := l.AppendCopy(rs); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, err = auditlog.Open(path, "ins_1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if seq, hash := l.Head(); seq != 2000 || hash != rs[1999].Hash {
		t.Fatalf("head %d %s, want record 2000", seq, hash)
	}
	next := auditchain.Next(&rs[1999], auditchain.Record{Chain: "ins_1", Kind: "k", Data: "{}"})
	if err := l.AppendCopy([]auditchain.Record{next}); err != nil {
		t.Fatal(err)
	}
	got, err := auditlog.ReadFile(path)
	if err != nil || len(got) != 2001 || auditchain.Verify(got) != nil {
		t.Fatalf("after reopening: %v, %d records", err, len(got))
	}
}

// Open makes what it changes durable before a record follows: a new file
// synced and its directory (and a new directory's parent) synced; a
// torn last line's cut synced. A power cut cannot be made here, so the
// test watches the syncs through a seam, and what the file holds at each.
func TestOpenSyncsWhatItCreatesAndCuts(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "audit")
	path := filepath.Join(dir, auditlog.InstallFile)
	var syncs []string
	restore := auditlog.SetSyncs(func(f *os.File) error {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		syncs = append(syncs, fmt.Sprintf("file %s size %d", filepath.Base(f.Name()), fi.Size()))
		return f.Sync()
	}, func(d string) error {
		syncs = append(syncs, "dir "+d)
		return nil
	})
	defer restore()

	l, err := auditlog.Open(path, "ins_1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"file install.jsonl size 0", "dir " + dir, "dir " + root}
	if strings.Join(syncs, "; ") != strings.Join(want, "; ") {
		t.Errorf("creating: syncs %q, want %q", syncs, want)
	}
	r1 := auditchain.Next(nil, auditchain.Record{Chain: "ins_1", Kind: "a", Data: "{}"})
	if err := l.AppendCopy([]auditchain.Record{r1}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	fi, _ := os.Stat(path)
	whole := fi.Size()

	// Opening it again, whole: nothing to sync.
	syncs = nil
	if l, err = auditlog.Open(path, "ins_1"); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if len(syncs) != 0 {
		t.Errorf("reopening a whole file: syncs %q", syncs)
	}

	// A torn last line: cut, and the cut synced.
	fh, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	fh.WriteString(`{"chain":"ins_1","seq":2`)
	fh.Close()
	syncs = nil
	if l, err = auditlog.Open(path, "ins_1"); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if want := fmt.Sprintf("file install.jsonl size %d", whole); len(syncs) != 1 || syncs[0] != want {
		t.Errorf("cutting a torn line: syncs %q, want %q", syncs, want)
	}
}
