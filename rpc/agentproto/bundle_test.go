package agentproto

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRenderOutputs(t *testing.T) {
	outs := map[string]map[string]string{"db": {"url": "pg://x"}, "sandbox": {"vpc_id": "vpc-1"}}
	lookup := func(c, o string) (string, bool) { v, ok := outs[c][o]; return v, ok }
	cfg := map[string]any{
		"a":     OutputRef("db", "url"),
		"list":  []any{"vpc=" + OutputRef("sandbox", "vpc_id"), 3.0},
		"keep":  "{{ .secrets.token }} {{ .inputs.size }}",
		"tight": "{{.components.db.outputs.url}}",
	}
	got, err := RenderOutputs(cfg, lookup)
	if err != nil {
		t.Fatal(err)
	}
	m := got.(map[string]any)
	if m["a"] != "pg://x" || m["list"].([]any)[0] != "vpc=vpc-1" || m["list"].([]any)[1] != 3.0 || m["tight"] != "pg://x" {
		t.Fatalf("rendered %v", m)
	}
	if m["keep"] != cfg["keep"] {
		t.Fatalf("secret and input references must stay for the runner: %v", m["keep"])
	}
	if cfg["a"] != OutputRef("db", "url") {
		t.Fatal("RenderOutputs changed its input")
	}
	_, err = RenderOutputs(map[string]any{"x": map[string]any{"y": OutputRef("db", "port")}}, lookup)
	if err == nil || !strings.Contains(err.Error(), "x: y: output db.port is not known") {
		t.Fatalf("unknown output: %v", err)
	}
}

// A bundle job verifies for its agent only, and only with the config it
// was signed over; a manifest signature is no job signature.
func TestBundleJobVerify(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{KeyID(pub): pub}
	now := time.Now()
	j := BundleJob{Step: "db", JobID: "job_1", InstallID: "ins_1", Attempt: 1, FencingToken: 1, Mode: "provision", Component: "db",
		ComponentType: "action", Operation: "apply", TimeoutSeconds: 60, Config: []byte(`{"steps":[{"name":"a","script":"true"}]}`),
		KeyID: KeyID(pub), ExpireUnixMs: now.Add(time.Hour).UnixMilli()}
	cfg, _ := j.DecodeConfig()
	c, err := j.Claims("agt_1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	j.Signature = SignJob(key, &c)
	if _, err := j.Verify(keys, "agt_1", now); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Verify(keys, "agt_2", now); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("another agent: %v", err)
	}
	j2 := j
	j2.Config = []byte(`{"steps":[{"name":"a","script":"curl evil"}]}`)
	if _, err := j2.Verify(keys, "agt_1", now); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("changed config: %v", err)
	}
	if _, err := j.Verify(keys, "agt_1", now.Add(2*time.Hour)); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired: %v", err)
	}
	manifest := []byte(`{"files":[]}`)
	if err := VerifyBundleManifest(keys, KeyID(pub), manifest, SignBundleResults(key, manifest)); err == nil {
		t.Fatal("a results signature passed for a manifest's")
	}
	if err := VerifyBundleManifest(keys, KeyID(pub), manifest, SignBundleManifest(key, manifest)); err != nil {
		t.Fatal(err)
	}
}

// A bundle carries an image's source, and a chart or module named by
// digest in the install registry; not one read from a layout on the
// agent, another registry or a directory, nor anything of a destroy.
func TestBundleJobArtifact(t *testing.T) {
	dg := "sha256:" + strings.Repeat("ab", 32)
	for _, c := range []struct {
		typ, op, cfg string
		want         *BundleArtifact
		err          string
	}{
		{"image", "apply", `{"source":"acme/web@` + dg + `","repository":"web"}`, &BundleArtifact{"source", "acme/web", "web", dg}, ""},
		{"image", "apply", `{"source":"acme/web@` + dg + `"}`, &BundleArtifact{"source", "acme/web", "acme/web", dg}, ""},
		{"image", "apply", `{"source":"acme/web:1.0"}`, nil, "is a tag"},
		{"image", "destroy", `{"source":"acme/web@` + dg + `"}`, nil, ""},
		{"terraform", "apply", `{"module":"modules/db@` + dg + `"}`, &BundleArtifact{"module", "modules/db", "modules/db", dg}, ""},
		{"terraform", "plan", `{"module":"oci:/srv/mods@` + dg + `"}`, nil, ""},
		{"terraform", "apply", `{"module_dir":"/srv/db"}`, nil, ""},
		{"helm", "apply", `{"chart":"charts/web@` + dg + `"}`, &BundleArtifact{"chart", "charts/web", "charts/web", dg}, ""},
		{"helm", "apply", `{"chart":"ghcr.io/acme/web@` + dg + `"}`, nil, ""},
		{"helm", "destroy", `{"chart":"charts/web@` + dg + `"}`, nil, ""},
		{"action", "apply", `{"module":"modules/db@` + dg + `"}`, nil, ""},
	} {
		j := BundleJob{Step: "s", ComponentType: c.typ, Operation: c.op, Config: []byte(c.cfg)}
		a, ok, err := j.Artifact()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s %s %s: err %v, want %q", c.typ, c.op, c.cfg, err, c.err)
			}
			continue
		}
		if err != nil || ok != (c.want != nil) || (c.want != nil && a != *c.want) {
			t.Errorf("%s %s %s: %+v %v %v, want %+v", c.typ, c.op, c.cfg, a, ok, err, c.want)
		}
	}
}

// An output is filled in as it is, never rendered again: an earlier
// job's plugin (vendor code) that reports an output holding another
// component's output reference does not get that output into a later
// job's config. (A {{ .secrets.NAME }} it plants stays for the runner,
// which fills in only the secrets the signed config lists.)
func TestRenderOutputsOnce(t *testing.T) {
	outs := map[string]map[string]string{
		"web": {"url": OutputRef("db", "password") + " " + OutputRef("sandbox", "role")},
		"db":  {"password": "pw-planted"}, "sandbox": {"role": "arn:planted"},
	}
	lookup := func(c, o string) (string, bool) { v, ok := outs[c][o]; return v, ok }
	got, err := RenderOutputs(map[string]any{"notify": "site " + OutputRef("web", "url")}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if s := got.(map[string]any)["notify"].(string); strings.Contains(s, "planted") || s != "site "+outs["web"]["url"] {
		t.Fatalf("rendered %q", s)
	}
}
