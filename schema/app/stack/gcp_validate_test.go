package stack

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/schema/app/load"
)

// googleStandIn is the hashicorp/google version whose schema the
// provider mirror's stand-in serves (scripts/terraform-mirror.sh,
// tools/tfgoogleschema).
const googleStandIn = "6.50.0"

// needTerraformGoogle returns terraform's path and the provider mirror
// holding the hashicorp/google stand-in. Without either the test fails
// under CI=true (.ci/run provides both) and is skipped otherwise.
func needTerraformGoogle(t *testing.T) (bin, mirror string) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	bin, err := exec.LookPath("terraform")
	if err != nil {
		missing("terraform is not on PATH (install Terraform 1.11, as .ci/run does)")
	}
	mirror = os.Getenv("BYOC_TERRAFORM_PROVIDERS")
	if mirror == "" {
		mirror, _ = filepath.Abs(filepath.Join("..", "..", "..", ".cache", "terraform-mirror"))
	}
	exe := filepath.Join(mirror, "registry.terraform.io", "hashicorp", "google", googleStandIn, runtime.GOOS+"_"+runtime.GOARCH, "terraform-provider-google_v"+googleStandIn)
	if _, err := os.Stat(exe); err != nil {
		missing("no hashicorp/google stand-in in the provider mirror %s: run scripts/terraform-mirror.sh", mirror)
	}
	return bin, mirror
}

// tfValidator runs the real terraform validate on configurations in one
// working directory, initialised once from the provider mirror.
type tfValidator struct {
	bin, dir string
	env      []string
}

func newTFValidator(t *testing.T, tf []byte) *tfValidator {
	t.Helper()
	bin, mirror := needTerraformGoogle(t)
	dir := t.TempDir()
	cli := filepath.Join(dir, "terraformrc")
	if err := os.WriteFile(cli, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	v := &tfValidator{bin: bin, dir: filepath.Join(dir, "config"),
		env: append(os.Environ(), "TF_CLI_CONFIG_FILE="+cli, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1", "TF_PLUGIN_CACHE_DIR=")}
	if err := os.Mkdir(v.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	v.write(t, tf)
	cmd := exec.Command(bin, "init", "-backend=false", "-input=false", "-no-color", "-plugin-dir", mirror)
	cmd.Dir, cmd.Env = v.dir, v.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("terraform init -plugin-dir %s: %v\n%s", mirror, err, out)
	}
	return v
}

func (v *tfValidator) write(t *testing.T, tf []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(v.dir, "main.tf"), tf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// validate writes tf as main.tf and returns what terraform validate
// -json reports, one diagnostic a line: "main.tf:LINE:COL: severity:
// summary: detail".
func (v *tfValidator) validate(t *testing.T, tf []byte) []string {
	t.Helper()
	v.write(t, tf)
	cmd := exec.Command(v.bin, "validate", "-json", "-no-color")
	cmd.Dir, cmd.Env = v.dir, v.env
	out, err := cmd.Output()
	var res struct {
		Valid       bool `json:"valid"`
		Diagnostics []struct {
			Severity string `json:"severity"`
			Summary  string `json:"summary"`
			Detail   string `json:"detail"`
			Range    *struct {
				Filename string `json:"filename"`
				Start    struct {
					Line, Column int
				} `json:"start"`
			} `json:"range"`
		} `json:"diagnostics"`
	}
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("terraform validate -json: %v, %v\n%s%s", err, jerr, out, stderr)
	}
	var diags []string
	for _, d := range res.Diagnostics {
		at := "main.tf"
		if d.Range != nil {
			at = fmt.Sprintf("%s:%d:%d", d.Range.Filename, d.Range.Start.Line, d.Range.Start.Column)
		}
		diags = append(diags, fmt.Sprintf("%s: %s: %s: %s", at, d.Severity, d.Summary, strings.ReplaceAll(d.Detail, "\n", " ")))
	}
	if !res.Valid && len(diags) == 0 {
		diags = append(diags, "invalid with no diagnostics")
	}
	return diags
}

// TestGCPTerraformValidate: the real terraform validate, with the
// hashicorp/google stand-in serving the published schema of the
// provider's 6.50.0 (scripts/terraform-mirror.sh), finds nothing wrong
// in the Google Cloud stack: every resource type, argument and nested
// block exists with the right type and required ones are set, for the
// example and variants (break glass on, an existing network, labels,
// an app with no break-glass roles and no gcp_roles). A misspelt
// argument, a block written as an argument and a computed-only attribute
// set in a copy are each reported by name, so the check is live.
func TestGCPTerraformValidate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs terraform (full tier)")
	}
	base, err := GCP(exampleOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	v := newTFValidator(t, base)
	variants := []struct {
		name string
		opts func(*Options)
	}{
		{"example", func(*Options) {}},
		{"break glass on, existing network", func(o *Options) {
			o.Params = map[string]string{"EnableBreakGlass": "true", "NetworkMode": "existing", "ExistingNetwork": "corp", "ExistingSubnetwork": "corp-europe-west1",
				"Zone": "europe-west1-c", "ProjectId": "acme-prod-1"}
			o.Labels = map[string]string{"tier": "gold"}
		}},
		{"no break-glass roles, no gcp_roles", func(o *Options) {
			perms := regexp.MustCompile(`(?m)^gcp_roles = .*\n`).ReplaceAllString(string(load.ExampleFiles()["permissions.toml"]), "")
			o.App = exampleApp(t, map[string]string{"permissions.toml": perms, "break_glass.toml": ""})
		}},
	}
	for _, tc := range variants {
		t.Run(tc.name, func(t *testing.T) {
			o := exampleOptions(t)
			tc.opts(&o)
			tf, err := GCP(o)
			if err != nil {
				t.Fatal(err)
			}
			if diags := v.validate(t, tf); len(diags) > 0 {
				t.Errorf("terraform validate (hashicorp/google %s's schema):\n%s", googleStandIn, strings.Join(diags, "\n"))
			}
		})
	}
	// Broken copies: each is reported, naming what is wrong.
	for _, tc := range []struct {
		name, re, repl, want string
	}{
		{"misspelt argument", `(?m)^(\s+)machine_type(\s+= var\.machine_type)$`, "${1}machine_typo${2}", `"machine_typo" is not expected here`},
		{"block written as an argument", `(?m)^(\s+)shielded_instance_config \{$`, "${1}shielded_instance_config = {", `"shielded_instance_config" is not expected here`},
		{"computed-only attribute set", `(?m)^(resource "google_compute_instance" "agent" \{)$`, "${1}\n  self_link = \"x\"", `"self_link" is set by the provider`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken := regexp.MustCompile(tc.re).ReplaceAll(base, []byte(tc.repl))
			if string(broken) == string(base) {
				t.Fatalf("%s matches nothing in the configuration", tc.re)
			}
			diags := v.validate(t, broken)
			var named bool
			for _, d := range diags {
				named = named || strings.Contains(d, tc.want) && strings.HasPrefix(d, "main.tf:")
			}
			if !named {
				t.Errorf("terraform validate reported, without %q:\n%s", tc.want, strings.Join(diags, "\n"))
			}
		})
	}
}
