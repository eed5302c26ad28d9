package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/byoc-dev/byoc/internal/chartpack"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/plugins/terraform/tfmodule"
)

const moduleUsage = `usage: agentd module push [--kind terraform|helm] [--state-dir DIR | --install-registry LOCATION] DIR REPO:TAG

Packs a Terraform module directory as a module artifact (--kind terraform,
the default), or a Helm chart directory as the chart artifact helm push
makes (--kind helm), and stores it in
the install registry (default oci:DIR/registry, the agent's own; a
registry server's credentials from $BYOC_INSTALL_REGISTRY_USERNAME and
_PASSWORD, or _TOKEN), where
components of type terraform find it as module = "REPO@DIGEST" (helm: as
chart = "REPO@DIGEST"; a tag is refused: it could move). It prints the
artifact's digest; the same files
always give the same digest.

Until the build agent packages and syncs modules and charts into install
registries, this is how they get there by hand (development, the example
app).
`

// moduleCmd runs "agentd module ...".
func moduleCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agentd module", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), moduleUsage) }
	stateDir := fs.String("state-dir", os.Getenv("BYOC_STATE_DIR"), "the agent's state `directory`; also $BYOC_STATE_DIR")
	kind := fs.String("kind", "terraform", "what DIR is: `terraform` (a module) or helm (a chart)")
	registry := fs.String("install-registry", os.Getenv("BYOC_INSTALL_REGISTRY"), "the install registry `location` (oci:DIR); default oci:STATE/registry")
	words, code := parseWords(fs, args, stdout)
	if words == nil {
		return code
	}
	if words[0] != "push" || len(words) != 3 {
		fs.Usage()
		return 2
	}
	if *kind != "terraform" && *kind != "helm" {
		fmt.Fprintf(stderr, "agentd module push: --kind must be terraform or helm, got %q\n", *kind)
		return 2
	}
	loc := *registry
	if loc == "" {
		if *stateDir == "" {
			fmt.Fprintln(stderr, "agentd module push: give --state-dir (the agent's state directory) or --install-registry")
			return 2
		}
		dir, err := filepath.Abs(*stateDir)
		if err != nil {
			fmt.Fprintf(stderr, "agentd module push: %v\n", err)
			return 1
		}
		loc = "oci:" + filepath.Join(dir, "registry")
	}
	// A registry server's credentials: the same names the agent's
	// secrets file uses for them.
	creds := ocicopy.CredentialsFromEnv(map[string]string{
		"BYOC_INSTALL_REGISTRY_USERNAME": os.Getenv("BYOC_INSTALL_REGISTRY_USERNAME"),
		"BYOC_INSTALL_REGISTRY_PASSWORD": os.Getenv("BYOC_INSTALL_REGISTRY_PASSWORD"),
		"BYOC_INSTALL_REGISTRY_TOKEN":    os.Getenv("BYOC_INSTALL_REGISTRY_TOKEN"),
	}, "BYOC_INSTALL_REGISTRY")
	var dg string
	var err error
	if *kind == "helm" {
		dg, err = pushChart(ctx, words[1], loc, words[2], creds)
	} else {
		dg, err = tfmodule.Push(ctx, words[1], loc, words[2], creds)
	}
	if err != nil {
		fmt.Fprintf(stderr, "agentd module push: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s %s\n", words[2], dg)
	return 0
}

// pushChart pushes the chart in dir to REPO:TAG of the install registry
// location loc.
func pushChart(ctx context.Context, dir, loc, ref string, creds ocicopy.Credentials) (string, error) {
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if strings.Contains(ref, "@") || colon <= slash || colon == len(ref)-1 {
		return "", fmt.Errorf("chart %q: give REPO:TAG (the digest is printed)", ref)
	}
	d, err := chartpack.Push(ctx, dir, loc, ref[:colon], ref[colon+1:], creds)
	return d.String(), err
}
