// Command tfgoogleschema is a schema-only stand-in for the
// hashicorp/google Terraform provider, so that `terraform validate` can
// check byoc's Google Cloud install stack where the real provider cannot
// be downloaded or built. Its schema is the real provider's, read from
// the provider's prebuilt CDKTF bindings (npm @cdktf/provider-google).
//
//	tfgoogleschema convert PACKAGE.tgz SCHEMA.json.gz
//
// converts the bindings into a schema file. Started by Terraform (as
// terraform-provider-google_vX.Y.Z), it serves the schema in
// schema.json.gz beside its own executable: validation is Terraform's
// own check against the schema plus the stand-in's of computed-only
// attributes set, and anything that would plan, apply or read fails
// saying it is a stand-in.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/byoc-dev/byoc/tools/tfgoogleschema/cdktf"
	"github.com/byoc-dev/byoc/tools/tfgoogleschema/schema"
	"github.com/byoc-dev/byoc/tools/tfgoogleschema/server"
)

// schemaFile is the schema's name beside the executable.
const schemaFile = "schema.json.gz"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "convert" {
		if len(os.Args) != 4 {
			fmt.Fprintln(os.Stderr, "usage: tfgoogleschema convert PACKAGE.tgz SCHEMA.json.gz")
			os.Exit(2)
		}
		if err := convert(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, "tfgoogleschema:", err)
			os.Exit(1)
		}
		return
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tfgoogleschema:", err)
		os.Exit(1)
	}
	if err := server.Serve(filepath.Join(filepath.Dir(exe), schemaFile)); err != nil {
		fmt.Fprintln(os.Stderr, "tfgoogleschema:", err)
		os.Exit(1)
	}
}

func convert(pkg, out string) error {
	start := time.Now()
	p, err := cdktf.ReadTarball(pkg)
	if err != nil {
		return err
	}
	s, err := p.Convert()
	if err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	if err := schema.Write(out, s); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "tfgoogleschema: %d resource types, %d data sources from %s in %s\n",
		len(s.ResourceSchemas), len(s.DataSourceSchemas), filepath.Base(pkg), time.Since(start).Round(time.Millisecond))
	return nil
}
