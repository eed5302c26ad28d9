package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// A results file carries the agent's journal after the head the bundle
// names (imsd took the records up to it): the whole journal when it
// names none; a head that is not a record of this journal (beyond it,
// or another hash) is refused, naming the bundle and the record.
func TestJournalAfterHead(t *testing.T) {
	var journal bytes.Buffer
	var prev *auditchain.Record
	var rs []auditchain.Record
	for range 5 {
		r := auditchain.Next(prev, auditchain.Record{Chain: "agent:ag-1", Kind: "bundle.job.started", Data: "{}"})
		prev = &r
		rs = append(rs, r)
		b, _ := json.Marshal(r)
		journal.Write(append(b, '\n'))
	}
	lines := strings.SplitAfter(journal.String(), "\n")
	if got, err := journalAfter(journal.Bytes(), "bdl_x", journalHead{}); err != nil || !bytes.Equal(got, journal.Bytes()) {
		t.Fatalf("no head: %q, %v", got, err)
	}
	if got, err := journalAfter(journal.Bytes(), "bdl_x", journalHead{Seq: 3, Hash: rs[2].Hash}); err != nil || string(got) != lines[3]+lines[4] {
		t.Fatalf("head 3: %q, %v", got, err)
	}
	if got, err := journalAfter(journal.Bytes(), "bdl_x", journalHead{Seq: 5, Hash: rs[4].Hash}); err != nil || len(got) != 0 {
		t.Fatalf("head 5: %q, %v", got, err)
	}
	for _, h := range []journalHead{{Seq: 3, Hash: rs[1].Hash}, {Seq: 9, Hash: rs[4].Hash}} {
		_, err := journalAfter(journal.Bytes(), "bdl_x", h)
		if want := "bundle bdl_x names the agent's journal record " + strconv.FormatInt(h.Seq, 10) + " with hash " + h.Hash; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("head %d: %v, want %q", h.Seq, err, want)
		}
	}
}

// The journal head a bundle names is in its manifest, which imsd signed:
// a bundle whose head was changed after signing is refused.
func TestBundleImportRefusesATamperedJournalHead(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{agentproto.KeyID(pub): pub}
	state := t.TempDir()
	m := bundlefile.Manifest{Format: bundlefile.Format, Kind: bundlefile.KindBundle, ID: bundleID(time.Unix(1_700_000_000, 0)), InstallID: "inst-1", AgentID: "ag-1",
		JournalSeq: 40, JournalHash: strings.Repeat("a", 64)}
	f := alteredBundle(t, priv, m, func(raw []byte) []byte {
		tampered := bytes.Replace(raw, []byte(`"journal_seq":40`), []byte(`"journal_seq":4`), 1)
		if bytes.Equal(tampered, raw) {
			t.Fatalf("no journal_seq in %s", raw)
		}
		return tampered
	})
	if err := openBundle(t, keys, state, f); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Fatalf("a bundle whose journal head was changed after signing: %v", err)
	}
	if ents, _ := os.ReadDir(state); len(ents) > 0 {
		t.Fatalf("the refused bundle wrote %v into the state directory", ents)
	}
}
