package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/plugindist"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// buildGreeting builds the greeting example at version v and returns the
// binary and its describe output.
func buildGreeting(t *testing.T, v string) (bin, describe []byte) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "byoc-plugin-greeting")
	if b, err := exec.Command("go", "build", "-C", "../plugins/examples/greeting", "-ldflags", "-X main.version="+v, "-o", out, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build greeting: %v\n%s", err, b)
	}
	describe, err := exec.Command(out, "describe").Output()
	if err != nil {
		t.Fatalf("greeting describe: %v", err)
	}
	bin, err = os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return bin, describe
}

// publish pushes a release of greeting to repo, signed by key when not
// nil, and returns its manifest.
func publish(t *testing.T, repo *ocicopy.Repo, v string, bin, describe []byte, key ed25519.PrivateKey) ocispec.Descriptor {
	t.Helper()
	md, err := plugindist.Push(t.Context(), repo, v, plugindist.Release{Type: "greeting", Version: v, Describe: describe,
		Binaries: map[string][]byte{runtime.GOOS + "/" + runtime.GOARCH: bin}})
	if err != nil {
		t.Fatal(err)
	}
	if key != nil {
		if _, err := plugindist.Sign(t.Context(), repo, md, "greeting", v, key); err != nil {
			t.Fatal(err)
		}
	}
	return md
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// A plugin release published to the vendor registry (a real
// docker-registry) is copied into the install registry, verified,
// installed and pinned by agentd plugin install; a loader that reads the
// pin file runs it as a real plugin process, and runs the next version
// after an install of its digest without being made again (no restart).
// A release with no signature, one by a key the agent does not trust, a
// signature moved from another release, and content that does not match
// its digest are refused, naming the plugin and what is wrong, with
// nothing installed and the pin unchanged (issue 29).
func TestPluginInstallFromVendorRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the greeting example twice and starts a registry")
	}
	ctx := t.Context()
	vendor := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	reg, err := ocicopy.ParseRegistry(vendor.Host)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := ocicopy.Open(ctx, reg, "plugins/greeting", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()

	imsdPub, imsdKey, _ := ed25519.GenerateKey(rand.Reader)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	state := t.TempDir()
	agentKey, _ := identity.NewKey()
	if err := identity.Save(state, identity.Identity{AgentID: "agt_test", PrivateKey: agentKey, IMSDKeys: []ed25519.PublicKey{imsdPub}}); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC)
	install := func(ref string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := pinsCmd([]string{"--state-dir", state, "install", ref}, &out, &errOut, now)
		return code, out.String(), errOut.String()
	}
	refOf := func(md ocispec.Descriptor) string {
		return "oci://" + vendor.Host + "/plugins/greeting@" + md.Digest.String()
	}

	var mu sync.Mutex
	var changes []pluginhost.PinChange
	l := &pluginhost.Loader{PinWatcher: &pluginhost.PinWatcher{
		Path: filepath.Join(state, pluginhost.PinFileName),
		OnChange: func(c []pluginhost.PinChange) {
			mu.Lock()
			changes = append(changes, c...)
			mu.Unlock()
		}}}
	run := func() (string, error) {
		inst, err := l.Start(ctx, "greeting", pluginhost.StartOptions{WorkDir: t.TempDir()})
		if err != nil {
			return "", err
		}
		defer inst.Kill()
		return inst.Description().Version, nil
	}
	if _, err := run(); err == nil || !strings.Contains(err.Error(), `unknown component type "greeting"`) {
		t.Fatalf("before the install: %v", err)
	}

	bin1, desc1 := buildGreeting(t, "0.1.0")
	bin2, desc2 := buildGreeting(t, "0.2.0")
	md1 := publish(t, repo, "0.1.0", bin1, desc1, imsdKey)
	code, out, errOut := install(refOf(md1))
	if code != 0 || !strings.Contains(out, "installed greeting 0.1.0 ("+md1.Digest.String()) ||
		!strings.Contains(out, "signature by imsd key "+agentproto.KeyID(imsdPub)+" verified; pinned greeting: "+sha(bin1)) {
		t.Fatalf("install 0.1.0: %d\n%s%s", code, out, errOut)
	}
	pf, err := pluginhost.ReadPins(filepath.Join(state, pluginhost.PinFileName))
	p := pf.Pins["greeting"]
	if err != nil || p.SHA256 != sha(bin1) || p.Version != "0.1.0" || p.SignedBy != agentproto.KeyID(imsdPub) ||
		p.OCI != "oci:"+filepath.Join(state, "registry", "plugins/greeting")+"@"+md1.Digest.String() ||
		p.Source != vendor.Host+"/plugins/greeting@"+md1.Digest.String() ||
		p.Installed != filepath.Join(state, "plugins", "greeting-"+sha(bin1), "byoc-plugin-greeting") {
		t.Fatalf("pin after install: %+v, %v", p, err)
	}
	// Custody: the release and its signature are in the install registry.
	instRepo, err := ocicopy.Open(ctx, ocicopy.Registry{LayoutRoot: filepath.Join(state, "registry")}, "plugins/greeting", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := plugindist.Read(ctx, instRepo, md1.Digest); err != nil {
		t.Fatalf("the install registry: %v", err)
	} else if _, err := plugindist.Verify(ctx, instRepo, m, []ed25519.PublicKey{imsdPub}); err != nil {
		t.Fatalf("the install registry's signature: %v", err)
	}
	if v, err := run(); err != nil || v != "0.1.0" {
		t.Fatalf("run after install: %q, %v", v, err)
	}

	// Upgrade: the same loader (the same agent) runs 0.2.0 next.
	md2 := publish(t, repo, "0.2.0", bin2, desc2, imsdKey)
	if code, out, errOut := install(refOf(md2)); code != 0 || !strings.Contains(out, "(was 0.1.0 "+sha(bin1)+")") {
		t.Fatalf("install 0.2.0: %d\n%s%s", code, out, errOut)
	}
	if v, err := run(); err != nil || v != "0.2.0" {
		t.Fatalf("run after the upgrade: %q, %v", v, err)
	}
	mu.Lock()
	if len(changes) != 2 || changes[1].Old != sha(bin1) || changes[1].New != sha(bin2) || changes[1].Version != "0.2.0" ||
		!strings.HasSuffix(changes[1].OCI, md2.Digest.String()) {
		t.Errorf("pin changes seen by the running agent: %+v", changes)
	}
	mu.Unlock()
	if _, err := os.Stat(filepath.Join(state, "plugins", "greeting-"+sha(bin1))); !os.IsNotExist(err) {
		t.Errorf("0.1.0 is still installed: %v", err)
	}

	// Refusals: each leaves 0.2.0 installed and pinned, and nothing else.
	pinned, _ := os.ReadFile(filepath.Join(state, pluginhost.PinFileName))
	bin3, desc3 := buildGreeting(t, "0.3.0")
	unsigned := publish(t, repo, "0.3.0", bin3, desc3, nil)
	otherRepo, err := ocicopy.Open(ctx, reg, "plugins/other", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	bin4, desc4 := buildGreeting(t, "0.4.0")
	foreign := publish(t, otherRepo, "0.4.0", bin4, desc4, otherKey)
	// A signature of 0.2.0, attached to 0.3.0.
	moved := publish(t, otherRepo, "0.3.0", bin3, desc3, nil)
	if _, err := plugindist.Sign(ctx, otherRepo, moved, "greeting", "0.2.0", imsdKey); err != nil {
		t.Fatal(err)
	}
	// The running agent holds its journal open and writes to it between
	// the refusals the command records there.
	journal := filepath.Join(auditlog.Dir(state), auditlog.AgentFile)
	daemon, err := auditlog.Open(journal, auditlog.AgentChain("agt_test"))
	if err != nil {
		t.Fatal(err)
	}
	defer daemon.Close()
	daemonNote := func() {
		t.Helper()
		if _, err := daemon.Add(auditchain.Record{At: now.UnixNano(), Kind: "agent.note", Actor: "agent:agt_test", Subject: "install:ins_1", Data: "{}"}); err != nil {
			t.Fatal(err)
		}
	}
	daemonNote()
	for _, tc := range []struct{ name, ref, want string }{
		{"unsigned", refOf(unsigned), "refused: plugin greeting 0.3.0 (" + unsigned.Digest.String() + "): no signature by a trusted key (trusted: keys " + agentproto.KeyID(imsdPub) + "); it has no signature"},
		{"untrusted key", "oci://" + vendor.Host + "/plugins/other@" + foreign.Digest.String(), "no signature by a trusted key (trusted: keys " + agentproto.KeyID(imsdPub) + "); its signatures: key " + agentproto.KeyID(otherKey.Public().(ed25519.PublicKey)) + " (not trusted)"},
		{"moved signature", "oci://" + vendor.Host + "/plugins/other@" + moved.Digest.String(), "plugin greeting 0.3.0 (" + moved.Digest.String() + "): no signature by a trusted key (trusted: keys " + agentproto.KeyID(imsdPub) + "); its signatures: key " + agentproto.KeyID(imsdPub) + " (the signature does not match the artifact)"},
		{"no such digest", "oci://" + vendor.Host + "/plugins/greeting@sha256:" + strings.Repeat("0", 64), "copy oci://" + vendor.Host + "/plugins/greeting@sha256:" + strings.Repeat("0", 64) + " into the install registry"},
		{"tag", "oci://" + vendor.Host + "/plugins/greeting:0.2.0", "names a tag only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := install(tc.ref)
			if code == 0 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("install %s: %d\n%s%s\nwant %q", tc.ref, code, out, errOut, tc.want)
			}
			daemonNote()
		})
	}

	// Content in the install registry that does not match its digest:
	// the 0.2.0 binary blob is changed there behind the registry's back;
	// installing 0.2.0 again reads it from there and refuses it.
	var binDigest string
	if m, err := plugindist.Read(ctx, instRepo, md2.Digest); err != nil {
		t.Fatal(err)
	} else {
		binDigest = m.Layers[runtime.GOOS+"/"+runtime.GOARCH].Digest.Encoded()
	}
	blob := filepath.Join(state, "registry", "plugins/greeting", "blobs", "sha256", binDigest)
	if err := os.WriteFile(blob, append(slices.Clone(bin2[:len(bin2)-1]), 'X'), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = install(refOf(md2))
	if code == 0 || !strings.Contains(errOut, "refused: plugin greeting 0.2.0 ("+md2.Digest.String()+"): the "+runtime.GOOS+"/"+runtime.GOARCH+" binary sha256:"+binDigest) ||
		!strings.Contains(errOut, "mismatch") {
		t.Fatalf("install of tampered content: %d\n%s%s", code, out, errOut)
	}
	// An agent release (signed by imsd's key) is no plugin release:
	// refused before a plugin type is read.
	agentRepo, err := ocicopy.Open(ctx, reg, "agent", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	agentRel, err := plugindist.PushAgent(ctx, agentRepo, "1.0.0", plugindist.AgentRelease{Version: "1.0.0",
		Binaries: map[string]map[string][]byte{runtime.GOOS + "/" + runtime.GOARCH: {"agentd": bin1, "byoc-plugins": bin2}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plugindist.Sign(ctx, agentRepo, agentRel, plugindist.AgentType, "1.0.0", imsdKey); err != nil {
		t.Fatal(err)
	}
	agentRef := "oci://" + vendor.Host + "/agent@" + agentRel.Digest.String()
	if code, out, errOut := install(agentRef); code == 0 || !strings.Contains(errOut, "is not a plugin release") {
		t.Fatalf("install of an agent release: %d\n%s%s", code, out, errOut)
	}

	// Each refusal is in the agent's journal (supply_chain.refused, as the
	// agent's refusal of a pinned release), between the running agent's
	// own records, one chain; a failure to reach the release (no such
	// digest) and a bad argument (a tag) are not refusals.
	rs, err := auditlog.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	if p := auditchain.Verify(rs); p != nil {
		t.Fatalf("the agent's journal: %v", p)
	}
	type refusal struct{ subject, typ, version, digest, reason string }
	var got []refusal
	for _, r := range rs {
		if r.Kind != "supply_chain.refused" {
			continue
		}
		var d map[string]string
		if err := json.Unmarshal([]byte(r.Data), &d); err != nil {
			t.Fatal(err)
		}
		if r.Actor != "agent:agt_test" || d["rule"] != "release" || d["command"] != "agentd plugin install" || d["installed_by"] == "" ||
			!strings.HasSuffix(d["artifact"], "@"+d["digest"]) || strings.HasPrefix(d["reason"], "refused:") {
			t.Errorf("refusal record: %s %+v", r.Actor, d)
		}
		got = append(got, refusal{r.Subject, d["type"], d["version"], d["digest"], d["reason"]})
	}
	want := []refusal{
		{"plugin:greeting", "greeting", "0.3.0", unsigned.Digest.String(), "no signature by a trusted key"},
		{"plugin:greeting", "greeting", "0.4.0", foreign.Digest.String(), "(not trusted)"},
		{"plugin:greeting", "greeting", "0.3.0", moved.Digest.String(), "the signature does not match the artifact"},
		{"plugin:greeting", "greeting", "0.2.0", md2.Digest.String(), "mismatch"},
		{"plugin-release:" + strings.TrimPrefix(agentRef, "oci://"), "", "", agentRel.Digest.String(), "is not a plugin release"},
	}
	if len(got) != len(want) {
		t.Fatalf("refusals in the journal:\n%+v\nwant:\n%+v", got, want)
	}
	for i, w := range want {
		if g := got[i]; g.subject != w.subject || g.typ != w.typ || g.version != w.version || g.digest != w.digest || !strings.Contains(g.reason, w.reason) {
			t.Errorf("refusal %d: %+v, want %+v", i, g, w)
		}
	}
	if n := len(rs) - len(got); n != 6 {
		t.Errorf("the running agent's records: %d, want 6", n)
	}
	// A refused install changes no pin, so it is not among the refusals
	// of pinned releases the agent reports to imsd.
	if _, err := os.Stat(filepath.Join(state, pluginhost.RefusalsFileName)); !os.IsNotExist(err) {
		t.Errorf("a refused install wrote %s: %v", pluginhost.RefusalsFileName, err)
	}

	after, _ := os.ReadFile(filepath.Join(state, pluginhost.PinFileName))
	if !bytes.Equal(after, pinned) {
		t.Errorf("a refused install changed the pin file:\n%s\nwas\n%s", after, pinned)
	}
	entries, _ := os.ReadDir(filepath.Join(state, "plugins"))
	if len(entries) != 1 || entries[0].Name() != "greeting-"+sha(bin2) {
		t.Errorf("installed after the refusals: %v", entries)
	}
	if v, err := run(); err != nil || v != "0.2.0" {
		t.Fatalf("run after the refusals: %q, %v", v, err)
	}

	// A release pinned in the file is installed by the loader when a
	// job needs it (agentd: Loader.Fetch), from the install registry.
	ri := &releaseInstaller{stateDir: state, registry: ocicopy.Registry{LayoutRoot: filepath.Join(state, "registry")},
		platform: runtime.GOOS + "/" + runtime.GOARCH, by: "agentd", now: func() time.Time { return now }}
	l.Fetch = ri.fetch
	var out2, errOut2 bytes.Buffer
	rel1 := "oci:" + filepath.Join(state, "registry", "plugins", "greeting") + "@" + md1.Digest.String()
	if code := pinsCmd([]string{"--state-dir", state, "pin", "greeting", "--release", rel1}, &out2, &errOut2, now); code != 0 {
		t.Fatalf("pin --release: %d %s", code, errOut2.String())
	}
	if v, err := run(); err != nil || v != "0.1.0" {
		t.Fatalf("run of the pinned release: %q, %v", v, err)
	}
	pf, _ = pluginhost.ReadPins(filepath.Join(state, pluginhost.PinFileName))
	if p := pf.Pins["greeting"]; p.SHA256 != sha(bin1) || p.OCI != rel1 || p.Version != "0.1.0" || p.PinnedBy == "agentd" {
		t.Fatalf("the completed pin: %+v", p)
	}
	// A completion for a pin the customer changed meanwhile writes
	// nothing.
	pinned, _ = os.ReadFile(filepath.Join(state, pluginhost.PinFileName))
	// (the same release named another way, as a pin written meanwhile)
	stale := "oci:" + filepath.Join(state, "registry", "plugins", "greeting") + ":0.1.0@" + md1.Digest.String()
	if _, err := ri.fetch(ctx, "greeting", pluginhost.Pin{OCI: stale}); err == nil || !strings.Contains(err.Error(), "the pin of greeting changed while its release") {
		t.Fatalf("fetch of a stale pin: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(state, pluginhost.PinFileName)); !bytes.Equal(after, pinned) {
		t.Fatalf("a stale fetch changed the pin file:\n%s", after)
	}

	// The installed file changed on disk: its pin refuses it.
	installedBin := filepath.Join(state, "plugins", "greeting-"+sha(bin1), "byoc-plugin-greeting")
	if err := os.WriteFile(installedBin, bin2, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := run(); err == nil || !strings.Contains(err.Error(), "plugin greeting: checksum mismatch: pinned "+sha(bin1)+", found "+sha(bin2)) {
		t.Fatalf("run of a changed installed binary: %v", err)
	}
}
