// Package archcheck checks the rules ARCHITECTURE.md states about the code's
// shape, so that the code map cannot drift from the code unnoticed: which
// packages may import which (TestImportRules), that the store reads no
// clock (TestStoreReadsNoClock), the committed list of what
// each binary links (TestBinaryDeps, imsd/deps.txt, agentd/deps.txt,
// tui/deps.txt; `make update-deps` rewrites them), and that every package
// has a doc comment (TestPackageDocs). It has no code of its own; `make
// check-deps` runs it.
package archcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the binaries' deps.txt files")

const module = "github.com/byoc-dev/byoc"

// pkg is the part of `go list -json` these checks read.
type pkg struct {
	ImportPath   string
	Name         string
	Dir          string
	Standard     bool
	Imports      []string
	Deps         []string
	GoFiles      []string
	TestGoFiles  []string
	XTestGoFiles []string
	Module       *struct{ Path, Version string }
	Error        *struct{ Err string }
}

// The target the lists are computed for, fixed so that the committed
// lists do not depend on the machine that runs the test.
var listEnv = []string{"GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0"}

// goCmd is the go command. go test puts its own GOROOT/bin first in the
// test's PATH, so this is the toolchain running the test.
const goCmd = "go"

func root(tb testing.TB) string {
	tb.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		tb.Fatalf("module root not found at %s: %v", dir, err)
	}
	return dir
}

// goList runs `go list -e -json args...` at the module root.
func goList(tb testing.TB, args ...string) []pkg {
	tb.Helper()
	cmd := exec.Command(goCmd, append([]string{"list", "-e", "-json"}, args...)...)
	cmd.Dir = root(tb)
	cmd.Env = append(os.Environ(), listEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			tb.Fatalf("go list %s: decode: %v", strings.Join(args, " "), err)
		}
		if p.Error != nil {
			tb.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

var (
	allOnce sync.Once
	allPkgs []pkg
)

// modulePackages lists every package of this module, each with its
// transitive dependencies (Deps; non-test code only).
func modulePackages(tb testing.TB) []pkg {
	tb.Helper()
	allOnce.Do(func() { allPkgs = goList(tb, "./...") })
	if len(allPkgs) == 0 {
		tb.Fatal("go list ./... listed no packages")
	}
	return allPkgs
}

// under reports whether path is dir (relative to the module) or inside it.
func under(path, dir string) bool {
	full := module + "/" + dir
	return path == full || strings.HasPrefix(path, full+"/")
}

// isStd reports whether an import path is the standard library's (no dot
// in its first element).
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// dbDriver reports whether path is a database driver.
func dbDriver(path string) bool {
	for _, d := range []string{"github.com/jackc/pgx", "modernc.org/sqlite", "github.com/lib/pq", "github.com/mattn/go-sqlite3"} {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// A rule forbids the packages under From (relative dirs) to depend on
// what Forbidden matches. Direct rules look at a package's own imports;
// the others at everything it links.
type rule struct {
	name      string
	from      func(path string) bool
	direct    bool
	forbidden func(dep string) bool
}

func in(dirs ...string) func(string) bool {
	return func(p string) bool {
		for _, d := range dirs {
			if under(p, d) {
				return true
			}
		}
		return false
	}
}

func not(f func(string) bool) func(string) bool { return func(p string) bool { return !f(p) } }

func prefixes(ps ...string) func(string) bool {
	return func(dep string) bool {
		for _, p := range ps {
			if dep == p || strings.HasPrefix(dep, p+"/") {
				return true
			}
		}
		return false
	}
}

// heavy reports whether dep is a package agentd must not link: OPA, Helm,
// Kubernetes' own modules, or a component type that links them (those
// live in the byoc-plugins companion, plugins/bundle/byoc-plugins).
//
// k8s.io/klog/v2 is spared: it is a logging library (Kubernetes' fork of
// glog, standard library and go-logr only), not a Kubernetes client or
// API type. sigstore-go's verifier links it through
// certificate-transparency-go's jsonclient (SCT checks), so agentd's
// signature and attestation verification (internal/attest) needs it.
func heavy(dep string) bool {
	if dep == "k8s.io/klog/v2" || strings.HasPrefix(dep, "k8s.io/klog/v2/internal/") {
		return false
	}
	return prefixes("github.com/open-policy-agent", "helm.sh", "k8s.io", "sigs.k8s.io",
		module+"/plugins/policy", module+"/plugins/image", module+"/plugins/helm", module+"/plugins/bundle/byoc-plugins")(dep) ||
		dep == module+"/plugins/terraform"
}

// The rules ARCHITECTURE.md states, each where it states it.
var rules = []rule{
	{name: "the tui links no imsd or agentd package (it talks to imsd over the operator API)",
		from: in("tui"), forbidden: in("imsd", "agentd")},
	{name: "agentd links no imsd package (the shared protocol pieces are rpc/agentproto)",
		from: in("agentd"), forbidden: in("imsd")},
	// Helm's template engine (toToml) links BurntSushi/toml; the helm
	// type runs in byoc-plugins, so agentd links no TOML parser at all.
	{name: "agentd links no TOML parser (the app config format stays on imsd's and the CLI's side)",
		from: in("agentd"), forbidden: prefixes("github.com/pelletier/go-toml", "github.com/BurntSushi/toml", module+"/schema/app/config")},
	{name: "the plugin SDK links nothing of imsd, agentd or the tui",
		from: in("plugins/sdk"), forbidden: in("imsd", "agentd", "tui")},
	{name: "the plugin SDK links no general JSON Schema library (configschema is its own)",
		from: in("plugins/sdk"), forbidden: func(dep string) bool {
			return !strings.HasPrefix(dep, module+"/") && strings.Contains(dep, "jsonschema")
		}},
	{name: "configschema imports only the standard library",
		from: in("plugins/sdk/configschema"), forbidden: not(isStd)},
	{name: "rpc/agentproto imports only the standard library",
		from: in("rpc/agentproto"), forbidden: not(isStd)},
	{name: "configschema and typeschema link no gRPC or go-plugin (imsd and the CLI use them freely)",
		from: in("plugins/sdk/configschema", "plugins/typeschema"), forbidden: prefixes("google.golang.org/grpc", "github.com/hashicorp/go-plugin")},
	{name: "the app config format links nothing of imsd, agentd or the CLI",
		from: in("schema/app"), forbidden: in("imsd", "agentd", "tui")},
	{name: "only imsd/store (and its test helpers under it) imports database drivers",
		from: not(in("imsd/store")), direct: true, forbidden: dbDriver},
	{name: "only imsd/store and schema's migrations use database/sql, sqlx or goose (the store is the only package that touches SQL)",
		from: not(in("imsd/store", "schema/migrations")), direct: true, forbidden: prefixes("database/sql", "github.com/jmoiron/sqlx", "github.com/pressly/goose")},
	{name: "imsd and the tui link no gRPC or go-plugin (imsd's APIs are Connect; only the plugin API is plain gRPC)",
		from: in("imsd", "tui"), forbidden: prefixes("google.golang.org/grpc", "github.com/hashicorp/go-plugin")},
	{name: "only plugins link OPA (they evaluate policies; imsd carries the vendor's and agentd reads the customer's as text)",
		from:      in("imsd", "tui", "schema", "plugins/sdk", "plugins/typeschema", "agentd"),
		forbidden: prefixes("github.com/open-policy-agent/opa")},
	{name: "agentd links no OPA, Helm or Kubernetes client, nor any type that does (heavy built-in types are served by byoc-plugins beside it: every package linked into agentd runs its init in the agent's long-lived process)",
		from: func(p string) bool {
			// plugins/bundle is the list of names agentd links; its
			// byoc-plugins, below it, is the companion itself.
			return in("agentd")(p) || p == module+"/plugins/bundle"
		},
		forbidden: heavy},
	{name: "imsd and the tui link no AWS SDK (only agentd, in the customer's account, talks to AWS: imsd never holds cloud credentials)",
		from: in("imsd", "tui"), forbidden: prefixes("github.com/aws")},
	{name: "imsd and the tui link no Azure SDK (only agentd, in the customer's subscription, talks to Azure)",
		from: in("imsd", "tui"), forbidden: prefixes("github.com/Azure/azure-sdk-for-go", "github.com/AzureAD")},
	{name: "agentd links only azidentity and Key Vault's azsecrets of the Azure SDK (agentd/stack; every other call is made by a job with its mode's identity)",
		from: in("agentd"), forbidden: func(dep string) bool {
			return strings.HasPrefix(dep, "github.com/Azure/azure-sdk-for-go/sdk/") &&
				!prefixes("github.com/Azure/azure-sdk-for-go/sdk/azcore", "github.com/Azure/azure-sdk-for-go/sdk/azidentity",
					"github.com/Azure/azure-sdk-for-go/sdk/internal", "github.com/Azure/azure-sdk-for-go/sdk/security/keyvault/azsecrets",
					"github.com/Azure/azure-sdk-for-go/sdk/security/keyvault/internal")(dep)
		}},
	{name: "agentd links only the sts and secretsmanager AWS service clients (agentd/stack) and kms (agentd/kmskey, the build agent's signing key); every other call is made by a job with its mode's role",
		from: in("agentd"), forbidden: func(dep string) bool {
			return strings.HasPrefix(dep, "github.com/aws/aws-sdk-go-v2/service/") &&
				!prefixes("github.com/aws/aws-sdk-go-v2/service/sts", "github.com/aws/aws-sdk-go-v2/service/secretsmanager",
					"github.com/aws/aws-sdk-go-v2/service/kms", "github.com/aws/aws-sdk-go-v2/service/internal")(dep)
		}},
	{name: "no binary links test helpers or the end-to-end harness",
		// The cloud fakes, test helpers themselves, may use ocitest.
		from: func(p string) bool {
			return in("imsd", "agentd", "tui")(p) && !in("agentd/stack/awsfake", "agentd/stack/azurefake", "agentd/stack/gcpfake")(p)
		},
		forbidden: func(dep string) bool {
			return in("e2e", "bench", "imsd/store/pgtest", "imsd/store/storetest", "plugins/sdk/sdktest", "agentd/stack/awsfake", "agentd/stack/azurefake", "agentd/stack/gcpfake", "internal/ocicopy/ocitest", "internal/cosignlayout/cosigntest", "internal/proctest")(dep)
		}},
}

func TestImportRules(t *testing.T) {
	for _, r := range rules {
		matched := false
		for _, p := range modulePackages(t) {
			if !r.from(p.ImportPath) {
				continue
			}
			matched = true
			deps := p.Deps
			if r.direct {
				deps = p.Imports
			}
			for _, d := range deps {
				if r.forbidden(d) && d != p.ImportPath {
					t.Errorf("%s: %s %s %s", r.name, p.ImportPath, map[bool]string{true: "imports", false: "links"}[r.direct], d)
				}
			}
		}
		// A rule about packages that moved away would pass forever.
		if !matched {
			t.Errorf("rule %q applies to no package: a package it names moved; update the rule and ARCHITECTURE.md", r.name)
		}
	}
}

// TestImportRulesCatch checks that the rules above can fail: each names a
// dependency it must refuse.
func TestImportRulesCatch(t *testing.T) {
	for _, tc := range []struct{ rule, from, dep string }{
		{"the tui links", module + "/tui/console", module + "/imsd/store"},
		{"agentd links no imsd", module + "/agentd/agent", module + "/imsd/auth"},
		{"agentd links no TOML", module + "/agentd", "github.com/pelletier/go-toml/v2/unstable"},
		{"agentd links no TOML", module + "/agentd", "github.com/BurntSushi/toml"},
		{"the plugin SDK links nothing", module + "/plugins/sdk", module + "/agentd/pluginhost"},
		{"configschema imports only", module + "/plugins/sdk/configschema", "google.golang.org/protobuf/proto"},
		{"configschema and typeschema", module + "/plugins/typeschema", "github.com/hashicorp/go-plugin"},
		{"only imsd/store", module + "/schema", "modernc.org/sqlite"},
		{"no binary links test", module + "/imsd/server", module + "/imsd/store/pgtest"},
		{"only imsd/store and schema", module + "/imsd/operatorapi", "database/sql"},
		{"imsd and the tui link no gRPC", module + "/tui/cli", "google.golang.org/grpc"},
		{"only plugins link OPA", module + "/agentd/agent", "github.com/open-policy-agent/opa/v1/rego"},
		{"only plugins link OPA", module + "/imsd/workflow", "github.com/open-policy-agent/opa/v1/ast"},
		{"only plugins link OPA", module + "/agentd", "github.com/open-policy-agent/opa/v1/rego"},
		{"agentd links no OPA, Helm", module + "/agentd", "helm.sh/helm/v3/pkg/action"},
		{"agentd links no OPA, Helm", module + "/agentd", "k8s.io/client-go/kubernetes"},
		{"agentd links no OPA, Helm", module + "/agentd", "k8s.io/apimachinery/pkg/runtime"},
		{"agentd links no OPA, Helm", module + "/agentd", "k8s.io/klog"},
		{"agentd links no OPA, Helm", module + "/agentd", "k8s.io/klog/v3"},
		{"agentd links no OPA, Helm", module + "/agentd/pluginhost", "sigs.k8s.io/yaml"},
		{"agentd links no OPA, Helm", module + "/agentd", module + "/plugins/terraform"},
		{"agentd links no OPA, Helm", module + "/agentd", module + "/plugins/helm"},
		{"agentd links no OPA, Helm", module + "/plugins/bundle", module + "/plugins/policy"},
		{"imsd and the tui link no AWS", module + "/imsd/server", "github.com/aws/aws-sdk-go-v2/service/sts"},
		{"agentd links only the sts", module + "/agentd/stack", "github.com/aws/aws-sdk-go-v2/service/s3"},
		{"no binary links test", module + "/agentd", module + "/agentd/stack/awsfake"},
		{"no binary links test", module + "/agentd", module + "/agentd/stack/azurefake"},
		{"imsd and the tui link no Azure", module + "/tui/cli", "github.com/Azure/azure-sdk-for-go/sdk/azidentity"},
		{"agentd links only azidentity", module + "/agentd/stack", "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"},
	} {
		caught := false
		for _, r := range rules {
			if strings.HasPrefix(r.name, tc.rule) && r.from(tc.from) && r.forbidden(tc.dep) {
				caught = true
			}
		}
		if !caught {
			t.Errorf("no rule %q refuses %s -> %s", tc.rule, tc.from, tc.dep)
		}
	}
	for _, r := range rules {
		if strings.HasPrefix(r.name, "only imsd/store") && (!r.from(module+"/imsd/server") || r.from(module+"/imsd/store/pgtest")) {
			t.Error("the driver rule must cover imsd/server and spare imsd/store/pgtest")
		}
		// agentd's module push links the terraform type's packing only.
		if strings.HasPrefix(r.name, "agentd links no OPA, Helm") && r.forbidden(module+"/plugins/terraform/tfmodule") {
			t.Error("the heavy rule must spare plugins/terraform/tfmodule (agentd module push)")
		}
		// sigstore-go's verifier (internal/attest) links klog, a
		// logging library; nothing else under k8s.io is spared.
		if strings.HasPrefix(r.name, "agentd links no OPA, Helm") && r.forbidden("k8s.io/klog/v2") {
			t.Error("the heavy rule must spare k8s.io/klog/v2 (a logging library sigstore-go links)")
		}
	}
}

// TestStoreReadsNoClock checks ARCHITECTURE.md's "the store never reads the
// clock (times are arguments)": no call of time.Now, time.Since or
// time.Until in imsd/store's code (its tests may).
func TestStoreReadsNoClock(t *testing.T) {
	dir := filepath.Join(root(t), "imsd", "store")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		timePkg := ""
		for _, imp := range af.Imports {
			if imp.Path.Value == `"time"` {
				timePkg = "time"
				if imp.Name != nil {
					timePkg = imp.Name.Name
				}
			}
		}
		if timePkg == "" {
			continue
		}
		ast.Inspect(af, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == timePkg && slices.Contains([]string{"Now", "Since", "Until"}, sel.Sel.Name) {
				t.Errorf("%s: imsd/store reads the clock (time.%s); take the time as an argument", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}

// The binaries whose dependencies are committed, by main package dir.
var binaries = []string{"imsd", "agentd", "tui"}

// depsList renders what the main package in dir links, depaware-style:
// this module's packages, then other modules' (under their module and
// version), then the standard library.
func depsList(tb testing.TB, dir string) []byte {
	tb.Helper()
	pkgs := goList(tb, "-deps", "./"+dir)
	var own, std []string
	third := map[string][]string{}
	for _, p := range pkgs {
		switch {
		case p.Standard:
			if !strings.HasPrefix(p.ImportPath, "vendor/") && !strings.HasPrefix(p.ImportPath, "internal/") && !strings.Contains(p.ImportPath, "/internal/") {
				std = append(std, p.ImportPath)
			}
		case p.Module != nil && p.Module.Path == module:
			own = append(own, p.ImportPath)
		case p.Module != nil:
			m := p.Module.Path + " " + p.Module.Version
			third[m] = append(third[m], p.ImportPath)
		default:
			tb.Errorf("%s: %s has no module", dir, p.ImportPath)
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# What ./%s links (go list -deps, %s), committed so that a new\n", dir, strings.Join(listEnv[:3], " "))
	fmt.Fprintf(&b, "# dependency shows up in review. Rewrite with `make update-deps`.\n")
	fmt.Fprintf(&b, "# Standard library packages whose path has an internal/ part are left out.\n")
	slices.Sort(own)
	fmt.Fprintf(&b, "\n## %s (%d)\n", module, len(own))
	for _, p := range own {
		fmt.Fprintln(&b, p)
	}
	mods := make([]string, 0, len(third))
	n := 0
	for m, ps := range third {
		mods = append(mods, m)
		n += len(ps)
	}
	slices.Sort(mods)
	fmt.Fprintf(&b, "\n## other modules (%d modules, %d packages)\n", len(mods), n)
	for _, m := range mods {
		fmt.Fprintf(&b, "%s\n", m)
		ps := third[m]
		slices.Sort(ps)
		for _, p := range ps {
			fmt.Fprintf(&b, "\t%s\n", p)
		}
	}
	slices.Sort(std)
	fmt.Fprintf(&b, "\n## standard library (%d)\n", len(std))
	for _, p := range std {
		fmt.Fprintln(&b, p)
	}
	return b.Bytes()
}

func TestBinaryDeps(t *testing.T) {
	for _, dir := range binaries {
		t.Run(dir, func(t *testing.T) {
			got := depsList(t, dir)
			file := filepath.Join(root(t), dir, "deps.txt")
			if *update {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run `make update-deps`)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s/deps.txt is out of date: what %s links changed; run `make update-deps`, and review the change:\n%s",
					dir, dir, lineDiff(string(want), string(got)))
			}
		})
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			fmt.Fprintf(&b, "-%s\n", l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			fmt.Fprintf(&b, "+%s\n", l)
		}
	}
	return b.String()
}

// TestPackageDocs checks that every package has a doc comment in one of its
// files (test files count, for test-only packages), starting "Package NAME"
// (or "Command NAME" for a main package). Generated packages are exempt.
func TestPackageDocs(t *testing.T) {
	for _, p := range modulePackages(t) {
		if under(p.ImportPath, "rpc/gen") {
			continue
		}
		var docs []string
		for _, f := range slices.Concat(p.GoFiles, p.TestGoFiles) {
			af, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if af.Doc != nil {
				docs = append(docs, f+": "+af.Doc.Text())
			}
		}
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		if len(docs) == 0 {
			t.Errorf("%s: no package doc comment (add a doc.go starting \"// Package %s ...\")", rel, p.Name)
			continue
		}
		if len(docs) > 1 {
			t.Errorf("%s: package doc comments in %d files, keep one:\n%s", rel, len(docs), strings.Join(docs, "\n"))
		}
		_, text, _ := strings.Cut(docs[0], ": ")
		want := "Package " + p.Name + " "
		if p.Name == "main" {
			want = "Command " + filepath.Base(p.Dir) + " "
			if rel == "tui" {
				want = "Command byoc "
			}
		}
		if !strings.HasPrefix(text, want) {
			t.Errorf("%s: package doc starts %q; want %q", rel, firstLine(text), want+"...")
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
