package stack

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/byoc-dev/byoc/internal/stackconfig"
	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/load"
)

// armSchema compiles testdata/arm/deploymentTemplate.subset.json (see
// its README: a hand-written subset of the published schema).
func armSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "arm", "deploymentTemplate.subset.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const id = "https://byoc.test/arm/deploymentTemplate.subset.json"
	if err := c.AddResource(id, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(id)
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

func validateARM(t *testing.T, sch *jsonschema.Schema, tmpl []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(tmpl))
	if err != nil {
		t.Fatal(err)
	}
	return sch.Validate(v)
}

type armTemplate struct {
	Parameters map[string]map[string]any
	Variables  map[string]any
	Resources  []struct {
		Type, Name, Condition, Scope string
		DependsOn                    []string
		Identity                     map[string]any
		Properties                   map[string]any
	}
	Outputs map[string]map[string]any
}

func TestAzureExample(t *testing.T) {
	tmpl, err := Azure(exampleOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "example.azure.json", tmpl)
	sch := armSchema(t)
	if err := validateARM(t, sch, tmpl); err != nil {
		t.Fatalf("the template does not validate against the ARM schema subset: %v", err)
	}

	var doc armTemplate
	if err := json.Unmarshal(tmpl, &doc); err != nil {
		t.Fatal(err)
	}
	// A bool toggle per mode; break-glass off by default.
	for _, m := range stackconfig.Modes {
		p := doc.Parameters[ModeParameter(m)]
		if p["type"] != "bool" || p["defaultValue"] != (m != "break_glass") {
			t.Errorf("%s: %v", ModeParameter(m), p)
		}
	}
	// Secrets and the token are secure parameters.
	if doc.Parameters["EnrollmentToken"]["type"] != "securestring" || doc.Parameters["SecretLicenseKey"]["type"] != "securestring" {
		t.Errorf("secure parameters: %v %v", doc.Parameters["EnrollmentToken"], doc.Parameters["SecretLicenseKey"])
	}
	modeIdentities := 0
	for _, r := range doc.Resources {
		switch r.Type {
		case "Microsoft.ManagedIdentity/userAssignedIdentities":
			if r.Name == "byoc-acme-agent" {
				if r.Condition != "" {
					t.Errorf("the agent's identity is conditional: %q", r.Condition)
				}
				continue
			}
			modeIdentities++
			if !strings.HasPrefix(r.Condition, "[parameters('Enable") {
				t.Errorf("mode identity %s has condition %q", r.Name, r.Condition)
			}
		case "Microsoft.Authorization/roleAssignments":
			// Scoped to the resource group (no scope) or one of the
			// template's own resources; never the subscription.
			if r.Scope != "" && !strings.HasPrefix(r.Scope, "[resourceId('Microsoft.") {
				t.Errorf("role assignment %s scoped to %s", r.Name, r.Scope)
			}
			role := r.Properties["roleDefinitionId"].(string)
			if strings.Contains(role, config.AzureBuiltinRoles["Contributor"]) && r.Scope != "" {
				t.Errorf("Contributor scoped to %s", r.Scope)
			}
			if r.Condition == "" && !strings.Contains(role, roleKeyVaultSecretsUser) {
				t.Errorf("an unconditional role assignment other than the agent's Key Vault reader: %s", role)
			}
		case "Microsoft.Network/networkSecurityGroups":
			for _, rule := range r.Properties["securityRules"].([]any) {
				p := rule.(map[string]any)["properties"].(map[string]any)
				if p["direction"] == "Inbound" && p["access"] == "Allow" {
					t.Errorf("the NSG lets something in: %v", rule)
				}
			}
		case "Microsoft.Compute/virtualMachines":
			ids := r.Identity["userAssignedIdentities"].(string)
			for _, m := range stackconfig.Modes {
				if !strings.Contains(ids, "if(parameters('"+ModeParameter(m)+"'), createObject(resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', 'byoc-acme-"+strings.ReplaceAll(m, "_", "-")+"')") {
					t.Errorf("the VM does not carry %s's identity only while it is on: %s", m, ids)
				}
			}
		case "Microsoft.Compute/virtualMachines/extensions":
			if r.Properties["forceUpdateTag"] != "[parameters('DeploymentTag')]" {
				t.Errorf("the script does not run again on each deployment: %v", r.Properties["forceUpdateTag"])
			}
			custom := r.Properties["protectedSettings"].(map[string]any)["script"].(string)
			for _, want := range []string{"sha256sum -c -", "/usr/local/bin/byoc-plugins", "agentd preflight --stack-config /etc/byoc/stack.json", "systemctl restart agentd"} {
				if !strings.Contains(custom, want) {
					t.Errorf("the script lacks %q", want)
				}
			}
			for _, p := range []string{"EnrollmentToken", "SecretLicenseKey"} {
				if strings.Contains(custom, "parameters('"+p+"')") {
					t.Errorf("the script holds the value of %s", p)
				}
			}
		}
	}
	// One per mode and per break-glass role of break_glass.toml.
	if want := len(stackconfig.Modes) + len(exampleOptions(t).App.BreakGlass.Roles); modeIdentities != want {
		t.Errorf("%d mode identities, want %d", modeIdentities, want)
	}
}

// TestAzureSchemaCatches: the schema subset refuses what Azure would: a
// missing apiVersion, an unknown resource key, an unknown parameter type,
// and the documented limits the SDK's models do not carry (a priority or
// retention out of range, a computer name too long). Resource bodies are
// TestAzurePublishedSchemasCatch's.
func TestAzureSchemaCatches(t *testing.T) {
	tmpl, err := Azure(exampleOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	sch := armSchema(t)
	for _, tc := range []struct{ from, to string }{
		{`"apiVersion": "` + apiCompute + `",`, ``},
		{`"contentVersion": "1.0.0.0"`, `"contentVersion": "1.0"`},
		{`"priority": 4096`, `"priority": 5000`},
		{`"type": "securestring"`, `"type": "password"`},
		{`"location": "[parameters('Location')]",`, `"locaton": "[parameters('Location')]",`},
		{`"softDeleteRetentionInDays": 7`, `"softDeleteRetentionInDays": 3`},
		{`"computerName": "byoc-acme-agent"`, `"computerName": "` + strings.Repeat("a", 65) + `"`},
	} {
		bad := strings.Replace(string(tmpl), tc.from, tc.to, 1)
		if bad == string(tmpl) {
			t.Fatalf("%q is not in the template", tc.from)
		}
		if err := validateARM(t, sch, []byte(bad)); err == nil {
			t.Errorf("%s → %s: the schema subset let it through", tc.from, tc.to)
		}
	}
}

// TestAzureStackConfig: the stack config the VM writes, its expressions
// given values as a deployment would, is one agentd reads; it names Key
// Vault secrets, never a value.
func TestAzureStackConfig(t *testing.T) {
	_, sc, err := azureTemplate(exampleOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	const guid = "0f0f0f0f-1111-2222-3333-444444444444"
	emptyIf := regexp.MustCompile(`^if\(empty\(parameters\('[A-Za-z]+'\)\), '', '([a-z-]+)'\)$`)
	var eval func(v any) any
	eval = func(v any) any {
		switch v := v.(type) {
		case expr:
			s := string(v)
			switch {
			case strings.HasPrefix(s, "parameters('Enable"):
				return s != "parameters('EnableBreakGlass')"
			case strings.HasPrefix(s, "if(parameters('EnableBreakGlass')"):
				return ""
			case strings.HasSuffix(s, ".clientId, '')"), strings.HasSuffix(s, ".clientId"),
				s == "subscription().tenantId", s == "subscription().subscriptionId":
				return guid
			case strings.HasSuffix(s, ".vaultUri"):
				return "https://byocabc.vault.azure.net/"
			case strings.HasSuffix(s, ".loginServer"):
				return "byocabc.azurecr.io"
			case s == "resourceGroup().name", s == "deployment().name", s == "variables('subnetId')":
				return "acme-rg"
			case emptyIf.MatchString(s):
				return emptyIf.FindStringSubmatch(s)[1]
			}
			t.Fatalf("no value for expression %s", s)
		case map[string]any:
			out := map[string]any{}
			for k, e := range v {
				out[k] = eval(e)
			}
			return out
		}
		return v
	}
	b, err := json.Marshal(eval(sc))
	if err != nil {
		t.Fatal(err)
	}
	c, err := stackconfig.Parse(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if c.Format != stackconfig.FormatAzure || c.EnrollToken.KeyVaultSecret != "enrollment-token" || !c.Modes["provision"].Enabled || c.Modes["break_glass"].Enabled ||
		c.Modes["provision"].Parameter != "EnableProvision" || c.Secrets["license_key"].KeyVaultSecret != "secret-license-key" {
		t.Errorf("config %s", b)
	}
	for name, in := range c.Inputs {
		if in.Value != nil || in.From == nil || in.From.KeyVaultSecret == "" && in.From.Parameter == "" {
			t.Errorf("input %s: %+v", name, in)
		}
	}
}

func TestAzureUnknownParam(t *testing.T) {
	o := exampleOptions(t)
	o.Params = map[string]string{"InstanceType": "t3.large"}
	if _, err := Azure(o); err == nil || !strings.Contains(err.Error(), "--param InstanceType: no such stack parameter") {
		t.Errorf("err %v", err)
	}
	o.Params = map[string]string{"VmSize": "Standard_D2s_v5", "EnableBreakGlass": "true"}
	tmpl, err := Azure(o)
	if err != nil {
		t.Fatal(err)
	}
	var doc armTemplate
	if err := json.Unmarshal(tmpl, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Parameters["VmSize"]["defaultValue"] != "Standard_D2s_v5" || doc.Parameters["EnableBreakGlass"]["defaultValue"] != true {
		t.Errorf("defaults %v %v", doc.Parameters["VmSize"], doc.Parameters["EnableBreakGlass"])
	}
}

// TestAzureRoles: each mode's identity gets its azure_roles of
// permissions.toml on the resource group; an app that does not list
// azure gets no Azure stack, one that does not list aws no CloudFormation.
func TestAzureRoles(t *testing.T) {
	tmpl, err := Azure(exampleOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	var doc armTemplate
	if err := json.Unmarshal(tmpl, &doc); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, r := range doc.Resources {
		if r.Type != "Microsoft.Authorization/roleAssignments" || r.Scope != "" {
			continue
		}
		id := regexp.MustCompile(`userAssignedIdentities', '([a-z-]+)'`).FindStringSubmatch(r.Name)[1]
		role := regexp.MustCompile(`'([0-9a-f-]{36})'\)\]$`).FindStringSubmatch(r.Properties["roleDefinitionId"].(string))[1]
		got[id] = append(got[id], role)
	}
	roles := config.AzureBuiltinRoles
	for id, want := range map[string][]string{
		"byoc-acme-provision":   {roles["Contributor"]},
		"byoc-acme-maintenance": {roles["Reader"], roles["Network Contributor"]},
		"byoc-acme-break-glass": {roles["Contributor"]},
	} {
		if strings.Join(got[id], ",") != strings.Join(want, ",") {
			t.Errorf("%s: roles %v, want %v", id, got[id], want)
		}
	}

	appTOML := string(load.ExampleFiles()["app.toml"])
	withClouds := func(c string) string { return strings.Replace(appTOML, `clouds = ["aws", "azure", "gcp"]`, c, 1) }
	awsOnly := exampleApp(t, map[string]string{"app.toml": withClouds(""), "permissions.toml": ""})
	o := exampleOptions(t)
	o.App = awsOnly
	if _, err := Azure(o); err == nil || !strings.Contains(err.Error(), "add azure to app.toml clouds") {
		t.Errorf("Azure of an aws-only app: %v", err)
	}
	o.App = exampleApp(t, map[string]string{"app.toml": withClouds(`clouds = ["azure"]`), "permissions.toml": ""})
	if _, err := CloudFormation(o); err == nil || !strings.Contains(err.Error(), "add aws to app.toml clouds") {
		t.Errorf("CloudFormation of an azure-only app: %v", err)
	}
}

func TestKeyVaultSecretName(t *testing.T) {
	for in, want := range map[string]string{"InputAdminEmail": "input-admin-email", "SecretLicenseKey": "secret-license-key", "EnrollmentToken": "enrollment-token"} {
		if got := KeyVaultSecretName(in); got != want {
			t.Errorf("%s → %s, want %s", in, got, want)
		}
	}
}

// TestAzureTagsInstallLabels: every resource of the ARM template carries
// the install and its labels, with a label key's / (which Azure refuses
// in tag names) as _.
func TestAzureTagsInstallLabels(t *testing.T) {
	o := exampleOptions(t)
	o.Labels = map[string]string{"customer": "acme", "example.com/tier": "gold"}
	tmpl, err := Azure(o)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Resources []struct {
			Type string
			Name string
			Tags map[string]string
		}
	}
	if err := json.Unmarshal(tmpl, &doc); err != nil {
		t.Fatal(err)
	}
	tagged := 0
	for _, r := range doc.Resources {
		if r.Tags == nil {
			continue
		}
		tagged++
		if r.Tags["byoc-install"] != o.Install || r.Tags["byoc-label-customer"] != "acme" || r.Tags["byoc-label-example.com_tier"] != "gold" {
			t.Errorf("%s %s tags: %v", r.Type, r.Name, r.Tags)
		}
		for k := range r.Tags {
			if strings.ContainsAny(k, "<>%&\\?/") {
				t.Errorf("%s: tag name %q has a character Azure refuses", r.Name, k)
			}
		}
	}
	if tagged < 5 {
		t.Fatalf("only %d resources tagged", tagged)
	}
}
