package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/server"
	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/ocisign"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// bundleApp is an image component and an action component that refers
// to the image's digest (an output the agent renders from the bundle's
// own earlier job).
func bundleApp(web string) map[string]string {
	app := shopApp(web)
	app["components/db.toml"] = `type = "action"
dependencies = ["web"]
[config]
steps = [{ name = "db", script = "echo url=pg-{{ .components.web.outputs.digest }} >> $BYOC_OUTPUTS" }]
`
	return app
}

// agentdBundle runs agentd bundle ARGS against the agent's state dir,
// with imsd's URL a closed port (the agent never dials it anyway).
func agentdBundle(t *testing.T, state string, args ...string) (string, int) {
	t.Helper()
	full := []string{"bundle", args[0], "--state-dir", state}
	if args[0] == "import" {
		full = append(full, "--ims", "http://127.0.0.1:1")
	}
	full = append(full, args[1:]...)
	cmd := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), full...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// layoutFiles lists the files under dir with their sizes, one a line.
func layoutFiles(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d\n", p, fi.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// layoutManifests lists the blobs of the OCI layout root dir that are
// image manifests or indexes (none when dir does not exist).
func layoutManifests(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil || !d.Type().IsRegular() || !strings.Contains(p, "/blobs/") {
			return err
		}
		if fi, err := d.Info(); err != nil || fi.Size() > 4<<20 {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var m struct {
			MediaType string `json:"mediaType"`
		}
		if json.Unmarshal(b, &m) == nil && (strings.Contains(m.MediaType, "manifest") || strings.Contains(m.MediaType, "index")) {
			out = append(out, p+": "+m.MediaType)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tamper rewrites the tar at path into a copy with one byte of its
// first blob larger than 1 KiB changed (same size), and returns the
// copy's path and the blob's path in the tar.
func tamper(t *testing.T, path string) (string, string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	outPath := filepath.Join(t.TempDir(), "tampered.tar")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, tw := tar.NewReader(f), tar.NewWriter(out)
	changed := ""
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if changed == "" && strings.Contains(h.Name, "/blobs/sha256/") && len(b) > 1024 {
			b[512] ^= 1
			changed = h.Name
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if changed == "" {
		t.Fatal("no blob to tamper with in the bundle")
	}
	return outPath, changed
}

// An install whose agent has no route to imsd is provisioned from a
// bundle: byoc bundle create packs the workflow's jobs (signed by imsd
// for the agent) and the image with its layers; a copy with one byte of
// a layer changed is refused before anything is written, naming the
// file; with imsd stopped, agentd bundle import verifies the real one,
// loads the image into the install registry, runs the image job and the
// action job (which renders the image's digest, an output of the same
// bundle, on the agent); importing it again moves 0 blob bytes and runs
// nothing twice.
func TestBundleProvisionOffline(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	c := startCustody(t)
	src := repo(t, c.source.Host, "acme/web", "")
	v1 := pushImage(t, src, "1.0", 1, 256<<10)
	b1 := c.build(t, "acme/web:1.0", "web")
	pushed := c.cli.PushApp(bundleApp("web@" + b1.Digest))
	state := t.TempDir()
	// Enrolled once (the keys it pins come from that), then offline.
	ag := cluster.StartAgent(t, c.ims.URL(), pushed.EnrollToken(t), state)
	waitConnected(t, c.ims, "acme")
	ag.Stop()

	dir := t.TempDir()
	// An agent release travels too: one signed by imsd's key, and one
	// signed by a key this agent never pinned.
	rels := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	publish := func(version, keyFile string) string {
		t.Helper()
		dist := t.TempDir()
		for _, f := range []string{"agentd", "byoc-plugins"} {
			script := "#!/bin/sh\necho '" + f + " " + version + " (fake)'\n"
			if err := os.WriteFile(filepath.Join(dist, f+"_"+runtime.GOOS+"_"+runtime.GOARCH), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		out := c.cli.Run(0, "agent", "publish", dist, "--version", version, "--to", rels.Host+"/byoc/agent", "--signing-key", keyFile, "-o", "json")
		var r struct{ Reference string }
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.Reference == "" {
			t.Fatalf("agent publish %s: %v\n%s", version, err, out)
		}
		return r.Reference
	}
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(otherKey)
	otherKeyFile := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(otherKeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	release := publish("v9.1.0", filepath.Join(c.ims.DataDir, server.SigningKeyFileName))
	forgedRelease := publish("v9.1.1", otherKeyFile)
	// And a plugin release, for the customer to install and pin.
	pout := c.cli.Run(0, "plugin", "publish", buildGreetingVersion(t, "0.1.0"), "--name", "greeting", "--version", "0.1.0",
		"--to", rels.Host+"/plugins/greeting", "--signing-key", filepath.Join(c.ims.DataDir, server.SigningKeyFileName), "-o", "json")
	var plugin struct{ Reference string }
	if err := json.Unmarshal([]byte(pout), &plugin); err != nil || plugin.Reference == "" {
		t.Fatalf("plugin publish: %v\n%s", err, pout)
	}
	file := filepath.Join(dir, "bundle.tar")
	out := c.cli.Run(0, "bundle", "create", "shop", "--install", "acme", "-o", file, "--agent-release", release, "--plugin-release", plugin.Reference)
	if !strings.Contains(out, "provision workflow of 2 jobs, 3 artifacts") || !strings.Contains(out, "agent release v9.1.0 (byoc/agent@sha256:") ||
		!strings.Contains(out, "plugin release greeting 0.1.0 (plugins/greeting@sha256:") {
		t.Fatalf("bundle create printed:\n%s", out)
	}
	forgedFile := filepath.Join(dir, "forged-release.tar")
	c.cli.Run(0, "bundle", "create", "shop", "--install", "acme", "-o", forgedFile, "--agent-release", forgedRelease)

	// imsd signs no manifest whose jobs it did not make: a command
	// changed in the jobs' view, beside the sealed jobs imsd made, is
	// refused. (The jobs themselves are sealed to the agent: they carry
	// the install's sensitive values, which the operator may not read.)
	jobsJSON, sealedJobs := tarEntry(t, file, "jobs.json"), tarEntry(t, file, "jobs.sealed")
	if len(sealedJobs) == 0 || bytes.Contains(sealedJobs, []byte("echo url=")) {
		t.Fatalf("jobs.sealed is empty or readable: %q", sealedJobs)
	}
	forged := bytes.Replace(jobsJSON, []byte("echo url=pg-"), []byte("echo url=PG-"), 1)
	if bytes.Equal(forged, jobsJSON) {
		t.Fatalf("jobs.json has no step to forge:\n%s", jobsJSON)
	}
	// The bundle's own manifest, its jobs.json's digest the forged one's.
	var man map[string]any
	if err := json.Unmarshal(tarEntry(t, file, "manifest.json"), &man); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(forged)
	for _, f := range man["files"].([]any) {
		if f := f.(map[string]any); f["path"] == "jobs.json" {
			f["sha256"], f["size"] = hex.EncodeToString(sum[:]), len(forged)
		}
	}
	forgedMan, _ := json.Marshal(man)
	_, err := c.ims.Admin().SignBundle(ctx, connect.NewRequest(&imsv1.SignBundleRequest{Install: "acme", Manifest: forgedMan, JobsJson: forged, JobsSealed: sealedJobs}))
	if err == nil || !strings.Contains(err.Error(), "are not the jobs this imsd made for bundle bdl_") || !strings.Contains(err.Error(), "of install acme") {
		t.Fatalf("SignBundle of forged jobs: %v", err)
	}

	// No route to imsd from here on.
	c.ims.Stop()
	registryDir := filepath.Join(state, "registry")

	// The tampered blob is the plugin release's binary, a layer over 4
	// MiB: it streams from the tar and is checked as it loads, so the
	// import may have stored blobs, but no image manifest.
	bad, blob := tamper(t, file)
	out, code := agentdBundle(t, state, "import", bad)
	if code != 1 || !strings.Contains(out, blob+": sha256 ") || !strings.Contains(out, "does not match the signed manifest") || !strings.Contains(out, "no image was loaded") {
		t.Fatalf("tampered bundle: exit %d:\n%s", code, out)
	}
	if idx := layoutManifests(t, registryDir); len(idx) > 0 {
		t.Fatalf("the install registry got image manifests for a tampered bundle: %v", idx)
	}
	// What the refusals below must leave as it is.
	stray := layoutFiles(t, registryDir)
	if _, err := os.Stat(filepath.Join(state, "bundles")); !os.IsNotExist(err) {
		t.Fatalf("results were written for a tampered bundle: %v", err)
	}

	// An agent release imsd did not sign refuses the whole bundle.
	out, code = agentdBundle(t, state, "import", forgedFile)
	if code != 1 || !strings.Contains(out, "nothing was written: agent release v9.1.1 (byoc/agent@sha256:") || !strings.Contains(out, "(not trusted)") {
		t.Fatalf("bundle with a forged agent release: exit %d:\n%s", code, out)
	}
	if now := layoutFiles(t, registryDir); now != stray {
		t.Fatalf("the install registry was written for a forged agent release:\n%s\nbefore:\n%s", now, stray)
	}

	// The customer's permission modes hold offline too: with provision
	// off, nothing is loaded or run.
	agentdCmd := func(args ...string) {
		t.Helper()
		if b, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), args...).CombinedOutput(); err != nil {
			t.Fatalf("agentd %v: %v\n%s", args, err, b)
		}
	}
	agentdCmd("permissions", "--state-dir", state, "disable", "provision")
	out, code = agentdBundle(t, state, "import", file)
	if code != 1 || !strings.Contains(out, "nothing was written: step web needs the provision mode: refused") {
		t.Fatalf("import with provision off: exit %d:\n%s", code, out)
	}
	if now := layoutFiles(t, registryDir); now != stray {
		t.Fatalf("the install registry was written with provision off:\n%s\nbefore:\n%s", now, stray)
	}
	agentdCmd("permissions", "--state-dir", state, "enable", "provision")

	out, code = agentdBundle(t, state, "import", file)
	if code != 0 || !strings.Contains(out, "3 loaded into the install registry") || !strings.Contains(out, "db ") {
		t.Fatalf("import: exit %d:\n%s\nresults:\n%s", code, out, readResults(t, state))
	}
	// The agent release is loaded, not applied: the import prints the
	// command, which applies it through the updater and the customer's
	// update policy (here manual: the customer's own apply is allowed).
	apply := regexp.MustCompile(`(?m)^  (agentd update .* apply oci:\S+)$`).FindStringSubmatch(out)
	if !strings.Contains(out, "agent release v9.1.0 (sha256:") || !strings.Contains(out, "your update policy (manual") || apply == nil {
		t.Fatalf("import says nothing of the agent release:\n%s", out)
	}
	installDir := t.TempDir()
	for _, f := range []string{"agentd", "byoc-plugins"} {
		if err := os.WriteFile(filepath.Join(installDir, f), []byte("old"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	args := strings.Fields(apply[1])[1:]
	args = append(args[:len(args)-1], "--install-dir", installDir, args[len(args)-1])
	if b, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), args...).CombinedOutput(); err != nil || !strings.Contains(string(b), "swapped agentd") {
		t.Fatalf("%s: %v\n%s", apply[1], err, b)
	}
	if b, _ := os.ReadFile(filepath.Join(installDir, "agentd")); !strings.Contains(string(b), "agentd v9.1.0 (fake)") {
		t.Fatalf("agentd after the apply: %q", b)
	}
	// The plugin release likewise: the printed command installs and pins
	// it from the install registry.
	install := regexp.MustCompile(`(?m)^  (agentd plugin .* install oci:\S+)$`).FindStringSubmatch(out)
	if install == nil || !strings.Contains(out, "plugin release greeting 0.1.0 (sha256:") {
		t.Fatalf("import says nothing of the plugin release:\n%s", out)
	}
	if b, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), strings.Fields(install[1])[1:]...).CombinedOutput(); err != nil || !strings.Contains(string(b), "greeting") {
		t.Fatalf("%s: %v\n%s", install[1], err, b)
	}
	if b, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "plugin", "--state-dir", state, "list").CombinedOutput(); err != nil || !strings.Contains(string(b), "greeting") {
		t.Fatalf("agentd plugin list after the install: %v\n%s", err, b)
	}
	for _, step := range []string{"web", "db"} {
		if !strings.Contains(out, "  "+step+strings.Repeat(" ", 30-len(step))+" succeeded") {
			t.Fatalf("step %s did not succeed:\n%s", step, out)
		}
	}
	reg, _ := ocicopy.ParseRegistry("oci:" + registryDir)
	dst, err := ocicopy.Open(ctx, reg, "web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	if missing, err := ocicopy.Missing(ctx, dst, digest.Digest(v1.Digest), true); err != nil || len(missing) > 0 {
		t.Fatalf("the install registry lacks part of %s: %v, %d missing", v1.Digest, err, len(missing))
	}
	dst.Close()
	if results := readResults(t, state); !strings.Contains(results, `"url": "pg-`+v1.Digest.String()+`"`) {
		t.Fatalf("the db job did not render the web component's digest:\n%s", results)
	}

	// Again: nothing moves, nothing runs twice.
	out, code = agentdBundle(t, state, "import", file)
	if code != 0 || !strings.Contains(out, "0 blobs sent (0 blob bytes moved)") || strings.Count(out, "succeeded before") != 2 {
		t.Fatalf("second import: exit %d:\n%s", code, out)
	}

	// The results go back: signed by the agent, its journal with them.
	results := filepath.Join(dir, "results.tar")
	if out, code = agentdBundle(t, state, "export-results", "-o", results); code != 0 {
		t.Fatalf("export-results: exit %d:\n%s", code, out)
	}
	c.ims.Restart(t)
	badRes, _ := tamperFile(t, results, "results.json", `"succeeded"`, `"succeedex"`)
	if _, stderr, code := c.cli.Exec("bundle", "import-results", badRes); code == 0 || !strings.Contains(stderr, "results.json: sha256 ") || !strings.Contains(stderr, "nothing was recorded") {
		t.Fatalf("tampered results: exit %d: %s", code, stderr)
	}
	out = c.cli.Run(0, "bundle", "import-results", results)
	if !strings.Contains(out, "workflow wf_") || !strings.Contains(out, " succeeded, 2 jobs; the agent's journal verified") {
		t.Fatalf("import-results printed:\n%s", out)
	}
	jobs := installJobs(t, c.ims.Admin())
	if len(jobs) != 2 {
		t.Fatalf("imsd lists %d jobs of the install, want the bundle's 2", len(jobs))
	}
	for _, j := range jobs {
		if j.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("job %s: %v", j.Id, j.State)
		}
	}
	in := c.cli.Run(0, "install", "get", "acme", "-o", "json")
	if !strings.Contains(in, `"state": "active"`) && !strings.Contains(in, "INSTALL_STATE_ACTIVE") {
		t.Fatalf("install get after the results:\n%s", in)
	}
	// A results file that skips or rewrites part of the journal imported
	// already is refused, naming what failed, though the agent's key
	// signed it: the journal must continue the one imsd took.
	journal := strings.Split(strings.TrimSpace(string(tarEntry(t, results, "journal.jsonl"))), "\n")
	if len(journal) < 3 {
		t.Fatalf("the journal has %d records", len(journal))
	}
	rechain := func(lines []string, change func(*auditchain.Record)) []string {
		var out []string
		var prev *auditchain.Record
		for i, l := range lines {
			var r auditchain.Record
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				change(&r)
			}
			r = auditchain.Next(prev, r)
			prev = &r
			b, _ := json.Marshal(r)
			out = append(out, string(b))
		}
		return out
	}
	head := regexp.MustCompile(`journal verified \((\d+) records, head ([0-9a-f]+)\)`).FindStringSubmatch(out)
	if head == nil {
		t.Fatalf("import-results printed no journal head:\n%s", out)
	}
	for _, bad := range []struct {
		name    string
		journal []string
		want    string
	}{
		{"a record skipped", append(slices.Clone(journal[:1]), journal[2:]...), "journal.jsonl: chain agent:"},
		{"cut short", journal[:len(journal)-1], "the agent's journal does not continue the one imported before (record " + head[1] + " had hash " + head[2] + ")"},
		{"rewritten", rechain(journal, func(r *auditchain.Record) { r.At++ }), "the agent's journal does not continue the one imported before (record " + head[1] + " had hash " + head[2] + ")"},
	} {
		forged := resign(t, state, results, map[string][]byte{"journal.jsonl": []byte(strings.Join(bad.journal, "\n") + "\n")})
		_, stderr, code := c.cli.Exec("bundle", "import-results", forged)
		if code == 0 || !strings.Contains(stderr, bad.want) || !strings.Contains(stderr, "nothing was recorded") {
			t.Fatalf("results with the journal %s: exit %d: %s", bad.name, code, stderr)
		}
		if bad.name == "a record skipped" && !strings.Contains(stderr, "record 2 removed") {
			t.Fatalf("results with the journal %s: %s", bad.name, stderr)
		}
	}
	if out = c.cli.Run(0, "bundle", "import-results", results); !strings.Contains(out, "were imported before") {
		t.Fatalf("second import-results printed:\n%s", out)
	}
	if n := len(installJobs(t, c.ims.Admin())); n != 2 {
		t.Fatalf("a replayed results file changed the jobs: %d", n)
	}

	// An incremental bundle: web becomes an index of the image the
	// install runs and a new one; the install's inventory leaves out the
	// blobs it holds, so only the new image's blobs travel and move.
	arm, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 7, Layers: []int64{128 << 10}, Platform: &ocispec.Platform{OS: "linux", Architecture: "arm64"}})
	if err != nil {
		t.Fatal(err)
	}
	v1.Platform = &ocispec.Platform{OS: "linux", Architecture: "amd64"}
	v2, err := ocitest.Index(ctx, src, v1, arm)
	if err == nil {
		err = src.Tag(ctx, v2, "2.0")
	}
	if err != nil {
		t.Fatal(err)
	}
	b2 := c.build(t, "acme/web:2.0", "web")
	c.cli.PushApp(bundleApp("web@" + b2.Digest))
	inv, code := agentdBundle(t, state, "inventory")
	if code != 0 || !strings.Contains(inv, v1.Digest.String()) {
		t.Fatalf("inventory: exit %d:\n%s", code, inv)
	}
	invFile := filepath.Join(dir, "have.txt")
	if err := os.WriteFile(invFile, []byte(inv), 0o644); err != nil {
		t.Fatal(err)
	}
	file2 := filepath.Join(dir, "bundle2.tar")
	out = c.cli.Run(0, "bundle", "create", "shop", "--install", "acme", "-o", file2, "--have-digests", invFile)
	if !strings.Contains(out, "update workflow of 2 jobs, 1 artifacts (2 blobs") || !strings.Contains(out, "2 blobs left out") {
		t.Fatalf("incremental bundle create printed:\n%s", out)
	}
	// The same from the last results file instead of an inventory.
	out = c.cli.Run(0, "bundle", "create", "shop", "--install", "acme", "-o", filepath.Join(dir, "bundle2b.tar"), "--since-results", results)
	if !strings.Contains(out, "update workflow of 2 jobs, 1 artifacts (2 blobs") || !strings.Contains(out, "2 blobs left out") {
		t.Fatalf("bundle create --since-results printed:\n%s", out)
	}
	c.ims.Stop()
	out, code = agentdBundle(t, state, "import", file2)
	// The new image's layer and config, not the 256 KiB layer held.
	if code != 0 || !strings.Contains(out, "2 blobs sent ("+strconv.FormatInt(128<<10+configSize(t, src, arm), 10)+" blob bytes moved), 2 blobs already there") {
		t.Fatalf("incremental import: exit %d:\n%s", code, out)
	}
	if dst, err = ocicopy.Open(ctx, reg, "web", ocicopy.Credentials{}); err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if missing, err := ocicopy.Missing(ctx, dst, digest.Digest(b2.Digest), true); err != nil || len(missing) > 0 {
		t.Fatalf("the install registry lacks part of %s: %v, %d missing", b2.Digest, err, len(missing))
	}
	// Its results carry only the agent's journal after the head imsd took
	// at the import above (the bundle names it, under imsd's signature),
	// chained to it.
	results2 := filepath.Join(dir, "results2.tar")
	if out, code = agentdBundle(t, state, "export-results", "-o", results2); code != 0 {
		t.Fatalf("export-results of the second bundle: exit %d:\n%s", code, out)
	}
	var first auditchain.Record
	if err := json.Unmarshal([]byte(strings.SplitN(string(tarEntry(t, results2, "journal.jsonl")), "\n", 2)[0]), &first); err != nil {
		t.Fatal(err)
	}
	if strconv.FormatInt(first.Seq-1, 10) != head[1] || first.Prev != head[2] {
		t.Fatalf("the second results file's journal starts at record %d (prev %s), not right after the head imsd took (record %s, hash %s)", first.Seq, first.Prev, head[1], head[2])
	}
	// The first bundle replayed now would roll web back: refused, and
	// nothing runs. (bundle2b, made after bundle2 and never imported,
	// would import: only bundles older than one imported are refused.)
	out, code = agentdBundle(t, state, "import", file)
	if code != 1 || !strings.Contains(out, "was made before bundle") || !strings.Contains(out, "an older bundle is not imported after a newer one") {
		t.Fatalf("the first bundle after the second: exit %d:\n%s", code, out)
	}
}

// tamperFile rewrites the tar at path into a copy whose entry name has
// old replaced by new (same length), returning the copy's path.
func tamperFile(t *testing.T, path, name, old, new string) (string, string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	done := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		c, _ := io.ReadAll(tr)
		if h.Name == name && bytes.Contains(c, []byte(old)) {
			c = bytes.Replace(c, []byte(old), []byte(new), 1)
			done = true
		}
		tw.WriteHeader(h)
		tw.Write(c)
	}
	tw.Close()
	if !done {
		t.Fatalf("%s: no %q in %s", path, old, name)
	}
	out := filepath.Join(t.TempDir(), "tampered.tar")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out, name
}

// readResults returns the one results.json under STATE/bundles.
func readResults(t *testing.T, state string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(state, "bundles", "*", "results.json"))
	if err != nil || len(m) != 1 {
		t.Fatalf("results files %v: %v", m, err)
	}
	b, err := os.ReadFile(m[0])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// configSize is the size of image desc's config blob.
func configSize(t *testing.T, r *ocicopy.Repo, desc ocispec.Descriptor) int64 {
	t.Helper()
	rc, err := r.Fetch(t.Context(), desc)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var m ocispec.Manifest
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m.Config.Size
}

// tarEntry returns the content of entry name of the tar at path.
func tarEntry(t *testing.T, path, name string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no %s: %v", path, name, err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

// The example app's terraform part (a sandbox module on the local
// provider, then the db module, which takes the sandbox's vpc_id) and an
// action component that takes db's url, provisioned from a bundle with
// imsd stopped: terraform installs its providers from the mirror, each
// component's output reaches the next through the agent's rendering, and
// the results carried back make the install active in imsd with both
// modules deployed.
func TestBundleTerraformOffline(t *testing.T) {
	skipShort(t)
	mirror := terraformMirror(t)
	c := startCustodyBuild(t, fast, "--artifact-signing-key", "IMSD-SIGNING-KEY")
	ims, cli := c.ims, c.cli
	dir := t.TempDir()
	cli.Run(0, "app", "init", dir)
	for _, f := range []string{"components/api.toml", "components/cache.toml", "components/web.toml", "actions/migrate.toml", "actions/healthz.toml"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"installs/demo.toml": `inputs = { domain = "demo.acme.example", tier = "large" }` + "\n",
		"components/report.toml": `type = "action"
dependencies = ["db"]
[config]
steps = [{ name = "report", script = "echo seen={{ .components.db.outputs.url }} >> $BYOC_OUTPUTS" }]
`,
	}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The modules are packaged (and signed) by the build agent into the
	// vendor registry; the components name them by that digest.
	mods := map[string]string{}
	for _, mod := range []string{"sandbox", "postgres"} {
		b := printedBuild(t, cli.Run(0, "build", "package", filepath.Join(dir, "modules", mod), "--kind", "terraform", "--repo", "modules/"+mod, "--wait", "-o", "json"))
		mods[mod] = b.Digest
		for _, f := range []string{"sandbox.toml", "components/db.toml"} {
			p := filepath.Join(dir, f)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b = regexp.MustCompile(`modules/`+mod+`@sha256:[0-9a-f]{64}`).ReplaceAll(b, []byte("modules/"+mod+"@"+mods[mod]))
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	appToml, _ := os.ReadFile(filepath.Join(dir, "app.toml"))
	m := regexp.MustCompile(`(?m)^name = "([^"]+)"`).FindSubmatch(appToml)
	if m == nil {
		t.Fatalf("app.toml names no app:\n%s", appToml)
	}
	appName := string(m[1])
	token := cluster.Pushed{Output: cli.Run(0, "app", "push", dir)}.EnrollToken(t)
	state := t.TempDir()
	ag := cluster.StartAgent(t, ims.URL(), token, state)
	waitConnected(t, ims, "demo")
	ag.Stop()
	// The customer requires imsd's signature: the modules' signatures
	// must travel with them.
	if out, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "policy", "--state-dir", state, "supply-chain", "--require-signature").CombinedOutput(); err != nil {
		t.Fatalf("agentd policy supply-chain: %v\n%s", err, out)
	}

	file := filepath.Join(t.TempDir(), "bundle.tar")
	if out := cli.Run(0, "bundle", "create", appName, "--install", "demo", "-o", file); !strings.Contains(out, "provision workflow of 3 jobs, 2 artifacts") {
		t.Fatalf("bundle create printed:\n%s", out)
	}
	ims.Stop()
	// The install registry holds no module before the import: they come
	// from the bundle.
	registryDir := filepath.Join(state, "registry")
	if _, err := os.Stat(filepath.Join(registryDir, "modules")); !os.IsNotExist(err) {
		t.Fatalf("the install registry holds modules before the import: %v", err)
	}
	out, code := agentdBundle(t, state, "import", "--terraform-providers", mirror, file)
	if code != 0 || !strings.Contains(out, "artifacts: 2 loaded into the install registry") {
		t.Fatalf("import: exit %d:\n%s\nresults:\n%s", code, out, readResults(t, state))
	}
	imsdKey, err := ocisign.ReadPrivateKey(filepath.Join(ims.DataDir, "signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := ocicopy.ParseRegistry("oci:" + registryDir)
	for mod, dg := range mods {
		r, err := ocicopy.Open(context.Background(), reg, "modules/"+mod, ocicopy.Credentials{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := r.Resolve(context.Background(), dg)
		if err == nil {
			_, err = ocisign.Verify(context.Background(), r, d, ocisign.ArtifactType, "", mod, []ed25519.PublicKey{imsdKey.Public().(ed25519.PublicKey)})
		}
		r.Close()
		if err != nil {
			t.Fatalf("module %s@%s in the install registry, with imsd's signature: %v", mod, dg, err)
		}
	}
	if res := readResults(t, state); !strings.Contains(res, "supply-chain policy: modules/postgres@"+mods["postgres"]) {
		t.Fatalf("the db job's log names no verified signature of its module:\n%s", res)
	}
	// Again: everything is held, nothing moves.
	if out, code = agentdBundle(t, state, "import", "--terraform-providers", mirror, file); code != 0 || !strings.Contains(out, "0 blobs sent (0 blob bytes moved)") {
		t.Fatalf("second import: exit %d:\n%s", code, out)
	}
	for _, step := range []string{"sandbox", "db", "report"} {
		if !strings.Contains(out, "  "+step+strings.Repeat(" ", 30-len(step))+" succeeded") {
			t.Fatalf("step %s did not succeed:\n%s", step, out)
		}
	}
	res := readResults(t, state)
	if !regexp.MustCompile(`"seen": "postgres://events@db\.vpc-[0-9a-f]{8}\.internal:5432/events\?size=large"`).MatchString(res) {
		t.Fatalf("the report did not see db's url built from the sandbox's vpc_id:\n%s", res)
	}

	results := filepath.Join(t.TempDir(), "results.tar")
	if out, code = agentdBundle(t, state, "export-results", "-o", results); code != 0 {
		t.Fatalf("export-results: exit %d:\n%s", code, out)
	}
	ims.Restart(t)
	if out = cli.Run(0, "bundle", "import-results", results); !strings.Contains(out, " succeeded, 3 jobs") {
		t.Fatalf("import-results printed:\n%s", out)
	}
	if got := cli.Run(0, "install", "get", "demo"); !regexp.MustCompile(`State:\s+active`).MatchString(got) {
		t.Fatalf("install get after the results:\n%s", got)
	}
	// The jobs and their logs are imsd's now too.
	jl, err := ims.Admin().ListJobs(context.Background(), connect.NewRequest(&imsv1.ListJobsRequest{Install: "demo"}))
	if err != nil {
		t.Fatal(err)
	}
	var sandboxJob string
	for _, j := range jl.Msg.Jobs {
		if j.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("job %s (%s): %v", j.Id, j.Component, j.State)
		}
		if j.Component == "sandbox" {
			sandboxJob = j.Id
		}
	}
	if len(jl.Msg.Jobs) != 3 || sandboxJob == "" {
		t.Fatalf("imsd lists %d jobs of the install, want the bundle's 3", len(jl.Msg.Jobs))
	}
	if log := strings.Join(cluster.Texts(cluster.Logs(t, ims.Admin(), sandboxJob)), "\n"); !strings.Contains(log, "Apply complete! Resources: 3 added") {
		t.Fatalf("the sandbox job's log in imsd:\n%s", log)
	}
	// What the install runs caught up: an update of the same revision
	// plans nothing.
	if got := cli.Run(0, "install", "plan", "demo"); !strings.Contains(got, "No changes: install demo matches app revision 1 (3 components unchanged)") {
		t.Fatalf("install plan after the results:\n%s", got)
	}
}

// resign rewrites the results file at path with the entries of replace
// and signs it with the agent's own key (from its state dir), as a
// customer holding that key could: imsd's checks past the signature are
// what refuse it.
func resign(t *testing.T, state, path string, replace map[string][]byte) string {
	t.Helper()
	id, err := identity.Load(state)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	var m bundlefile.Manifest
	if err := json.Unmarshal(tarEntry(t, path, bundlefile.ManifestName), &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		b := tarEntry(t, path, f.Path)
		if r, ok := replace[f.Path]; ok {
			b = r
		}
		if err := os.WriteFile(filepath.Join(work, f.Path), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if m.Files, err = bundlefile.Scan(work); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.MarshalIndent(m, "", "  ")
	sig := bundlefile.Signature{KeyID: agentproto.KeyID(id.PrivateKey.Public().(ed25519.PublicKey)), Signature: agentproto.SignBundleResults(id.PrivateKey, raw)}
	var buf bytes.Buffer
	if err := bundlefile.Write(&buf, work, raw, sig); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "resigned.tar")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}
