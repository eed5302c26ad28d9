package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/internal/plugindist"
	"github.com/byoc-dev/byoc/plugins/bundle"
)

// Attacks on agentd update by the vendor's registry or the network path,
// each against a real registry: a release signed by the trusted key but
// with a signature for another type or version (a signature moved from
// another artifact) is refused; a binary layer changed in the registry
// after signing fails the digest check; a release without a binary for this
// agent's platform fails, nothing swapped; an older, validly signed
// release offered automatically is refused by a range that excludes it
// (a downgrade is only taken as the policy allows: by hand under the
// manual policy, which the docs promise).
func TestAgentUpdateAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a registry")
	}
	ctx := t.Context()
	vendor, repo := agentReleaseRepo(t)
	imsdPub, imsdKey, _ := ed25519.GenerateKey(rand.Reader)
	plat := runtime.GOOS + "/" + runtime.GOARCH
	push := func(v, p string) ocispec.Descriptor {
		md, err := plugindist.PushAgent(ctx, repo, "", plugindist.AgentRelease{Version: v, Binaries: map[string]map[string][]byte{
			p: {"agentd": fakeBinary("agentd", v), "byoc-plugins": fakeBinary(bundle.Binary, v)}}})
		if err != nil {
			t.Fatal(err)
		}
		return md
	}
	ref := func(md ocispec.Descriptor) string {
		return "oci://" + vendor.Host + "/byoc/agent@" + md.Digest.String()
	}
	sign := func(md ocispec.Descriptor, typ, v string) {
		if _, err := plugindist.Sign(ctx, repo, md, typ, v, imsdKey); err != nil {
			t.Fatal(err)
		}
	}

	state, bin := t.TempDir(), t.TempDir()
	agentKey, _ := identity.NewKey()
	if err := identity.Save(state, identity.Identity{AgentID: "agt_test", PrivateKey: agentKey, IMSDKeys: []ed25519.PublicKey{imsdPub}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"agentd", bundle.Binary} {
		if err := os.WriteFile(filepath.Join(bin, f), fakeBinary(f, "1.4.0"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	apply := func(ref string, auto bool) error {
		u := &updater{stateDir: state, installDir: bin, auto: auto, confirmWithin: time.Minute, platform: plat, now: clock,
			stdout: &strings.Builder{}, version: "1.4.0"}
		return u.apply(ctx, ref)
	}
	unswapped := func(what string) {
		t.Helper()
		for _, f := range []string{"agentd", bundle.Binary} {
			b, err := os.ReadFile(filepath.Join(bin, f))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Fields(string(b))[3] != "1.4.0" {
				t.Fatalf("%s swapped %s", what, f)
			}
			if _, err := os.Stat(filepath.Join(bin, f+".prev")); err == nil {
				t.Fatalf("%s left %s.prev", what, f)
			}
		}
		if s, err := loadUpdateState(state); err != nil || s != nil {
			t.Fatalf("%s: update state %+v %v", what, s, err)
		}
		if _, err := takeUpdateNotes(state); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(what, ref string, auto bool, cause, want string) {
		t.Helper()
		err := apply(ref, auto)
		t.Logf("%s: %v", what, err)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v; want refused: %s", what, err, want)
		}
		// An agent release is no plugin: the refusal, which the
		// customer reads and the agent reports, must not call it one.
		if strings.Contains(err.Error(), "plugin ") {
			t.Fatalf("%s: %v; the error calls the agent release a plugin", what, err)
		}
		if l := loadLastUpdate(state); l == nil || l.Cause != cause {
			t.Fatalf("%s: last decision %+v; want cause %s", what, l, cause)
		}
		unswapped(what)
	}

	// A signature for another version, and one for another type, both
	// by the trusted key, on the agent release's manifest.
	md := push("1.5.0", plat)
	sign(md, plugindist.AgentType, "1.9.0")
	sign(md, "terraform", "1.5.0")
	refused("a signature for another version or type", ref(md), false, causeSignature, "agent release 1.5.0 ("+md.Digest.String()+"): no signature by a trusted key")

	// A release for another platform only.
	other := "plan9/amd64"
	if plat == other {
		other = "plan9/386"
	}
	md = push("1.5.1", other)
	sign(md, plugindist.AgentType, "1.5.1")
	refused("a release for another platform", ref(md), false, causeDownload, "agent release 1.5.1 ("+md.Digest.String()+") has no binary for "+plat)

	// A binary layer changed in the vendor registry's storage after
	// signing (same size, other bytes): the copy's digest check fails it.
	md = push("1.5.2", plat)
	sign(md, plugindist.AgentType, "1.5.2")
	m, err := plugindist.ReadAgent(ctx, repo, md.Digest)
	if err != nil {
		t.Fatal(err)
	}
	hex := m.Layers[plugindist.AgentKey(plat, "agentd")].Digest.Encoded()
	tampered := 0
	if err := filepath.WalkDir(vendor.Dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "data" && filepath.Base(filepath.Dir(p)) == hex {
			b, rerr := os.ReadFile(p)
			if rerr != nil {
				return rerr
			}
			b[len(b)-1] ^= 1
			tampered++
			return os.WriteFile(p, b, 0o644)
		}
		return err
	}); err != nil || tampered != 1 {
		t.Fatalf("tamper with blob %s: %d files, %v", hex, tampered, err)
	}
	refused("a tampered binary layer", ref(md), false, causeDownload, "")

	// A downgrade: 1.3.0, validly signed, offered automatically under a
	// range that excludes it.
	md = push("1.3.0", plat)
	sign(md, plugindist.AgentType, "1.3.0")
	var out strings.Builder
	if code := updateCmd(ctx, []string{"--state-dir", state, "policy", "--allow", ">=1.4 <2"}, &out, &out, clock); code != 0 {
		t.Fatalf("policy: %d %s", code, out.String())
	}
	refused("a downgrade outside the range", ref(md), true, causePolicy, "1.3.0")
}
