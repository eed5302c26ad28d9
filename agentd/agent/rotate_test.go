package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// A rotation of the agent's key started while it runs: the agent
// announces the next key in its hello, endorsed by its current key, and
// keeps its key while imsd does not record it (an older imsd); once a
// welcome names the next key, it re-signs the customer's control file,
// saves identity.json with the key, reconnects under it, and journals
// both steps.
func TestRotationWaitsForIMSDThenCompletes(t *testing.T) {
	dir := t.TempDir()
	f := &fakeIMS{}
	var record atomic.Bool
	hellos := make(chan *agentv1.Hello, 10)
	f.welcomeFor = func(h *agentv1.Hello) *agentv1.Welcome {
		hellos <- h
		w := &agentv1.Welcome{InstallId: "ins_1", HeartbeatIntervalMs: 100, LeaseDurationMs: 600}
		if nk := h.GetNextKey(); nk != nil && record.Load() {
			w.NextKeyId = agentproto.KeyID(nk.PublicKey)
			f.agentKey.Store(ed25519.PublicKey(nk.PublicKey)) // imsd accepts the next key from now on
		}
		return w
	}
	// The agent, enrolled, with the customer's permissions signed.
	url := serveFake(t, f)
	key, _ := identity.NewKey()
	id := identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: url, PrivateKey: key, IMSDKeys: []ed25519.PublicKey{f.key.Public().(ed25519.PublicKey)}}
	if err := identity.Save(dir, id); err != nil {
		t.Fatal(err)
	}
	if _, err := permissions.Update(dir, time.Now(), "alice", func(s *permissions.State) { s.Deprovision = false }); err != nil {
		t.Fatal(err)
	}
	a, _ := startFakeIn(t, f, &runRecorder{}, dir, nil)
	if h := <-hellos; h.NextKey != nil {
		t.Fatal("a hello announces a next key before any rotation")
	}
	<-f.streams
	r, err := identity.BeginRotation(dir, time.Now(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	// The agent notices it, reconnects and announces it.
	h := <-hellos
	st := agentproto.AgentKeyRotation{AgentID: "agt_1", Current: key.Public().(ed25519.PublicKey), Next: h.GetNextKey().GetPublicKey(),
		Endorsement: h.GetNextKey().GetEndorsement(), Proof: h.GetNextKey().GetProof()}
	if !st.Verify() || !st.Next.Equal(r.Public()) {
		t.Fatalf("the hello's next key: %+v", h.GetNextKey())
	}
	fs := <-f.streams
	fs.nextHeartbeat(t) // past the welcome, which did not name the next key
	if cur, _ := identity.Load(dir); !cur.PrivateKey.Equal(key) || a.rotation() == nil {
		t.Fatal("the agent switched keys before imsd recorded the next")
	}
	// imsd records it at the next hello.
	record.Store(true)
	fs.down <- nil
	if h := <-hellos; h.NextKey == nil {
		t.Fatal("the rotation was not announced again")
	}
	if h := <-hellos; h.NextKey != nil {
		t.Fatal("the hello under the new key announces a rotation")
	}
	eventually(t, "the agent to hold the new key", func() bool { return a.privateKey().Equal(r.PrivateKey) && a.rotation() == nil })
	cur, err := identity.Load(dir)
	if err != nil || !cur.PrivateKey.Equal(r.PrivateKey) {
		t.Fatalf("identity.json after the rotation: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, identity.RotationFileName)); !os.IsNotExist(err) {
		t.Fatalf("the rotation file is left: %v", err)
	}
	if st, _, err := permissions.LoadWith(dir, permissions.KeyOf(cur), 0); err != nil || st.Deprovision {
		t.Fatalf("the permissions with the new key alone: %+v, %v", st, err)
	}
	if _, err := a.permissions(); err != nil {
		t.Fatalf("the agent refuses its permissions after the rotation: %v", err)
	}
	rs := agentJournal(t, dir)
	kinds := map[string]int{}
	for _, r := range rs {
		kinds[r.Kind]++
	}
	if kinds[KindKeyRotationPending] != 1 || kinds[KindKeyRotated] != 1 {
		t.Fatalf("journal: %v", kinds)
	}
}

// The customer's revocation (identity.Revoke) while the agent runs a job:
// within a look at the state dir the job is stopped and Run returns the
// revocation; a new agent on the state dir does not start.
func TestRevokedAgentStops(t *testing.T) {
	dir := t.TempDir()
	f := &fakeIMS{}
	url := serveFake(t, f)
	key, _ := identity.NewKey()
	if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: url, PrivateKey: key,
		IMSDKeys: []ed25519.PublicKey{f.key.Public().(ed25519.PublicKey)}}); err != nil {
		t.Fatal(err)
	}
	f.agentKey.Store(key.Public().(ed25519.PublicKey))
	rr := &runRecorder{release: make(chan struct{})}
	cfg := Config{IMSURL: url, StateDir: dir, Runner: rr, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond, FlushInterval: 5 * time.Millisecond, PermissionsPoll: 20 * time.Millisecond}
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	fs := <-f.streams
	fs.down <- f.assign("job_1", 1, "ins_1")
	ack := fs.next(t).GetAck()
	fs.down <- &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: ack.GetWriteId()}}}
	eventually(t, "the job to start", func() bool { s, _ := rr.get(); return len(s) == 1 })
	if err := identity.Revoke(dir, identity.Revocation{At: time.Now(), By: "alice", Reason: "contract ended"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, identity.ErrRevoked) || !strings.Contains(err.Error(), "contract ended") {
			t.Fatalf("Run returned %v, want the revocation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked agent runs on")
	}
	if _, stopped := rr.get(); len(stopped) != 1 {
		t.Fatalf("stopped jobs: %v", stopped)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, identity.FileName)); strings.Contains(string(b), `"private_key": "`) {
		t.Fatalf("the key is left in identity.json:\n%s", b)
	}
	if _, err := New(context.Background(), cfg); !errors.Is(err, identity.ErrRevoked) {
		t.Fatalf("a new agent on the revoked state dir: %v", err)
	}
	if _, err := permissions.Load(dir); !errors.Is(err, identity.ErrRevoked) {
		t.Fatalf("the customer's commands after the revocation: %v", err)
	}
}

// --rotate-key-every: once the key is that old (by the agent's clock,
// from when it was made), the agent starts a rotation itself and
// completes it as for agentd identity rotate; the new key's age counts
// from the rotation.
func TestScheduledRotation(t *testing.T) {
	dir := t.TempDir()
	f := &fakeIMS{}
	f.welcomeFor = func(h *agentv1.Hello) *agentv1.Welcome {
		w := &agentv1.Welcome{InstallId: "ins_1", HeartbeatIntervalMs: 100, LeaseDurationMs: 600}
		if nk := h.GetNextKey(); nk != nil {
			w.NextKeyId = agentproto.KeyID(nk.PublicKey)
			f.agentKey.Store(ed25519.PublicKey(nk.PublicKey))
		}
		return w
	}
	url := serveFake(t, f)
	var now atomic.Int64
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	now.Store(t0.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	key, _ := identity.NewKey()
	if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: url, PrivateKey: key,
		IMSDKeys: []ed25519.PublicKey{f.key.Public().(ed25519.PublicKey)}, KeyCreatedAt: t0.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	f.agentKey.Store(key.Public().(ed25519.PublicKey))
	a, err := New(context.Background(), Config{IMSURL: url, StateDir: dir, Runner: &runRecorder{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond, PermissionsPoll: 10 * time.Millisecond, Now: clock,
		RotateKeyEvery: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-f.streams
	if a.rotation() != nil || !a.privateKey().Equal(key) {
		t.Fatal("a rotation started before the key was two hours old")
	}
	now.Store(t0.Add(time.Hour + time.Minute).UnixNano())
	eventually(t, "the scheduled rotation to complete", func() bool { return !a.privateKey().Equal(key) && a.rotation() == nil })
	id, err := identity.Load(dir)
	if err != nil || id.PrivateKey.Equal(key) || !id.KeyRotatedAt.Equal(t0.Add(time.Hour+time.Minute)) || id.KeyCreatedAt.IsZero() {
		t.Fatalf("identity after the scheduled rotation: rotated %v, created %v, %v", id.KeyRotatedAt, id.KeyCreatedAt, err)
	}
}

// A rotation under way when the agent starts (stopped by a crash after
// imsd recorded it, say: a control file already re-signed with the next
// key) is taken up at once: the control file verifies meanwhile, and the
// rotation completes at the first connection.
func TestRotationUnderWayAtStart(t *testing.T) {
	dir := t.TempDir()
	f := &fakeIMS{}
	f.welcomeFor = func(h *agentv1.Hello) *agentv1.Welcome {
		w := &agentv1.Welcome{InstallId: "ins_1", HeartbeatIntervalMs: 100, LeaseDurationMs: 600}
		if nk := h.GetNextKey(); nk != nil {
			w.NextKeyId = agentproto.KeyID(nk.PublicKey)
			f.agentKey.Store(ed25519.PublicKey(nk.PublicKey))
		}
		return w
	}
	url := serveFake(t, f)
	key, _ := identity.NewKey()
	id := identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: url, PrivateKey: key, IMSDKeys: []ed25519.PublicKey{f.key.Public().(ed25519.PublicKey)}}
	if err := identity.Save(dir, id); err != nil {
		t.Fatal(err)
	}
	if _, err := permissions.Update(dir, time.Now(), "alice", func(s *permissions.State) { s.Provision = false }); err != nil {
		t.Fatal(err)
	}
	r, err := identity.BeginRotation(dir, time.Now(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	// The crash: the control file re-signed with the next key, identity.json
	// not yet saved with it (the commit, then the two files put back as
	// they were before its last steps).
	idBytes, err := os.ReadFile(filepath.Join(dir, identity.FileName))
	if err != nil {
		t.Fatal(err)
	}
	rotBytes, err := os.ReadFile(filepath.Join(dir, identity.RotationFileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, resigned, err := permissions.CommitRotation(dir, id, r, time.Now()); err != nil || len(resigned) != 1 {
		t.Fatalf("commit: %v %v", resigned, err)
	}
	if err := os.WriteFile(filepath.Join(dir, identity.FileName), idBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, identity.RotationFileName), rotBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := permissions.LoadWith(dir, permissions.KeyOf(id), 0); err == nil {
		t.Fatal("the permission file is not signed with the next key")
	}
	f.agentKey.Store(key.Public().(ed25519.PublicKey))
	a, err := New(context.Background(), Config{IMSURL: url, StateDir: dir, Runner: &runRecorder{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if a.rotation() == nil {
		t.Fatal("the rotation under way is not taken up at start")
	}
	if got, err := a.permissions(); err != nil || got.Provision {
		t.Fatalf("the permissions signed with the next key: %+v, %v", got, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "the rotation to complete", func() bool { return a.privateKey().Equal(r.PrivateKey) && a.rotation() == nil })
	cur, err := identity.Load(dir)
	if err != nil || !cur.PrivateKey.Equal(r.PrivateKey) {
		t.Fatalf("identity: %v", err)
	}
	if got, _, err := permissions.LoadWith(dir, permissions.KeyOf(cur), 0); err != nil || got.Provision {
		t.Fatalf("permissions with the new key alone: %+v, %v", got, err)
	}
}
