package agent

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/auditlog"
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
	rs, err := auditlog.ReadFile(filepath.Join(auditlog.Dir(dir), auditlog.AgentFile))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, r := range rs {
		kinds[r.Kind]++
	}
	if kinds[KindKeyRotationPending] != 1 || kinds[KindKeyRotated] != 1 {
		t.Fatalf("journal: %v", kinds)
	}
}
