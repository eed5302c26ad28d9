package agent

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

type journalEntry struct {
	kind string
	data map[string]string
}

// vendorRegistry starts a real registry standing for the vendor's and
// returns it, the build environment naming it, and its repository
// acme/web, open until the test ends.
func vendorRegistry(t *testing.T) (*ocitest.Registry, map[string]string, *ocicopy.Repo) {
	t.Helper()
	reg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	repo, err := ocicopy.Open(t.Context(), ocicopy.Registry{Host: reg.Host, PlainHTTP: true}, "acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
	return reg, map[string]string{VendorRegistryEnv: reg.Host, VendorPlainHTTPEnv: "1", VendorTokenEnv: "t"}, repo
}

// TestSupplyChainSignAndEnforce signs a build in a real registry the way
// the build agent does, and checks the customer's policy on image and
// terraform jobs: signed by a trusted key passes; unsigned, or signed by
// another key, is refused naming the artifact, digest and rule, and
// journalled; mode warn lets it run, journalled.
func TestSupplyChainSignAndEnforce(t *testing.T) {
	reg, env, repo := vendorRegistry(t)
	ctx := t.Context()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	push := func(seed uint64) string {
		d, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: seed, Layers: []int64{64}})
		if err != nil {
			t.Fatal(err)
		}
		return d.Digest.String()
	}
	signed, unsigned, foreign := push(1), push(2), push(3)

	var journal []journalEntry
	r := &PluginRunner{InstallRegistry: "http://" + reg.Host, journal: func(kind, _ string, data map[string]string) {
		journal = append(journal, journalEntry{kind, data})
	}}
	var logs []string
	log := func(_ int32, s string) { logs = append(logs, s) }
	sign := func(dg string, k ed25519.PrivateKey) map[string]string {
		r.ArtifactKey = k
		out := map[string]string{"repository": "acme/web", "digest": dg}
		if err := r.signBuild(ctx, Job{ComponentType: BuildType, Operation: sdk.OpApply, registryEnv: env}, out, time.Now(), log); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := sign(signed, key); out["signed_by"] != agentproto.KeyID(pub) {
		t.Fatalf("signed_by %q, want %s", out["signed_by"], agentproto.KeyID(pub))
	}
	sign(foreign, otherKey)

	policy := permissions.SupplyChainPolicy{RequireSignature: true}
	job := func(typ, field, dg string) Job {
		return Job{ID: "j1", Component: "web", ComponentType: typ, Operation: sdk.OpPlan, registryEnv: env,
			SupplyChain: func() (permissions.SupplyChainPolicy, []ed25519.PublicKey, error) {
				return policy, []ed25519.PublicKey{pub}, nil
			}}
	}
	check := func(typ, field, dg string) error {
		_, err := r.checkSupplyChain(ctx, job(typ, field, dg), map[string]any{field: "acme/web@" + dg}, log)
		return err
	}
	for _, c := range []struct{ typ, field string }{{"image", "source"}, {"terraform", "module"}, {"helm", "chart"}} {
		journal = nil
		if err := check(c.typ, c.field, signed); err != nil {
			t.Fatalf("%s signed: %v", c.typ, err)
		}
		if len(journal) != 1 || journal[0].kind != KindSupplyChainVerified {
			t.Fatalf("%s signed: journal %v", c.typ, journal)
		}
		for _, bad := range []struct{ dg, want string }{{unsigned, "it has no signature"}, {foreign, "(not trusted)"}} {
			journal = nil
			err := check(c.typ, c.field, bad.dg)
			if err == nil {
				t.Fatalf("%s %s passed", c.typ, bad.dg)
			}
			for _, w := range []string{"acme/web@" + bad.dg, "rule require-signature", bad.want, "refused before the plugin ran"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s refusal %q lacks %q", c.typ, err, w)
				}
			}
			if len(journal) != 1 || journal[0].kind != KindSupplyChainRefused || journal[0].data["digest"] != bad.dg ||
				journal[0].data["rule"] != RuleRequireSignature {
				t.Fatalf("%s refusal: journal %v", c.typ, journal)
			}
		}
	}
	// A source with no digest cannot be signed: refused, or the config
	// could sidestep the policy.
	for _, c := range []struct{ typ, field string }{{"helm", "manifests"}, {"helm", "chart_dir"}, {"terraform", "module_dir"}} {
		_, err := r.checkSupplyChain(ctx, job(c.typ, c.field, ""), map[string]any{c.field: "x"}, log)
		if err == nil || !strings.Contains(err.Error(), "rule require-signature") || !strings.Contains(err.Error(), "config."+c.field+" deploys no artifact by digest") {
			t.Fatalf("%s %s: %v", c.typ, c.field, err)
		}
	}
	// Importing runs the module (or chart) too: the import path is no way
	// around the policy.
	for _, c := range []struct{ typ, field string }{{"terraform", "module"}, {"helm", "chart"}} {
		j := job(c.typ, c.field, unsigned)
		j.Operation = sdk.OpImport
		journal = nil
		_, err := r.checkSupplyChain(ctx, j, map[string]any{c.field: "acme/web@" + unsigned}, log)
		if err == nil || !strings.Contains(err.Error(), "rule require-signature") || len(journal) != 1 || journal[0].kind != KindSupplyChainRefused {
			t.Fatalf("%s import of an unsigned artifact: %v, journal %v", c.typ, err, journal)
		}
	}
	// Destroying an unsigned component stays possible.
	for _, op := range []string{sdk.OpPlanDestroy, sdk.OpDestroy, sdk.OpDrift} {
		j := job("image", "source", unsigned)
		j.Operation = op
		if _, err := r.checkSupplyChain(ctx, j, map[string]any{"source": "acme/web@" + unsigned}, log); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	// Mode warn: logged and journalled, and the job runs.
	policy.Mode = permissions.SupplyChainWarn
	journal, logs = nil, nil
	if err := check("image", "source", unsigned); err != nil {
		t.Fatalf("warn: %v", err)
	}
	if len(journal) != 1 || journal[0].kind != KindSupplyChainWarned || !strings.Contains(strings.Join(logs, "\n"), "mode warn") {
		t.Fatalf("warn: journal %v, logs %q", journal, logs)
	}
	// No policy: nothing is read.
	policy = permissions.SupplyChainPolicy{}
	journal = nil
	if err := check("image", "source", unsigned); err != nil || len(journal) != 0 {
		t.Fatalf("no policy: %v, %v", err, journal)
	}
	// Other operations and types are not checked.
	j := job("action", "source", unsigned)
	if _, err := r.checkSupplyChain(ctx, j, map[string]any{}, log); err != nil {
		t.Fatal(err)
	}
}

// A compromised imsd holds imsd's signing key and signs whatever it
// deploys. With --no-imsd-keys the customer's policy trusts only the
// customer's own keys: an image imsd's key signed is refused, one signed
// by the customer's key passes.
func TestSupplyChainWithoutIMSDKeys(t *testing.T) {
	reg, env, repo := vendorRegistry(t)
	ctx := t.Context()
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{}
	dir := t.TempDir()
	a, _ := startFakeIn(t, f, rr, dir, nil)
	ownPub, own, _ := ed25519.GenerateKey(rand.Reader)
	r := &PluginRunner{InstallRegistry: "http://" + reg.Host, journal: func(string, string, map[string]string) {}}
	log := func(int32, string) {}
	push := func(seed uint64, k ed25519.PrivateKey) string {
		d, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: seed, Layers: []int64{64}})
		if err != nil {
			t.Fatal(err)
		}
		r.ArtifactKey = k
		if err := r.signBuild(ctx, Job{ComponentType: BuildType, Operation: sdk.OpApply, registryEnv: env},
			map[string]string{"repository": "acme/web", "digest": d.Digest.String()}, time.Now(), log); err != nil {
			t.Fatal(err)
		}
		return d.Digest.String()
	}
	byIMSD, byCustomer := push(1, f.key), push(2, own)
	check := func(dg string) error {
		_, err := r.checkSupplyChain(ctx, Job{ID: "j1", Component: "web", ComponentType: "image", Operation: sdk.OpPlan, registryEnv: env,
			SupplyChain: a.supplyChain}, map[string]any{"source": "acme/web@" + dg}, log)
		return err
	}
	set := func(noIMSD bool) {
		t.Helper()
		if _, err := permissions.Update(dir, time.Now(), "alice", func(s *permissions.State) {
			s.SupplyChain = permissions.SupplyChainPolicy{RequireSignature: true, Keys: []string{base64.StdEncoding.EncodeToString(ownPub)}, NoIMSDKeys: noIMSD}
		}); err != nil {
			t.Fatal(err)
		}
	}
	set(false)
	if err := check(byIMSD); err != nil {
		t.Fatalf("signed by imsd's key, imsd's keys trusted: %v", err)
	}
	set(true)
	if err := check(byIMSD); err == nil || !strings.Contains(err.Error(), "(not trusted)") {
		t.Fatalf("signed by imsd's key under --no-imsd-keys: %v", err)
	}
	if err := check(byCustomer); err != nil {
		t.Fatalf("signed by the customer's key under --no-imsd-keys: %v", err)
	}
}
