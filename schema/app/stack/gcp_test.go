package stack

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// TestGCPGolden: the example app's Google Cloud stack, as a golden
// file; terraform fmt (the real terraform) finds it well-formed and in
// canonical form.
func TestGCPGolden(t *testing.T) {
	tf, err := GCP(exampleOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("example.gcp", "main.tf"), tf)
	terraformFmt(t, tf)
}

// terraformFmt runs terraform fmt -check on tf, which parses it as HCL.
func terraformFmt(t *testing.T, tf []byte) {
	t.Helper()
	bin, err := exec.LookPath("terraform")
	if err != nil {
		t.Skip("terraform is not installed")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), tf, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "fmt", "-check", "-diff", "-no-color", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("terraform fmt -check: %v\n%s", err, out)
	}
}

// tfConfig is a Terraform configuration parsed by hcl/v2 (the parser
// terraform itself uses): its variables with their defaults, locals,
// resources and outputs.
type tfConfig struct {
	vars      map[string]*hcl.Block
	locals    map[string]*hclsyntax.Attribute
	resources map[string]*hclsyntax.Block // TYPE.NAME
	outputs   map[string]*hclsyntax.Block
}

func parseTF(t *testing.T, src []byte) *tfConfig {
	t.Helper()
	f, diags := hclsyntax.ParseConfig(src, "main.tf", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("main.tf: %s", diags.Error())
	}
	c := &tfConfig{vars: map[string]*hcl.Block{}, locals: map[string]*hclsyntax.Attribute{}, resources: map[string]*hclsyntax.Block{}, outputs: map[string]*hclsyntax.Block{}}
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		switch b.Type {
		case "variable":
			c.vars[b.Labels[0]] = b.AsHCLBlock()
		case "locals":
			for n, a := range b.Body.Attributes {
				if _, dup := c.locals[n]; dup {
					t.Errorf("local.%s is defined twice", n)
				}
				c.locals[n] = a
			}
		case "resource":
			k := b.Labels[0] + "." + b.Labels[1]
			if _, dup := c.resources[k]; dup {
				t.Errorf("%s is defined twice", k)
			}
			c.resources[k] = b
		case "output":
			c.outputs[b.Labels[0]] = b
		case "terraform", "provider":
		default:
			t.Errorf("main.tf:%d: unexpected block %s", b.Range().Start.Line, b.Type)
		}
	}
	return c
}

// checkRefs checks that every reference in the configuration names a
// declared variable, local or resource, that a resource with count is
// referenced through an index and one without is not.
func (c *tfConfig) checkRefs(t *testing.T) {
	t.Helper()
	var walk func(body *hclsyntax.Body)
	walk = func(body *hclsyntax.Body) {
		for _, a := range body.Attributes {
			for _, tr := range a.Expr.Variables() {
				line := tr.SourceRange().Start.Line
				root := tr.RootName()
				switch root {
				case "var":
					name := tr[1].(hcl.TraverseAttr).Name
					if c.vars[name] == nil {
						t.Errorf("main.tf:%d: var.%s is not declared", line, name)
					}
				case "local":
					name := tr[1].(hcl.TraverseAttr).Name
					if c.locals[name] == nil {
						t.Errorf("main.tf:%d: local.%s is not defined", line, name)
					}
				case "each", "count", "path", "terraform", "self":
				default:
					if len(tr) < 2 {
						t.Errorf("main.tf:%d: %s is not a reference Terraform knows", line, root)
						continue
					}
					k := root + "." + tr[1].(hcl.TraverseAttr).Name
					r := c.resources[k]
					if r == nil {
						t.Errorf("main.tf:%d: %s is not declared", line, k)
						continue
					}
					_, counted := r.Body.Attributes["count"]
					_, forEach := r.Body.Attributes["for_each"]
					indexed := len(tr) > 2
					if indexed {
						_, indexed = tr[2].(hcl.TraverseIndex)
					}
					// depends_on names whole resources.
					if a.Name != "depends_on" && (counted || forEach) != indexed && !(forEach && len(tr) == 2) {
						t.Errorf("main.tf:%d: %s has count %v, for_each %v but is referenced with an index %v", line, k, counted, forEach, indexed)
					}
				}
			}
		}
		for _, b := range body.Blocks {
			walk(b.Body)
		}
	}
	for _, r := range c.resources {
		walk(r.Body)
	}
	for _, a := range c.locals {
		walk(&hclsyntax.Body{Attributes: hclsyntax.Attributes{a.Name: a}})
	}
	for _, o := range c.outputs {
		walk(o.Body)
	}
}

// evalLocal evaluates local name with the variables' defaults and
// over, the locals it needs, and resources whose attributes are made
// up from their literal ones (a service account's email from its
// account_id); a counted resource has count's number of instances.
func (c *tfConfig) evalLocal(t *testing.T, name string, over map[string]cty.Value) cty.Value {
	t.Helper()
	vars := map[string]cty.Value{}
	for n, b := range c.vars {
		content, _, _ := b.Body.PartialContent(&hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "default"}}})
		if a, ok := content.Attributes["default"]; ok {
			v, d := a.Expr.Value(nil)
			if d.HasErrors() {
				t.Fatalf("variable %s default: %s", n, d.Error())
			}
			vars[n] = v
		}
	}
	maps.Copy(vars, over)
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{"var": cty.ObjectVal(vars)}}
	locals := map[string]cty.Value{}
	// Resources: attributes from literals, evaluated with var only.
	byType := map[string]map[string]cty.Value{}
	for k, r := range c.resources {
		typ, rn, _ := strings.Cut(k, ".")
		attrs := map[string]cty.Value{}
		for an, a := range r.Body.Attributes {
			if v, d := a.Expr.Value(ctx); !d.HasErrors() && v.Type() == cty.String && v.IsKnown() {
				attrs[an] = v
			}
		}
		id := rn
		if v, ok := attrs["account_id"]; ok {
			id = v.AsString()
			attrs["email"] = cty.StringVal(id + "@" + vars["project_id"].AsString() + ".iam.gserviceaccount.com")
		}
		if _, ok := attrs["name"]; !ok {
			attrs["name"] = cty.StringVal(id)
		}
		attrs["id"] = cty.StringVal("projects/" + vars["project_id"].AsString() + "/" + typ + "/" + id)
		obj := cty.ObjectVal(attrs)
		if ca, ok := r.Body.Attributes["count"]; ok {
			n, d := ca.Expr.Value(ctx)
			if d.HasErrors() {
				t.Fatalf("%s count: %s", k, d.Error())
			}
			var list []cty.Value
			for i := 0; n.Equals(cty.NumberIntVal(int64(i))).False(); i++ {
				list = append(list, obj)
			}
			if len(list) == 0 {
				obj = cty.EmptyTupleVal
			} else {
				obj = cty.TupleVal(list)
			}
		}
		if byType[typ] == nil {
			byType[typ] = map[string]cty.Value{}
		}
		byType[typ][rn] = obj
	}
	for typ, m := range byType {
		ctx.Variables[typ] = cty.ObjectVal(m)
	}
	// Locals, in as many rounds as they need.
	for range len(c.locals) + 1 {
		ctx.Variables["local"] = cty.ObjectVal(locals)
		for n, a := range c.locals {
			if _, done := locals[n]; done {
				continue
			}
			if v, d := a.Expr.Value(ctx); !d.HasErrors() {
				locals[n] = v
			}
		}
	}
	v, ok := locals[name]
	if !ok {
		_, d := c.locals[name].Expr.Value(ctx)
		t.Fatalf("local.%s: %s", name, d.Error())
	}
	return v
}

// TestGCPTerraform: the configuration parses with hcl/v2, every
// reference resolves, and its stack config, evaluated with the
// variables' defaults and with modes turned off, is one the agent
// accepts (stackconfig.Parse) with the modes' accounts and switches.
func TestGCPTerraform(t *testing.T) {
	tf, err := GCP(exampleOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	c := parseTF(t, tf)
	c.checkRefs(t)
	for _, want := range []string{"google_service_account.agent", "google_service_account.mode_provision", "google_project_iam_member.mode_provision",
		"google_service_account_iam_member.mode_provision_agent", "google_artifact_registry_repository.install", "google_compute_instance.agent",
		"google_secret_manager_secret.enrollment_token", "google_secret_manager_secret.secret_license_key", "google_compute_router_nat.agent",
		"google_compute_firewall.agent_deny_in"} {
		if c.resources[want] == nil {
			t.Errorf("no %s", want)
		}
	}
	for _, tc := range []struct {
		over  map[string]cty.Value
		check func(*stackconfig.Config)
	}{
		{nil, func(sc *stackconfig.Config) {
			if r := sc.Modes["provision"]; !r.Enabled || r.ServiceAccount != "byoc-acme-provision@acme-prod-1.iam.gserviceaccount.com" || r.Parameter != "enable_provision" {
				t.Errorf("provision: %+v", r)
			}
			if r := sc.Modes["break_glass"]; r.Enabled || r.ServiceAccount != "" || r.Parameter != "enable_break_glass" {
				t.Errorf("break_glass (off by default): %+v", r)
			}
		}},
		{map[string]cty.Value{"enable_maintenance": cty.False, "enable_break_glass": cty.True, "input_admin_email": cty.StringVal("ops@acme.example")}, func(sc *stackconfig.Config) {
			if r := sc.Modes["maintenance"]; r.Enabled || r.ServiceAccount != "" {
				t.Errorf("maintenance (turned off): %+v", r)
			}
			if r := sc.Modes["break_glass"]; !r.Enabled || r.ServiceAccount != "byoc-acme-break-glass@acme-prod-1.iam.gserviceaccount.com" {
				t.Errorf("break_glass (turned on): %+v", r)
			}
			if in := sc.Inputs["admin_email"]; in.From == nil || in.From.GCPSecret != "byoc-acme-input-admin-email" || !in.Sensitive {
				t.Errorf("admin_email: %+v", in)
			}
		}},
	} {
		over := map[string]cty.Value{"project_id": cty.StringVal("acme-prod-1")}
		maps.Copy(over, tc.over)
		v := c.evalLocal(t, "stack_config", over)
		b, err := ctyjson.Marshal(v, v.Type())
		if err != nil {
			t.Fatal(err)
		}
		sc, err := stackconfig.Parse(b)
		if err != nil {
			t.Fatalf("the stack config the VM gets: %v\n%s", err, b)
		}
		if sc.Format != stackconfig.FormatGCP || sc.GCP.Project != "acme-prod-1" || sc.GCP.AgentServiceAccount != "byoc-acme-agent@acme-prod-1.iam.gserviceaccount.com" ||
			sc.EnrollToken.GCPSecret != "byoc-acme-enrollment-token" || sc.Registry != "europe-west1-docker.pkg.dev/acme-prod-1/byoc-acme" ||
			sc.Secrets["license_key"].GCPSecret != "byoc-acme-secret-license-key" {
			t.Errorf("stack config %s", b)
		}
		tc.check(sc)
	}
	// The VM has no external address, and nothing may connect to it.
	vm := c.resources["google_compute_instance.agent"]
	for _, b := range vm.Body.Blocks {
		if b.Type == "network_interface" && len(b.Body.Blocks) > 0 {
			t.Errorf("the agent's network interface has a %s block (an external address)", b.Body.Blocks[0].Type)
		}
	}
	if !strings.Contains(string(tf), "direction     = \"INGRESS\"") || !strings.Contains(string(tf), "\"7443\"") {
		t.Error("no deny-all ingress rule, or imsd's port is not allowed out")
	}
}

// TestGCPNames: a long install's names stay within Google Cloud's
// limits (service account ids 6 to 30, Compute Engine names 63) and
// differ by mode.
func TestGCPNames(t *testing.T) {
	o := exampleOptions(t)
	o.Install = strings.Repeat("a", 30) + "-" + strings.Repeat("b", 29)
	tf, err := GCP(o)
	if err != nil {
		t.Fatal(err)
	}
	c := parseTF(t, tf)
	seen := map[string]bool{}
	for k, r := range c.resources {
		if a, ok := r.Body.Attributes["account_id"]; ok {
			v, _ := a.Expr.Value(nil)
			id := v.AsString()
			if len(id) < 6 || len(id) > 30 || seen[id] || strings.HasSuffix(id, "-") {
				t.Errorf("%s: account id %q", k, id)
			}
			seen[id] = true
		}
	}
	v := c.evalLocal(t, "prefix", map[string]cty.Value{"project_id": cty.StringVal("acme-prod-1")})
	if n := len(v.AsString()) + len("-allow-out"); n > 63 {
		t.Errorf("prefix %q makes names of %d characters", v.AsString(), n)
	}
}
