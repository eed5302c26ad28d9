package stackconfig

import (
	"strings"
	"testing"
)

const valid = `{"version":1,"format":"cloudformation","install":"acme","ims":"https://ims.example.com",
 "enroll_token":{"secret_arn":"arn:aws:secretsmanager:eu-west-1:123456789012:secret:tok"},
 "modes":{"provision":{"enabled":true,"arn":"arn:aws:iam::123456789012:role/p","parameter":"EnableProvision"},
          "break_glass":{"enabled":false,"arn":"","parameter":"EnableBreakGlass"}},
 "inputs":{"admin_email":{"sensitive":true,"from":{"secret_arn":"arn:aws:secretsmanager:eu-west-1:123456789012:secret:in"}}}}`

func TestParse(t *testing.T) {
	c, err := Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Modes["provision"].Enabled || c.Modes["break_glass"].Enabled {
		t.Errorf("modes: %+v", c.Modes)
	}
	e, err := Parse([]byte(strings.Replace(valid, `"install":"acme"`, `"install":"acme","egress_ledger":{"content":"logs,outputs","max_bytes":8388608}`, 1)))
	if err != nil || e.EgressLedger == nil || e.EgressLedger.Content != "logs,outputs" || e.EgressLedger.MaxBytes != 8<<20 {
		t.Errorf("egress_ledger: %+v, %v", e.EgressLedger, err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{`"version":1`, `"version":2`, "version: 2"},
		{`"format":"cloudformation"`, `"format":"terraform"`, "format:"},
		{`"ims":"https://ims.example.com"`, `"ims":"ims.example.com"`, "ims:"},
		{`"provision":{`, `"provisioning":{`, "modes.provisioning: unknown permission mode"},
		{`"arn":"arn:aws:iam::123456789012:role/p"`, `"arn":""`, "modes.provision.arn"},
		{`"parameter":"EnableProvision"`, `"parameter":""`, "modes.provision.parameter"},
		{`"sensitive":true,"from"`, `"sensitive":true,"value":"x","from"`, "inputs.admin_email: set value or from"},
		{`secret:tok"`, `secret:tok","file":"t"`, "enroll_token: set one of secret_arn, key_vault_secret, gcp_secret or file"},
		{`"install":"acme"`, `"install":"acme","instal":"x"`, `unknown field "instal"`},
		{`"install":"acme"`, `"install":"acme","egress_ledger":{"content":"logs,secrets"}`, `egress_ledger.content: "secrets" is not a content kind`},
		{`"install":"acme"`, `"install":"acme","egress_ledger":{"max_bytes":1000}`, `egress_ledger.max_bytes: 1000; want at least 1 MiB`},
	} {
		_, err := Parse([]byte(strings.Replace(valid, tc.from, tc.to, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s → %s: %v, want an error with %q", tc.from, tc.to, err, tc.want)
		}
	}
}

const validAzure = `{"version":1,"format":"azure","install":"acme","ims":"https://ims.example.com",
 "azure":{"tenant_id":"72f988bf-86f1-41af-91ab-2d7cd011db47","subscription_id":"00000000-0000-0000-0000-0000000000aa",
          "resource_group":"acme-byoc","agent_client_id":"11111111-1111-1111-1111-111111111111","key_vault_url":"https://acme-kv.vault.azure.net/"},
 "enroll_token":{"key_vault_secret":"enrollment-token"},
 "modes":{"provision":{"enabled":true,"client_id":"22222222-2222-2222-2222-222222222222","parameter":"EnableProvision"},
          "break_glass":{"enabled":false,"parameter":"EnableBreakGlass"}},
 "secrets":{"license_key":{"key_vault_secret":"secret-license-key"}},
 "endpoints":{"keyvault":"https://127.0.0.1:8443/"}}`

func TestParseAzure(t *testing.T) {
	c, err := Parse([]byte(validAzure))
	if err != nil {
		t.Fatal(err)
	}
	if c.Azure.ResourceGroup != "acme-byoc" || c.Modes["provision"].ClientID != "22222222-2222-2222-2222-222222222222" {
		t.Errorf("parsed %+v", c)
	}
	for _, tc := range []struct{ from, to, want string }{
		{`"tenant_id":"72f988bf-86f1-41af-91ab-2d7cd011db47"`, `"tenant_id":"contoso"`, "azure.tenant_id"},
		{`"agent_client_id":"11111111-1111-1111-1111-111111111111"`, `"agent_client_id":""`, "azure.agent_client_id"},
		{`"resource_group":"acme-byoc"`, `"resource_group":"a/b"`, "azure.resource_group"},
		{`"key_vault_url":"https://acme-kv.vault.azure.net/"`, `"key_vault_url":"http://acme-kv"`, "azure.key_vault_url"},
		{`"client_id":"22222222-2222-2222-2222-222222222222"`, `"client_id":""`, "modes.provision.client_id"},
		{`"client_id":"22222222-2222-2222-2222-222222222222"`, `"arn":"arn:aws:iam::123456789012:role/p"`, "modes.provision.arn: an azure stack"},
		{`{"key_vault_secret":"enrollment-token"}`, `{"secret_arn":"arn:aws:secretsmanager:eu-west-1:123456789012:secret:tok"}`, "enroll_token.secret_arn: an azure stack"},
		{`"key_vault_secret":"secret-license-key"`, `"key_vault_secret":"secret_license_key"`, "secrets.license_key.key_vault_secret"},
		{`"endpoints":{"keyvault"`, `"endpoints":{"sts"`, "endpoints.sts: unknown service of an azure stack"},
		{`"resource_group":"acme-byoc"`, `"resource_group":"acme-byoc","region":"x"`, `unknown field "region"`},
		{`"format":"azure"`, `"format":"cloudformation"`, "azure: only a stack of format azure"},
	} {
		_, err := Parse([]byte(strings.Replace(validAzure, tc.from, tc.to, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s → %s: %v, want an error with %q", tc.from, tc.to, err, tc.want)
		}
	}
	noAzure := strings.Replace(validAzure, `"azure":{`, `"azur":{`, 1)
	if _, err := Parse([]byte(noAzure)); err == nil || !strings.Contains(err.Error(), `unknown field "azur"`) {
		t.Errorf("azur: %v", err)
	}
	// A key_vault_secret in a CloudFormation stack is refused.
	if _, err := Parse([]byte(strings.Replace(valid, `{"secret_arn":"arn:aws:secretsmanager:eu-west-1:123456789012:secret:tok"}`, `{"key_vault_secret":"tok"}`, 1))); err == nil || !strings.Contains(err.Error(), "enroll_token.key_vault_secret: only an azure stack") {
		t.Errorf("key_vault_secret in cloudformation: %v", err)
	}
}

func TestPascal(t *testing.T) {
	for in, want := range map[string]string{"break_glass": "BreakGlass", "admin_email": "AdminEmail", "a-b.c": "ABC", "x": "X"} {
		if got := Pascal(in); got != want {
			t.Errorf("Pascal(%q) = %q, want %q", in, got, want)
		}
	}
}

const validGCP = `{"version":1,"format":"gcp","install":"acme","ims":"https://ims.example.com",
 "gcp":{"project":"acme-prod-1","region":"europe-west1","agent_service_account":"acme-agent@acme-prod-1.iam.gserviceaccount.com"},
 "enroll_token":{"gcp_secret":"acme-enrollment-token"},
 "modes":{"provision":{"enabled":true,"service_account":"acme-provision@acme-prod-1.iam.gserviceaccount.com","parameter":"enable_provision"},
          "break_glass":{"enabled":false,"parameter":"enable_break_glass"}},
 "secrets":{"license_key":{"gcp_secret":"acme-secret-license-key"}},
 "endpoints":{"iamcredentials":"https://127.0.0.1:8443/","secretmanager":"https://127.0.0.1:8443/"}}`

func TestParseGCP(t *testing.T) {
	c, err := Parse([]byte(validGCP))
	if err != nil {
		t.Fatal(err)
	}
	if c.GCP.Project != "acme-prod-1" || c.Modes["provision"].ServiceAccount != "acme-provision@acme-prod-1.iam.gserviceaccount.com" {
		t.Errorf("parsed %+v", c)
	}
	for _, tc := range []struct{ from, to, want string }{
		{`"project":"acme-prod-1"`, `"project":"Acme"`, "gcp.project"},
		{`"region":"europe-west1"`, `"region":"europe west"`, "gcp.region"},
		{`"agent_service_account":"acme-agent@acme-prod-1.iam.gserviceaccount.com"`, `"agent_service_account":"agent@example.com"`, "gcp.agent_service_account"},
		{`"service_account":"acme-provision@acme-prod-1.iam.gserviceaccount.com"`, `"service_account":""`, "modes.provision.service_account"},
		{`"service_account":"acme-provision@acme-prod-1.iam.gserviceaccount.com"`, `"arn":"arn:aws:iam::123456789012:role/p"`, "modes.provision.arn: a gcp stack"},
		{`{"gcp_secret":"acme-enrollment-token"}`, `{"key_vault_secret":"tok"}`, "enroll_token.key_vault_secret: only an azure stack"},
		{`"gcp_secret":"acme-secret-license-key"`, `"gcp_secret":"a/b"`, "secrets.license_key.gcp_secret"},
		{`"endpoints":{"iamcredentials"`, `"endpoints":{"sts"`, "endpoints.sts: unknown service of a gcp stack"},
		{`"format":"gcp"`, `"format":"local"`, "gcp: only a stack of format gcp"},
	} {
		_, err := Parse([]byte(strings.Replace(validGCP, tc.from, tc.to, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s → %s: %v, want an error with %q", tc.from, tc.to, err, tc.want)
		}
	}
	if _, err := Parse([]byte(strings.Replace(valid, `{"secret_arn":"arn:aws:secretsmanager:eu-west-1:123456789012:secret:tok"}`, `{"gcp_secret":"tok"}`, 1))); err == nil || !strings.Contains(err.Error(), "enroll_token.gcp_secret: only a gcp stack") {
		t.Errorf("gcp_secret in cloudformation: %v", err)
	}
	if _, err := Parse([]byte(strings.Replace(validGCP, `"gcp":{`, `"gcpx":{`, 1))); err == nil || !strings.Contains(err.Error(), `unknown field "gcpx"`) {
		t.Errorf("gcpx: %v", err)
	}
}
