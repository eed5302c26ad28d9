package main

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/agentd/ledger"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// The egress flags become the plugins' Egress; a bad value is an error
// naming its flag; the endpoints the agent is configured with become
// exceptions, those on the loopback forwarded into the sandbox.
func TestEgressFlags(t *testing.T) {
	parse := func(args ...string) *egressFlags {
		var e egressFlags
		fs := flag.NewFlagSet("agentd", flag.ContinueOnError)
		e.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return &e
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--sandbox-network", "bridge"}, `--sandbox-network "bridge": want proxy, none or host`},
		{[]string{"--sandbox-egress-deny", "10.0.0.0/33"}, `--sandbox-egress-deny "10.0.0.0/33"`},
		{[]string{"--sandbox-egress-allow", "example.com"}, `--sandbox-egress-allow "example.com": not a CIDR or an address`},
		{[]string{"--sandbox-egress-port", "0"}, `--sandbox-egress-port "0": not a port`},
		{[]string{"--insecure-sandbox-egress-allow", "127.0.0.1"}, `--insecure-sandbox-egress-allow "127.0.0.1": want an address and port`},
	} {
		if _, err := parse(tt.args...).build(t.Context(), nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want %q", tt.args, err, tt.want)
		}
	}

	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nclusters:\n- name: dev\n  cluster:\n    server: https://127.0.0.1:6443\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eg, err := parse("--sandbox-egress-deny", "10.9.0.0/16", "--sandbox-egress-allow", "10.0.0.0/8", "--sandbox-egress-port", "443",
		"--insecure-sandbox-egress-allow", "127.0.0.1:5000", "--insecure-sandbox-egress-allow", "127.0.0.1:5000").
		build(t.Context(), append([]string{"http://127.0.0.1:8080", "oci:/var/lib/byoc/registry", "registry.internal.invalid:5000/x"}, kubeconfigServers(kc)...))
	if err != nil {
		t.Fatal(err)
	}
	if eg.Network != pluginhost.NetworkProxy {
		t.Errorf("network %q, want proxy by default", eg.Network)
	}
	var got []string
	for _, e := range eg.Policy.Exceptions {
		got = append(got, e.String())
	}
	if want := []string{"127.0.0.1:5000", "127.0.0.1:8080", "127.0.0.1:6443"}; !slices.Equal(got, want) {
		t.Errorf("exceptions %v, want %v", got, want)
	}
	if ok, rule := eg.Policy.Check(netip.MustParseAddrPort("10.9.1.1:443")); ok || !strings.Contains(rule, "--sandbox-egress-deny") {
		t.Errorf("denied CIDR: %v %q", ok, rule)
	}
	if ok, _ := eg.Policy.Check(netip.MustParseAddrPort("127.0.0.1:6443")); !ok {
		t.Error("the kubeconfig's API server is refused")
	}
	l := &pluginhost.Loader{Sandbox: &pluginhost.Sandbox{Isolation: pluginhost.IsolationBubblewrap}, Egress: eg}
	if d := l.DescribeNetwork(); !strings.Contains(d, "exceptions 127.0.0.1:5000, 127.0.0.1:8080, 127.0.0.1:6443") || !strings.Contains(d, "ports [443]") {
		t.Errorf("DescribeNetwork = %q", d)
	}
	if env := l.EgressEnv(); env["HTTPS_PROXY"] != "http://127.0.0.1:3128" || env["all_proxy"] != "socks5h://127.0.0.1:3128" {
		t.Errorf("EgressEnv = %v", env)
	}
	host, err := parse("--sandbox-network", "host").build(t.Context(), nil)
	if err != nil || !strings.Contains(egressWarning(host.Network), "WARNING: --sandbox-network=host") {
		t.Errorf("host: %v %q", err, egressWarning(host.Network))
	}
}

// The egress ledger's settings come from the stack config unless a flag
// was given on the command line.
func TestLedgerSettingsFromStackConfig(t *testing.T) {
	stackLedger := &stackconfig.EgressLedger{Content: "logs", MaxBytes: 8 << 20}
	for _, c := range []struct {
		args        []string
		e           *stackconfig.EgressLedger
		wantContent string
		wantMax     int64
	}{
		{nil, nil, "", ledger.DefaultMaxBytes},
		{nil, stackLedger, "logs", 8 << 20},
		{[]string{"--egress-ledger-content", "outputs"}, stackLedger, "outputs", 8 << 20},
		{[]string{"--egress-ledger-content", "", "--egress-ledger-max-bytes", "2097152"}, stackLedger, "", 2 << 20},
		{nil, &stackconfig.EgressLedger{Content: "outputs"}, "outputs", ledger.DefaultMaxBytes},
	} {
		fs := flag.NewFlagSet("agentd", flag.ContinueOnError)
		content := fs.String("egress-ledger-content", "", "")
		maxBytes := fs.Int64("egress-ledger-max-bytes", ledger.DefaultMaxBytes, "")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if gc, gm := ledgerSettings(fs, c.e, *content, *maxBytes); gc != c.wantContent || gm != c.wantMax {
			t.Errorf("%v with %+v: %q %d, want %q %d", c.args, c.e, gc, gm, c.wantContent, c.wantMax)
		}
	}
}

// agentd warns of --insecure-sandbox-egress-allow listing each address
// once, however often it was given (the proxy holds it once too): a run
// of agentd itself, which prints the warning before it finds it holds no
// identity and exits.
func TestInsecureEgressWarningListsEachOnce(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stderr := os.Stderr
	os.Stderr = f
	code := run(t.Context(), []string{"--ims", "http://127.0.0.1:1", "--state-dir", t.TempDir(), "--sandbox", "bubblewrap",
		"--insecure-sandbox-egress-allow", "127.0.0.1:5000", "--insecure-sandbox-egress-allow", "[::1]:6000",
		"--insecure-sandbox-egress-allow", "127.0.0.1:5000", "--insecure-sandbox-egress-allow", "[::ffff:127.0.0.1]:5000"})
	os.Stderr = stderr
	out, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	var warning string
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "WARNING: --insecure-sandbox-egress-allow") {
			warning = strings.TrimSpace(line)
		}
	}
	if want := "agentd: WARNING: --insecure-sandbox-egress-allow: every plugin can reach 127.0.0.1:5000, [::1]:6000"; warning != want || code == 0 {
		t.Fatalf("agentd exited %d; its warning:\n%s\nwant:\n%s\nall it printed:\n%s", code, warning, want, out)
	}
}
