package stack

import (
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/internal/stackconfig"
	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/load"
	"github.com/byoc-dev/byoc/schema/app/validate"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func exampleApp(tb testing.TB, extra map[string]string) *config.App {
	tb.Helper()
	files := load.ExampleFiles()
	for k, v := range extra {
		files[k] = []byte(v)
	}
	a, err := load.Parse(files, validate.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

func exampleOptions(tb testing.TB) Options {
	return Options{App: exampleApp(tb, nil), Install: "acme", IMS: "https://ims.example.com:7443", IMSKeyID: "k1ab2cd3ef4",
		AgentURL: "https://downloads.example.com/agentd-linux-amd64", AgentSHA256: strings.Repeat("ab", 32),
		PluginsURL: "https://downloads.example.com/byoc-plugins-linux-amd64", PluginsSHA256: strings.Repeat("cd", 32)}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./schema/app/stack -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what the generator writes now; if the change is intended, go test ./schema/app/stack -update\n--- got:\n%s", path, got)
	}
}

// needCfnLint returns cfn-lint's path. Without it the test fails under
// CI=true (.ci/run installs it) and is skipped otherwise.
func needCfnLint(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("cfn-lint")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("cfn-lint is not installed (.ci/run installs it with pip)")
		}
		t.Skip("cfn-lint is not installed")
	}
	return bin
}

// cfnLint runs cfn-lint on a template and fails on any error it reports
// (warnings are logged).
func cfnLint(t *testing.T, tmpl []byte) {
	t.Helper()
	if errs, err := lintErrors(t, needCfnLint(t), tmpl); len(errs) > 0 {
		t.Fatalf("cfn-lint found errors (exit %v):\n%s", err, strings.Join(errs, "\n"))
	}
}

// lintErrors runs cfn-lint (bin) on a template and returns the errors it
// reports (warnings and notes are logged) and how it exited.
func lintErrors(t *testing.T, bin string, tmpl []byte) ([]string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stack.json")
	if err := os.WriteFile(path, tmpl, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--format", "parseable", "--", path).CombinedOutput()
	var errs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		// file:line:col:endline:endcol:RULE:message
		parts := strings.SplitN(line, ":", 7)
		if len(parts) == 7 && strings.HasPrefix(parts[5], "W") || len(parts) == 7 && strings.HasPrefix(parts[5], "I") {
			t.Logf("cfn-lint: %s", line)
			continue
		}
		errs = append(errs, line)
	}
	return errs, err
}

func TestCloudFormationExample(t *testing.T) {
	tmpl, err := CloudFormation(exampleOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "example.cloudformation.json", tmpl)
	cfnLint(t, tmpl)

	var doc struct {
		Parameters map[string]map[string]any
		Conditions map[string]any
		Resources  map[string]struct {
			Type       string
			Condition  string
			Properties map[string]any
		}
		Outputs map[string]map[string]any
	}
	if err := json.Unmarshal(tmpl, &doc); err != nil {
		t.Fatal(err)
	}
	// byoc-plugins (the heavy built-in types) is installed beside agentd,
	// checked against its SHA-256 as agentd is.
	if doc.Parameters["PluginsBinarySha256"]["Default"] != strings.Repeat("cd", 32) || doc.Parameters["PluginsBinaryUrl"]["Default"] != "https://downloads.example.com/byoc-plugins-linux-amd64" {
		t.Errorf("byoc-plugins parameters: %v %v", doc.Parameters["PluginsBinaryUrl"], doc.Parameters["PluginsBinarySha256"])
	}
	for _, want := range []string{
		`echo '${PluginsBinarySha256}  /usr/local/bin/byoc-plugins.download' | sha256sum -c -`,
		`install -m 0755 /usr/local/bin/byoc-plugins.download /usr/local/bin/byoc-plugins`,
	} {
		if !strings.Contains(string(tmpl), want) {
			t.Errorf("the user data lacks %s", want)
		}
	}
	// A toggle per mode; break-glass off by default.
	for p, want := range map[string]string{"EnableProvision": "true", "EnableMaintenance": "true", "EnableDeprovision": "true", "EnableBreakGlass": "false"} {
		if got := doc.Parameters[p]["Default"]; got != want {
			t.Errorf("%s defaults to %v, want %s", p, got, want)
		}
	}
	// Sensitive inputs and secrets are NoEcho; the vendor's inputs are not parameters.
	for _, p := range []string{"InputAdminEmail", "SecretLicenseKey"} {
		if doc.Parameters[p]["NoEcho"] != true {
			t.Errorf("parameter %s is not NoEcho: %v", p, doc.Parameters[p])
		}
	}
	if _, ok := doc.Parameters["InputDomain"]; ok {
		t.Error("the vendor-provided input domain became a stack parameter")
	}
	// Each mode's role is conditioned on its toggle and carries its policies.
	for res, cond := range map[string]string{"ProvisionRole": "ProvisionEnabled", "MaintenanceRole": "MaintenanceEnabled",
		"DeprovisionRole": "DeprovisionEnabled", "BreakGlassRole": "BreakGlassEnabled", "BreakGlassAdminRole": "BreakGlassEnabled"} {
		r, ok := doc.Resources[res]
		if !ok || r.Type != "AWS::IAM::Role" || r.Condition != cond {
			t.Errorf("resource %s: %+v, want an IAM role with condition %s", res, r, cond)
		}
	}
	if got := doc.Resources["MaintenanceRole"].Properties["ManagedPolicyArns"]; !strings.Contains(jsonText(got), "ReadOnlyAccess") {
		t.Errorf("maintenance role's managed policies: %v", got)
	}
	if got := doc.Resources["BreakGlassAdminRole"].Properties["ManagedPolicyArns"]; !strings.Contains(jsonText(got), "AdministratorAccess") {
		t.Errorf("break-glass admin role's managed policies: %v", got)
	}
	// The agent's own role: read its secrets, assume the mode roles, nothing else.
	agentPolicies := jsonText(doc.Resources["AgentRole"].Properties["Policies"]) + jsonText(doc.Resources["AgentAssumesModeRoles"].Properties)
	for _, a := range []string{"secretsmanager:GetSecretValue", "sts:AssumeRole"} {
		if !strings.Contains(agentPolicies, a) {
			t.Errorf("the agent's role lacks %s", a)
		}
	}
	if strings.Contains(agentPolicies, "ManagedPolicyArns") || doc.Resources["AgentRole"].Properties["ManagedPolicyArns"] != nil {
		t.Error("the agent's own role has managed policies")
	}
	// Egress only.
	sg := doc.Resources["AgentSecurityGroup"].Properties
	if sg["SecurityGroupIngress"] != nil || sg["SecurityGroupEgress"] == nil {
		t.Errorf("security group: %v", sg)
	}
	if doc.Resources["Registry"].Type != "AWS::ECR::Repository" {
		t.Error("no ECR repository for the install")
	}
	// The enrolment token is never a plain parameter, output or tag:
	// only the secret's ARN is.
	for name, p := range doc.Parameters {
		if strings.Contains(strings.ToLower(name), "token") && name != "EnrollmentTokenSecretArn" {
			t.Errorf("parameter %s looks like a token", name)
		}
		_ = p
	}
	if strings.Contains(jsonText(doc.Outputs), "EnrollmentToken") {
		t.Error("an output names the enrolment token")
	}
}

// TestCloudFormationStackConfig substitutes the user data as
// CloudFormation would (parameters, ARNs) and checks that the stack
// config it writes is one the agent reads.
// Every resource that takes tags carries the install's name and labels.
func TestCloudFormationTagsInstallLabels(t *testing.T) {
	o := exampleOptions(t)
	o.Labels = map[string]string{"customer": "acme", "example.com/tier": "gold"}
	tmpl, err := CloudFormation(o)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Resources map[string]struct {
			Properties struct {
				Tags []struct{ Key, Value string }
			}
		}
	}
	if err := json.Unmarshal(tmpl, &doc); err != nil {
		t.Fatal(err)
	}
	tagged := 0
	for name, r := range doc.Resources {
		if r.Properties.Tags == nil {
			continue
		}
		tagged++
		got := map[string]string{}
		for _, tg := range r.Properties.Tags {
			got[tg.Key] = tg.Value
		}
		if got["byoc:install"] != o.Install || got["byoc:label:customer"] != "acme" || got["byoc:label:example.com/tier"] != "gold" {
			t.Errorf("%s tags: %v", name, got)
		}
	}
	if tagged < 5 {
		t.Fatalf("only %d resources carry tags", tagged)
	}
	o.Labels = map[string]string{strings.Repeat("k", 120): "v"}
	if _, err := CloudFormation(o); err == nil || !strings.Contains(err.Error(), "too long for a cloud tag") {
		t.Fatalf("an over-long label key: %v", err)
	}
}

func TestCloudFormationStackConfig(t *testing.T) {
	o := exampleOptions(t)
	o.Labels = map[string]string{"customer": "acme", "example.com/tier": "gold"}
	tmpl, err := CloudFormation(o)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Resources map[string]struct {
			Properties struct {
				UserData struct {
					Base64 struct {
						Sub []json.RawMessage `json:"Fn::Sub"`
					} `json:"Fn::Base64"`
				}
				AssumeRolePolicyDocument any
			}
		}
	}
	if err := json.Unmarshal(tmpl, &doc); err != nil {
		t.Fatal(err)
	}
	var script string
	if err := json.Unmarshal(doc.Resources["AgentInstance"].Properties.UserData.Base64.Sub[0], &script); err != nil {
		t.Fatal(err)
	}
	subRE := regexp.MustCompile(`\$\{([A-Za-z0-9:.]+)\}`)
	script = subRE.ReplaceAllStringFunc(script, func(m string) string {
		name := m[2 : len(m)-1]
		switch {
		case strings.HasPrefix(name, "Enable"):
			return strconv.FormatBool(name != "EnableBreakGlass")
		case strings.HasSuffix(name, "Arn") && strings.Contains(name, "Role"):
			if strings.Contains(name, "BreakGlass") {
				return ""
			}
			return "arn:aws:iam::123456789012:role/" + name
		case strings.HasSuffix(name, "Arn"):
			return "arn:aws:secretsmanager:eu-west-1:123456789012:secret:" + name
		}
		return "x-" + name
	})
	_, rest, _ := strings.Cut(script, "<<'BYOC_STACK_CONFIG'\n")
	body, _, ok := strings.Cut(rest, "BYOC_STACK_CONFIG\n")
	if !ok {
		t.Fatalf("no stack config in the user data:\n%s", script)
	}
	c, err := stackconfig.Parse([]byte(body))
	if err != nil {
		t.Fatalf("the stack config of the user data does not parse: %v\n%s", err, body)
	}
	if !c.Modes["provision"].Enabled || c.Modes["break_glass"].Enabled || c.Modes["provision"].Parameter != "EnableProvision" {
		t.Errorf("modes: %+v", c.Modes)
	}
	// The install's name and labels as session tags, which the mode
	// roles' trust policies let the agent pass (sts:TagSession).
	if want := map[string]string{"byoc:install": "acme", "byoc:label:customer": "acme", "byoc:label:example.com/tier": "gold"}; !maps.Equal(c.SessionTags, want) {
		t.Errorf("session_tags: %v, want %v", c.SessionTags, want)
	}
	if trust := jsonText(doc.Resources["ProvisionRole"].Properties.AssumeRolePolicyDocument); !strings.Contains(trust, "sts:TagSession") {
		t.Errorf("ProvisionRole's trust policy does not allow sts:TagSession: %s", trust)
	}
	if c.EnrollToken.SecretARN == "" || c.Inputs["admin_email"].From == nil || c.Secrets["license_key"].SecretARN == "" {
		t.Errorf("sources: %+v %+v %+v", c.EnrollToken, c.Inputs, c.Secrets)
	}
}

func jsonText(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestCloudFormationVariants lints templates of apps that use what the
// example does not: inline statements, a permissions boundary, every input
// type, optional secrets, imsd on port 443 and parameter defaults.
func TestCloudFormationVariants(t *testing.T) {
	app := exampleApp(t, map[string]string{
		"permissions.toml": `
[provision]
policies = ["PowerUserAccess"]
permissions_boundary = "arn:aws:iam::123456789012:policy/byoc-boundary"
statements = ['{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}']
[break_glass]
description = "Read-only debugging."
policies = ["arn:aws:iam::aws:policy/ReadOnlyAccess"]
`,
		"secrets.toml": `
[[secret]]
name = "license_key"
[[secret]]
name = "smtp_password"
optional = true
`,
		"inputs.toml": string(load.ExampleFiles()["inputs.toml"]) + `
[[input]]
name = "replicas"
type = "number"
provided_by = "customer"
min = 1
max = 9
default = 2
[[input]]
name = "size"
type = "enum"
values = ["s", "m"]
provided_by = "customer"
required = true
[[input]]
name = "debug"
type = "bool"
provided_by = "customer"
[[input]]
name = "region_hint"
provided_by = "customer"
pattern = "[a-z]+-[a-z]+-[0-9]"
`,
	})
	o := Options{App: app, Install: "globex-prod", IMS: "https://ims.example.com", IMSKeyID: "kid",
		AgentURL: "https://downloads.example.com/agentd", AgentSHA256: strings.Repeat("0", 64),
		Params: map[string]string{"EnableBreakGlass": "true", "VpcMode": "existing", "InputSize": "m"}}
	tmpl, err := CloudFormation(o)
	if err != nil {
		t.Fatal(err)
	}
	cfnLint(t, tmpl)
	for _, want := range []string{`"PermissionsBoundary": "arn:aws:iam::123456789012:policy/byoc-boundary"`, `"s3:*"`, `"Type": "Number"`, `"HasSecretSmtpPassword"`} {
		if !bytes.Contains(tmpl, []byte(want)) {
			t.Errorf("template lacks %s", want)
		}
	}
	if _, err := CloudFormation(Options{App: app, Install: "x", IMS: "https://i", Params: map[string]string{"EnableFoo": "true"}}); err == nil || !strings.Contains(err.Error(), "--param EnableFoo") {
		t.Errorf("unknown parameter: %v", err)
	}
}

// TestCfnLintCatches makes sure the lint step can fail: a template with a
// role whose condition does not exist.
//
// Under CI=true a missing cfn-lint fails it (as it fails cfnLint's users):
// a skipped check of the check would hide a lint step that never runs.
func TestCfnLintCatches(t *testing.T) {
	bin := needCfnLint(t)
	tmpl, err := CloudFormation(exampleOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	broken := bytes.Replace(tmpl, []byte(`"Condition": "ProvisionEnabled"`), []byte(`"Condition": "NoSuchCondition"`), 1)
	if bytes.Equal(broken, tmpl) {
		t.Fatal("the example template has no role with Condition ProvisionEnabled to break")
	}
	// The errors as cfnLint reads them: the lint step the other tests use.
	errs, err := lintErrors(t, bin, broken)
	if err == nil || !strings.Contains(strings.Join(errs, "\n"), "NoSuchCondition") {
		t.Fatalf("cfn-lint passed a broken template (exit %v): errors %q", err, errs)
	}
}

func TestLocalExample(t *testing.T) {
	o := exampleOptions(t)
	o.IMS = "http://127.0.0.1:7070"
	o.Params = map[string]string{"EnableMaintenance": "false", "InputAdminEmail": "ops@example.com"}
	files, err := Local(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		golden(t, filepath.Join("example.local", f.Name), f.Data)
	}
	c, err := stackconfig.Parse(files[0].Data)
	if err != nil {
		t.Fatalf("the local stack config does not parse: %v", err)
	}
	if c.Modes["maintenance"].Enabled || !c.Modes["provision"].Enabled || c.Modes["break_glass"].Enabled {
		t.Errorf("modes: %+v", c.Modes)
	}
	if in := c.Inputs["admin_email"]; !in.Sensitive || in.Value != nil {
		t.Errorf("a sensitive input's value is in stack.json: %+v", in)
	}
	if !strings.Contains(string(files[2].Data), "admin_email=ops@example.com\n") || files[2].Mode != 0o600 {
		t.Errorf("secrets.env (mode %o):\n%s", files[2].Mode, files[2].Data)
	}
	if _, err := Local(Options{App: o.App, Install: "acme", IMS: o.IMS, Params: map[string]string{"EnableMaintenance": "no"}}); err == nil {
		t.Error("a toggle of \"no\" was accepted")
	}
}
