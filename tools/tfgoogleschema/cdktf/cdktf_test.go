package cdktf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/byoc-dev/byoc/tools/tfgoogleschema/schema"
)

// The pinned package scripts/terraform-mirror.sh downloads.
var realPackage = filepath.Join("..", "..", "..", ".cache", "cdktf", "provider-google-16.12.1.tgz")

var converted = sync.OnceValues(func() (*schema.Provider, error) {
	p, err := ReadTarball(realPackage)
	if err != nil {
		return nil, err
	}
	return p.Convert()
})

// google converts the real @cdktf/provider-google package (once). Without
// it the test fails under CI=true (scripts/terraform-mirror.sh fetches it)
// and is skipped otherwise.
func google(t *testing.T) *schema.Provider {
	t.Helper()
	if _, err := os.Stat(realPackage); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v: scripts/terraform-mirror.sh downloads it", err)
		}
		t.Skipf("%v: scripts/terraform-mirror.sh downloads it", err)
	}
	s, err := converted()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func typeOf(t *testing.T, a *schema.Attribute) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(a.Type, &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestConvertGoogle: known shapes of hashicorp/google 6.50.0 come out of
// its CDKTF bindings as the provider declares them.
func TestConvertGoogle(t *testing.T) {
	s := google(t)
	if n := len(s.ResourceSchemas); n < 1000 {
		t.Errorf("%d resource types", n)
	}
	if n := len(s.DataSourceSchemas); n < 300 {
		t.Errorf("%d data sources", n)
	}
	vm := s.ResourceSchemas["google_compute_instance"]
	if vm == nil {
		t.Fatal("no google_compute_instance")
	}
	ni := vm.Block.BlockTypes["network_interface"]
	dataCluster := s.DataSourceSchemas["google_container_cluster"]
	if ni == nil || dataCluster == nil {
		t.Fatal("no network_interface block, or no data source google_container_cluster")
	}
	for _, tc := range []struct {
		what                         string
		attr                         *schema.Attribute
		typ                          string
		required, optional, computed bool
	}{
		{"a required string", vm.Block.Attributes["machine_type"], `"string"`, true, false, false},
		{"an optional map", vm.Block.Attributes["labels"], `["map","string"]`, false, true, false},
		{"an optional set", vm.Block.Attributes["tags"], `["set","string"]`, false, true, false},
		{"a computed-only string", vm.Block.Attributes["self_link"], `"string"`, false, false, true},
		{"a computed-only map", vm.Block.Attributes["effective_labels"], `["map","string"]`, false, false, true},
		{"a computed-only attribute in a block", ni.Block.Attributes["name"], `"string"`, false, false, true},
		{"a data source's argument", s.DataSourceSchemas["google_compute_network"].Block.Attributes["name"], `"string"`, true, false, false},
		{"a data source's computed list", s.DataSourceSchemas["google_compute_network"].Block.Attributes["subnetworks_self_links"], `["list","string"]`, false, false, true},
		{"a computed list of objects (in index-structs)", dataCluster.Block.Attributes["release_channel"], `["list",["object",{"channel":"string"}]]`, false, false, true},
		{"the provider's project", s.Provider.Block.Attributes["project"], `"string"`, false, true, false},
	} {
		if tc.attr == nil {
			t.Errorf("%s: missing", tc.what)
			continue
		}
		if got := typeOf(t, tc.attr); got != tc.typ || tc.attr.Required != tc.required || tc.attr.Optional != tc.optional || tc.attr.Computed != tc.computed {
			t.Errorf("%s: %s required %v optional %v computed %v, want %s %v %v %v", tc.what, got, tc.attr.Required, tc.attr.Optional, tc.attr.Computed,
				tc.typ, tc.required, tc.optional, tc.computed)
		}
	}
	for _, tc := range []struct {
		what     string
		block    *schema.NestedBlock
		mode     string
		min, max int64
	}{
		{"a required list block", ni, schema.NestingList, 1, 0},
		{"a required max-1 block", vm.Block.BlockTypes["boot_disk"], schema.NestingList, 1, 1},
		{"an optional max-1 block", vm.Block.BlockTypes["scheduling"], schema.NestingList, 0, 1},
		{"an optional list block", vm.Block.BlockTypes["attached_disk"], schema.NestingList, 0, 0},
		{"a block in a block", ni.Block.BlockTypes["access_config"], schema.NestingList, 0, 0},
		{"a set block", s.ResourceSchemas["google_compute_firewall"].Block.BlockTypes["allow"], schema.NestingSet, 0, 0},
		{"timeouts", vm.Block.BlockTypes["timeouts"], schema.NestingSingle, 0, 0},
		{"a required block (secret replication)", s.ResourceSchemas["google_secret_manager_secret"].Block.BlockTypes["replication"], schema.NestingList, 1, 1},
	} {
		if tc.block == nil {
			t.Errorf("%s: missing", tc.what)
			continue
		}
		if tc.block.NestingMode != tc.mode || tc.block.MinItems != tc.min || tc.block.MaxItems != tc.max {
			t.Errorf("%s: %s min %d max %d, want %s %d %d", tc.what, tc.block.NestingMode, tc.block.MinItems, tc.block.MaxItems, tc.mode, tc.min, tc.max)
		}
	}
	if _, ok := s.Provider.Block.Attributes["alias"]; ok {
		t.Error("the provider schema has alias, a meta-argument")
	}
	if a := vm.Block.Attributes["network_interface"]; a != nil {
		t.Error("network_interface is both a block and an attribute")
	}
}

const minimalJSII = `{"types": {
  "@cdktf/provider-google.foo.FooConfig": {"kind": "interface", "name": "FooConfig", "locationInModule": {"filename": "src/foo/index.ts"},
    "properties": [{"name": "name"}, {"name": "odd", "optional": true}]}}}`

const fooJS = `"use strict";
class Foo extends cdktf.TerraformResource {
    synthesizeHclAttributes() {
        const attrs = {
            name: {
                value: cdktf.stringToHclTerraform(this._name),
                isBlock: false,
                type: "simple",
                storageClassType: "string",
            },
            odd: {
                value: ODD,
                isBlock: false,
                type: "simple",
                storageClassType: "STORAGE",
            },
        };
        return attrs;
    }
}
Foo.tfResourceType = "google_foo";
`

// TestConvertErrors: a shape the converter does not know is an error
// naming the file and the type, not an attribute quietly left out.
func TestConvertErrors(t *testing.T) {
	for _, tc := range []struct {
		name, odd, storage, want string
	}{
		{"known", "cdktf.stringToHclTerraform(this._odd)", "string", ""},
		{"unknown value", "somethingNew(this._odd, 2)", "string", `lib/foo/index.js: class Foo: synthesizeHclAttributes: attribute odd: unrecognised value`},
		{"unknown storage", "cdktf.anyToHclTerraform(this._odd)", "anyStrange", `lib/foo/index.js: google_foo (class Foo): odd: unknown attribute shape`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := strings.NewReplacer("ODD", tc.odd, "STORAGE", tc.storage).Replace(fooJS)
			js += "class GoogleProvider extends cdktf.TerraformProvider {\n}\nGoogleProvider.tfResourceType = \"google\";\n"
			jsii := strings.Replace(minimalJSII, `"types": {`, `"types": {"@cdktf/provider-google.provider.GoogleProviderConfig": {"kind": "interface", "name": "GoogleProviderConfig", "locationInModule": {"filename": "src/foo/index.ts"}},`, 1)
			p := &Package{files: map[string][]byte{".jsii": []byte(jsii), "lib/foo/index.js": []byte(js)}}
			s, err := p.Convert()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if a := s.ResourceSchemas["google_foo"].Block.Attributes["odd"]; a == nil || !a.Optional || s.ResourceSchemas["google_foo"].Block.Attributes["name"].Required != true {
					t.Errorf("google_foo: %+v", s.ResourceSchemas["google_foo"].Block)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
