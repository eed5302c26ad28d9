package operatorapi

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// bundleService is an operator service on a real store holding app shop
// and its install acme (inst-1), with a job signing key.
func bundleService(t *testing.T) (*Service, *store.Store, auth.SigningKey, time.Time) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "imsd.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	t0 := time.Unix(1_700_000_000, 0)
	if err := st.CreateApp(ctx, store.App{ID: "app-1", Name: "shop", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateInstall(ctx, store.Install{ID: "inst-1", AppID: "app-1", Name: "acme", CreatedAt: t0},
		store.EnrollmentToken{Hash: "h", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(nil)
	key := auth.NewSigningKey(priv)
	s := New(st, dispatch.NewHub(), Config{SigningKey: key}, func() time.Time { return t0 }, slog.New(slog.DiscardHandler))
	return s, st, key, t0
}

// An operator who may create bundles for an install (the vendor's side)
// has imsd sign a manifest that names its bundle otherwise than
// CreateBundle did: another id (the agent keeps a bundle's results under
// it: "../identity" would put them beside the agent's key; a later id
// would make an old bundle pass for a new one), another revision (imsd
// records the install at the results' revision), another agent, or a
// results file's kind, or another journal head of the agent (its results
// file would carry the journal after it). imsd signs none of them: its signature over the
// jobs binds them to the bundle CreateBundle made.
func TestSignBundleBindsTheBundle(t *testing.T) {
	ctx := context.Background()
	s, _, key, t0 := bundleService(t)
	view, sealed := []byte(`[{"step":"web"}]`+"\n"), []byte("sealed to the agent")
	of := agentproto.BundleJobsOf{InstallID: "inst-1", AgentID: "ag-1", BundleID: auth.NewSortableID("bdl_", t0), Revision: 3, WorkflowKind: "update",
		JournalSeq: 7, JournalHash: strings.Repeat("7", 64)}
	jobsSig := agentproto.SignBundleJobs(key.Private, of, view, sealed)
	vs, ss := sha256.Sum256(view), sha256.Sum256(sealed)
	manifest := func(change func(*bundlefile.Manifest)) []byte {
		m := bundlefile.Manifest{Format: bundlefile.Format, Kind: bundlefile.KindBundle, ID: of.BundleID, InstallID: of.InstallID, AgentID: of.AgentID,
			Revision: of.Revision, WorkflowKind: of.WorkflowKind, JournalSeq: of.JournalSeq, JournalHash: of.JournalHash, Created: t0, Files: []bundlefile.File{
				{Path: BundleJobsFile, Size: int64(len(view)), SHA256: hex.EncodeToString(vs[:])},
				{Path: BundleSealedJobsFile, Size: int64(len(sealed)), SHA256: hex.EncodeToString(ss[:])}}}
		if change != nil {
			change(&m)
		}
		b, _ := json.Marshal(m)
		return b
	}
	sign := func(raw []byte) error {
		_, err := s.SignBundle(ctx, connect.NewRequest(&imsv1.SignBundleRequest{Install: "acme", Manifest: raw, JobsJson: view, JobsSealed: sealed, JobsSignature: jobsSig}))
		return err
	}
	if err := sign(manifest(nil)); err != nil {
		t.Fatalf("the manifest of the bundle CreateBundle made: %v", err)
	}
	for _, bad := range []struct {
		name   string
		change func(*bundlefile.Manifest)
		want   string
	}{
		{"an id that is a path", func(m *bundlefile.Manifest) { m.ID = "../identity" }, `manifest: id "../identity" is not a bundle id`},
		{"an id that is a path under bdl_", func(m *bundlefile.Manifest) { m.ID = "bdl_/../../x" }, "is not a bundle id"},
		{"a later bundle's id", func(m *bundlefile.Manifest) { m.ID = auth.NewSortableID("bdl_", t0.Add(time.Hour)) }, "are not the jobs this imsd made for bundle bdl_"},
		{"another revision", func(m *bundlefile.Manifest) { m.Revision = 9 }, "revision 9"},
		{"another workflow kind", func(m *bundlefile.Manifest) { m.WorkflowKind = "provision" }, "are not the jobs this imsd made"},
		{"another agent", func(m *bundlefile.Manifest) { m.AgentID = "ag-2" }, "(agent ag-2,"},
		{"an older journal head", func(m *bundlefile.Manifest) { m.JournalSeq = 3 }, "are not the jobs this imsd made"},
		{"another journal head hash", func(m *bundlefile.Manifest) { m.JournalHash = strings.Repeat("8", 64) }, "are not the jobs this imsd made"},
		{"no journal head", func(m *bundlefile.Manifest) { m.JournalSeq, m.JournalHash = 0, "" }, "are not the jobs this imsd made"},
		{"a results file's kind", func(m *bundlefile.Manifest) { m.Kind = bundlefile.KindResults }, `manifest: kind "results", not "bundle"`},
	} {
		err := sign(manifest(bad.change))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: SignBundle: %v, want an error containing %q", bad.name, err, bad.want)
		}
	}
}

// imsd key rotate while imsd runs: imsd keeps signing online jobs with
// the key it loaded until it restarts, but makes no bundle with it (one
// would be valid up to 90 days after the rotation, and its results
// import for auth.PreviousKeyUse after the rotation only). It used to
// sign bundles with the replaced key until the restart.
func TestCreateBundleRefusedAfterARotation(t *testing.T) {
	s, _, _, _ := bundleService(t)
	keyFile := filepath.Join(t.TempDir(), "signing.key")
	key, err := auth.LoadSigningKey(keyFile, true)
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.SigningKey, s.cfg.SigningKeyID, s.cfg.SigningKeyFile = key, key.ID, keyFile
	create := func() error {
		_, err := s.CreateBundle(context.Background(), connect.NewRequest(&imsv1.CreateBundleRequest{Install: "acme"}))
		return err
	}
	// The key file holds the key imsd signs with: past the check (the
	// service has no workflow engine here).
	if err := create(); err == nil || strings.Contains(err.Error(), "key file") {
		t.Fatalf("a bundle with the key file unchanged: %v", err)
	}
	r, err := auth.RotateSigningKey(keyFile, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := create(); err == nil || !strings.Contains(err.Error(), "this imsd signs with key "+key.ID+", and its key file "+keyFile+" holds key "+r.Next.ID+" now (imsd key rotate ran): restart imsd") {
		t.Fatalf("a bundle after imsd key rotate, imsd not restarted: %v", err)
	}
}
