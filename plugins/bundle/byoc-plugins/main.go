// Command byoc-plugins serves the built-in component types that are too
// heavy to link into agentd (see package bundle): agentd's plugin loader
// runs "byoc-plugins TYPE" for a job of type TYPE, as it re-executes itself
// ("agentd plugin TYPE") for its light built-in types.
//
//	byoc-plugins TYPE        serve TYPE over the plugin protocol (agentd runs this)
//	byoc-plugins --version   print the version, commit and build date
//	byoc-plugins --types     list the types it serves, one a line
//	byoc-plugins --check-kubernetes
//	                         reach the API server of $KUBECONFIG (else the
//	                         in-cluster config) as a helm job would, and
//	                         print its address and version (agentd preflight)
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/internal/buildinfo"
	"github.com/byoc-dev/byoc/plugins/action/sandbox"
	"github.com/byoc-dev/byoc/plugins/helm"
	"github.com/byoc-dev/byoc/plugins/image"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/terraform"
)

// types are the component types this binary serves; bundle.Types names
// the same set for agentd (a test checks that they agree).
var types = map[string]func() sdk.Plugin{
	"helm":      func() sdk.Plugin { return helm.New() },
	"image":     func() sdk.Plugin { return image.New() },
	"terraform": func() sdk.Plugin { return terraform.New() },
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(stdout, buildinfo.Get().String("byoc-plugins"))
		return 0
	}
	if len(args) == 1 && args[0] == "--types" {
		fmt.Fprintln(stdout, strings.Join(names(), "\n"))
		return 0
	}
	if len(args) == 1 && args[0] == "--check-kubernetes" {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		v, err := helm.ServerVersion(ctx, os.Getenv("KUBECONFIG"))
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintln(stdout, v)
		return 0
	}
	if len(args) == 0 || types[args[0]] == nil {
		fmt.Fprintf(stderr, "usage: byoc-plugins TYPE (agentd runs this for a job of type TYPE)\ntypes: %s\n", strings.Join(names(), ", "))
		return 2
	}
	// Under bubblewrap the agent may ask its own plugin binaries to
	// run the sandbox's egress relay themselves.
	if err := sandbox.StartRelayFromEnv(); err != nil {
		fmt.Fprintf(stderr, "egress relay: %v\n", err)
		return 125
	}
	sdk.ServeArgs(types[args[0]](), args[1:])
	return 0
}

func names() []string {
	out := make([]string, 0, len(types))
	for n := range types {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
