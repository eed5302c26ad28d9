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
	for _, tc := range []struct{ from, to, want string }{
		{`"version":1`, `"version":2`, "version: 2"},
		{`"format":"cloudformation"`, `"format":"terraform"`, "format:"},
		{`"ims":"https://ims.example.com"`, `"ims":"ims.example.com"`, "ims:"},
		{`"provision":{`, `"provisioning":{`, "modes.provisioning: unknown permission mode"},
		{`"arn":"arn:aws:iam::123456789012:role/p"`, `"arn":""`, "modes.provision.arn"},
		{`"parameter":"EnableProvision"`, `"parameter":""`, "modes.provision.parameter"},
		{`"sensitive":true,"from"`, `"sensitive":true,"value":"x","from"`, "inputs.admin_email: set value or from"},
		{`secret:tok"`, `secret:tok","file":"t"`, "enroll_token: set one of secret_arn, key_vault_secret or file"},
		{`"install":"acme"`, `"install":"acme","instal":"x"`, `unknown field "instal"`},
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
