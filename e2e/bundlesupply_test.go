package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/e2e/cluster"
)

// The customer's supply-chain policy holds for a bundle's images as it
// does online: under --require-signature an image the build agent signed
// with imsd's key is checked in the bundle's layout and deployed, and
// one nobody signed (pushed into the vendor registry behind the build
// agent's back) is refused by its job and never reaches the install
// registry, where the install's cluster could pull it: the import names
// it as not loaded, before it loads anything.
func TestBundleSupplyChainImagesOffline(t *testing.T) {
	skipShort(t)
	c := startCustodyBuild(t, fast, "--artifact-signing-key", "IMSD-SIGNING-KEY")
	src := repo(t, c.source.Host, "acme/web", "")
	pushImage(t, src, "1.0", 1, 64<<10)
	web := c.build(t, "acme/web:1.0", "web")
	rogue := pushImage(t, repo(t, c.vendor.Host, "acme/rogue", c.mint(t, "repository:acme/rogue:pull,push")), "1.0", 2, 64<<10)
	pushed := c.cli.PushApp(shopApp("web@"+web.Digest, "acme/rogue@"+rogue.Digest.String()))
	state := t.TempDir()
	ag := cluster.StartAgent(t, c.ims.URL(), pushed.EnrollToken(t), state)
	waitConnected(t, c.ims, "acme")
	ag.Stop()
	if out, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "policy", "--state-dir", state, "supply-chain", "--require-signature").CombinedOutput(); err != nil {
		t.Fatalf("agentd policy supply-chain: %v\n%s", err, out)
	}
	file := filepath.Join(t.TempDir(), "bundle.tar")
	if out := c.cli.Run(0, "bundle", "create", "shop", "--install", "acme", "-o", file); !strings.Contains(out, "provision workflow of 2 jobs, 2 artifacts") {
		t.Fatalf("bundle create printed:\n%s", out)
	}
	c.ims.Stop()

	out, code := agentdBundle(t, state, "import", file)
	if code != 1 || !strings.Contains(out, "step multi: acme/rogue@"+rogue.Digest.String()+" (config.source) not loaded into the install registry: supply-chain policy (rule require-signature)") ||
		!strings.Contains(out, "artifacts: 1 loaded into the install registry") || !strings.Contains(out, "1 of 2 steps did not succeed") {
		t.Fatalf("import: exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "  web"+strings.Repeat(" ", 27)+" succeeded") {
		t.Fatalf("the signed image's step did not succeed:\n%s\nresults:\n%s", out, readResults(t, state))
	}
	if !strings.Contains(out, "  multi"+strings.Repeat(" ", 25)+" failed: supply-chain policy (rule require-signature): component multi artifact acme/rogue@"+rogue.Digest.String()) ||
		!strings.Contains(out, "it has no signature; refused before the plugin ran") {
		t.Fatalf("the unsigned image's step was not refused by the policy:\n%s", out)
	}
	registryDir := filepath.Join(state, "registry")
	if m := layoutManifests(t, filepath.Join(registryDir, "acme", "rogue")); len(m) > 0 {
		t.Fatalf("the install registry holds the refused image: %v", m)
	}
	if m := layoutManifests(t, filepath.Join(registryDir, "web")); len(m) == 0 {
		t.Fatal("the install registry holds no manifest of the signed image")
	}
	if _, err := os.Stat(filepath.Join(registryDir, "acme", "rogue")); err == nil {
		t.Fatalf("the install registry has a repository for the refused image:\n%s", layoutFiles(t, filepath.Join(registryDir, "acme", "rogue")))
	}
}
