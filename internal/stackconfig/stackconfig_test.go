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
		{`secret:tok"`, `secret:tok","file":"t"`, "enroll_token: set secret_arn or file"},
		{`"install":"acme"`, `"install":"acme","instal":"x"`, `unknown field "instal"`},
	} {
		_, err := Parse([]byte(strings.Replace(valid, tc.from, tc.to, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s → %s: %v, want an error with %q", tc.from, tc.to, err, tc.want)
		}
	}
}

func TestPascal(t *testing.T) {
	for in, want := range map[string]string{"break_glass": "BreakGlass", "admin_email": "AdminEmail", "a-b.c": "ABC", "x": "X"} {
		if got := Pascal(in); got != want {
			t.Errorf("Pascal(%q) = %q, want %q", in, got, want)
		}
	}
}
