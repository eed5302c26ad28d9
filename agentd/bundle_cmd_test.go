package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// signedBundle is a bundle tar of id for agent ag-1 of install inst-1,
// signed by key.
func signedBundle(t *testing.T, key ed25519.PrivateKey, id string) *os.File {
	t.Helper()
	return craftedBundle(t, key, bundlefile.Manifest{Format: bundlefile.Format, Kind: bundlefile.KindBundle, ID: id, InstallID: "inst-1", AgentID: "ag-1"})
}

// craftedBundle is a bundle tar of manifest m (its files filled in),
// signed by key.
func craftedBundle(t *testing.T, key ed25519.PrivateKey, m bundlefile.Manifest) *os.File {
	t.Helper()
	return alteredBundle(t, key, m, nil)
}

// alteredBundle is craftedBundle with the manifest's bytes changed by
// alter (if not nil) after they were signed.
func alteredBundle(t *testing.T, key ed25519.PrivateKey, m bundlefile.Manifest, alter func(raw []byte) []byte) *os.File {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "jobs.sealed"), []byte("sealed"), 0o600); err != nil {
		t.Fatal(err)
	}
	files, err := bundlefile.Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Files = files
	raw, _ := json.Marshal(m)
	sig := agentproto.SignBundleManifest(key, raw)
	if alter != nil {
		raw = alter(raw)
	}
	var buf bytes.Buffer
	pub := key.Public().(ed25519.PublicKey)
	if err := bundlefile.Write(&buf, dir, raw, bundlefile.Signature{KeyID: agentproto.KeyID(pub), Signature: sig}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "b.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// openBundle opens f as agentd bundle import does, for the agent whose
// state directory is state.
func openBundle(t *testing.T, keys map[string]ed25519.PublicKey, state string, f *os.File) error {
	t.Helper()
	bundles := filepath.Join(state, "bundles")
	b, err := bundlefile.Open(f, filepath.Join(t.TempDir(), "staging"), func(raw []byte, m *bundlefile.Manifest, sig bundlefile.Signature) error {
		return checkBundleManifest(keys, "inst-1", "ag-1", bundles, agent.Newest{}, raw, m, sig)
	}, nil)
	if err == nil {
		// What the import writes next: the results, under the id.
		err = os.MkdirAll(filepath.Join(bundles, b.Manifest.ID), 0o700)
	}
	return err
}

// The id of a bundle names the directory its results are kept in: a
// bundle signed by a trusted imsd key, whose id is a path, is refused
// before anything is written (imsd no longer signs such a manifest, but
// the agent trusts a file name to nobody).
func TestBundleImportRefusesAnIDThatIsAPath(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{agentproto.KeyID(pub): pub}
	state := t.TempDir()
	for _, id := range []string{"../identity", "../../outside", "bdl_/../../x", "bdl_a", ""} {
		err := openBundle(t, keys, state, signedBundle(t, priv, id))
		if err == nil || !strings.Contains(err.Error(), "is not one imsd makes") {
			t.Errorf("bundle id %q: %v", id, err)
		}
	}
	if ents, _ := os.ReadDir(state); len(ents) > 0 {
		t.Fatalf("the refused bundles wrote %v into the state directory", ents)
	}
}

// A bundle replayed after a newer one was imported (a rollback: the
// older bundle's jobs are signed, unexpired and never run here) is
// refused; the same bundle again resumes it, and a newer one imports.
func TestBundleImportRefusesAnOlderBundle(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{agentproto.KeyID(pub): pub}
	state := t.TempDir()
	t0 := time.Unix(1_700_000_000, 0)
	older, newer, newest := bundleID(t0), bundleID(t0.Add(time.Hour)), bundleID(t0.Add(2*time.Hour))
	if err := openBundle(t, keys, state, signedBundle(t, priv, newer)); err != nil {
		t.Fatal(err)
	}
	err := openBundle(t, keys, state, signedBundle(t, priv, older))
	if err == nil || !strings.Contains(err.Error(), "bundle "+older+" was made before bundle "+newer+", which was imported here already") {
		t.Fatalf("the older bundle after the newer: %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, "bundles", older)); !os.IsNotExist(err) {
		t.Fatalf("the refused bundle left its directory: %v", err)
	}
	if err := openBundle(t, keys, state, signedBundle(t, priv, newer)); err != nil {
		t.Fatalf("the same bundle again: %v", err)
	}
	if err := openBundle(t, keys, state, signedBundle(t, priv, newest)); err != nil {
		t.Fatalf("a newer bundle: %v", err)
	}
}

// bundleID is a bundle id as imsd makes them (auth.NewSortableID) at t.
func bundleID(t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	return "bdl_" + strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// A bundle made for another install's agent, or for another agent of
// this install, a results file passed off as a bundle, and a bundle
// signed by a key the agent never pinned (or not signed) are refused
// before anything is written.
func TestBundleImportRefusesAnotherAgentsBundle(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{agentproto.KeyID(pub): pub}
	state := t.TempDir()
	id := bundleID(time.Unix(1_700_000_000, 0))
	m := func(kind, install, agent string) bundlefile.Manifest {
		return bundlefile.Manifest{Format: bundlefile.Format, Kind: kind, ID: id, InstallID: install, AgentID: agent}
	}
	for _, bad := range []struct {
		name string
		f    *os.File
		want string
	}{
		{"another install's", craftedBundle(t, priv, m(bundlefile.KindBundle, "inst-2", "ag-9")), "the bundle is for agent ag-9 of install inst-2, and this is agent ag-1 of install inst-1"},
		{"another agent's of this install", craftedBundle(t, priv, m(bundlefile.KindBundle, "inst-1", "ag-2")), "the bundle is for agent ag-2"},
		{"a results file", craftedBundle(t, priv, m(bundlefile.KindResults, "inst-1", "ag-1")), "a results file, not a bundle"},
		{"signed by a key not pinned", craftedBundle(t, other, m(bundlefile.KindBundle, "inst-1", "ag-1")), "unknown"},
	} {
		if err := openBundle(t, keys, state, bad.f); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s bundle: %v, want %q", bad.name, err, bad.want)
		}
	}
	if ents, _ := os.ReadDir(state); len(ents) > 0 {
		t.Fatalf("the refused bundles wrote %v into the state directory", ents)
	}
}

// A job's log in its results keeps the first lines, each cut to the
// longest line imsd takes, within maxResultLogLines and
// maxResultLogBytes, and then says how many were left out: imsd keeps
// no more of an imported job's log than a live agent's log batch, and
// what the agent carries fits in it whole.
func TestResultLogBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		line string
		n    int
		kept int
	}{
		{"few", "hello", 10, 10},
		{"many", "hello", 3 * maxResultLogLines, maxResultLogLines},
		{"long", strings.Repeat("x", 1<<20), 100, maxResultLogBytes / agent.MaxLineBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l resultLog
			for range tc.n {
				l.add(tc.line)
			}
			got := l.done()
			size := 0
			for _, s := range got {
				if len(s) > agent.MaxLineBytes {
					t.Fatalf("a line of %d bytes", len(s))
				}
				size += len(s)
			}
			if size > maxResultLogBytes+1024 || len(got) > agentapiMaxLogBatch {
				t.Fatalf("%d lines, %d bytes kept", len(got), size)
			}
			if tc.kept == tc.n {
				if len(got) != tc.n {
					t.Fatalf("%d lines of %d kept", len(got), tc.n)
				}
				return
			}
			want := fmt.Sprintf("[agentd] %d more log lines were left out", tc.n-tc.kept)
			if len(got) != tc.kept+1 || !strings.HasPrefix(got[len(got)-1], want) {
				t.Fatalf("%d lines, the last %.100q; want %d and %q", len(got), got[len(got)-1], tc.kept+1, want)
			}
		})
	}
}

// agentapiMaxLogBatch is imsd's agentapi.MaxLogBatch (agentd does not
// import imsd).
const agentapiMaxLogBatch = 1000
