package pluginhost_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/egress"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/action/sandbox"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// Without a sandbox that works, ProbeSandbox refuses, naming what it
// tried and the flag that runs plugins without one; only that flag gets
// IsolationNone.
func TestProbeSandboxRefusesWithoutOne(t *testing.T) {
	ctx := t.Context()
	tests := []struct {
		name string
		opt  pluginhost.SandboxOptions
		want []string
	}{
		{"no bubblewrap", pluginhost.SandboxOptions{Mode: "bubblewrap", Bwrap: "/nonexistent/bwrap"},
			[]string{"bubblewrap at /nonexistent/bwrap does not run", "--insecure-no-sandbox"}},
		{"no namespaces", pluginhost.SandboxOptions{Mode: "namespaces", InitExe: "/bin/false"},
			[]string{"Linux namespaces: exit status 1", "--insecure-no-sandbox"}},
		{"neither", pluginhost.SandboxOptions{Bwrap: "/nonexistent/bwrap", InitExe: "/bin/false"},
			[]string{"bubblewrap at /nonexistent/bwrap does not run", "Linux namespaces"}},
		{"bad mode", pluginhost.SandboxOptions{Mode: "chroot"}, []string{`sandbox mode "chroot": want auto, bubblewrap or namespaces`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := pluginhost.ProbeSandbox(ctx, tt.opt)
			if err == nil {
				t.Fatalf("ProbeSandbox = %+v, want an error", s)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	s, err := pluginhost.ProbeSandbox(ctx, pluginhost.SandboxOptions{Bwrap: "/nonexistent/bwrap", InitExe: "/bin/false", Insecure: true})
	if err != nil || s.Isolation != pluginhost.IsolationNone || !strings.Contains(s.Describe(), "NONE (--insecure-no-sandbox)") {
		t.Fatalf("insecure: %+v, %v", s, err)
	}
}

// In each sandbox a plugin and its steps find the agent's files absent,
// write only where StartOptions say, and an interrupt reaches the plugin
// itself (not the sandbox around it, which would kill it).
func TestSandboxedPlugin(t *testing.T) {
	for _, mode := range []string{"bubblewrap", "namespaces"} {
		t.Run(mode, func(t *testing.T) {
			l := newLoader(t)
			l.Sandbox = testSandbox(t, mode)
			root := t.TempDir()
			agentState := filepath.Join(root, "state")
			compState := filepath.Join(agentState, "components", "c")
			work := filepath.Join(agentState, "jobs", "j-1")
			for _, d := range []string{compState, work} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			identity := filepath.Join(agentState, "identity.json")
			kubeconfig := filepath.Join(root, "kubeconfig")
			for _, f := range []string{identity, kubeconfig} {
				if err := os.WriteFile(f, []byte("host-only"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// A pinned external plugin, executed through the checked
			// descriptor inside the sandbox, and the shell it starts.
			dir, sum := install(t, testkit(t), "testkit")
			l.Dirs, l.Pins = []string{dir}, map[string]string{"testkit": sum}
			kit, err := l.Start(t.Context(), "testkit", pluginhost.StartOptions{WorkDir: work,
				Writable: []string{compState}, ReadOnly: []string{kubeconfig, filepath.Join(root, "missing")}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(kit.Kill)
			probe := `cat "$ID" 2>&1; echo x > "$AS/perm" 2>&1 || echo nowrite; cat "$KC"; echo; echo y > "$KC" 2>&1 || echo rofile; echo ok > "$CS/kept"; ls "$PD" 2>&1; echo done`
			cfg := map[string]any{"mode": "sh", "script": `ID='` + identity + `' AS='` + agentState + `' KC='` + kubeconfig + `' CS='` + compState + `' PD='` + dir + `'; ` + probe}
			res, logs := run(t, kit, work, cfg, nil)
			out := strings.Join(stdout(logs), "\n")
			if res.Error != "" || !strings.Contains(out, "done") {
				t.Fatalf("result %+v:\n%s", res, out)
			}
			for _, w := range []string{identity + ": No such file or directory", "nowrite", "host-only", "rofile", dir + "': No such file or directory"} {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if b, err := os.ReadFile(filepath.Join(compState, "kept")); err != nil || string(b) != "ok\n" {
				t.Errorf("the component's state dir was not writable: %q, %v", b, err)
			}
			if _, err := os.Stat(filepath.Join(agentState, "perm")); err == nil {
				t.Error("the plugin wrote into the agent's state dir")
			}

			// Interrupt: the action type stops its step and returns.
			inst, err := l.Start(t.Context(), "action", pluginhost.StartOptions{WorkDir: work})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(inst.Kill)
			hold := map[string]any{"steps": []any{map[string]any{"name": "hold", "script": "echo started; exec sleep 60"}}}
			started := make(chan struct{}, 1)
			type ret struct {
				res *sdk.Result
				err error
			}
			done := make(chan ret, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			go func() {
				r, err := inst.Run(ctx, sdk.OpApply, &sdk.RunRequest{Job: sdk.JobContext{JobID: "j", WorkDir: work}, Config: hold},
					func(e sdk.LogEvent) {
						if e.Text == "started" {
							started <- struct{}{}
						}
					})
				done <- ret{r, err}
			}()
			select {
			case <-started:
			case <-ctx.Done():
				t.Fatal("the holding step did not start")
			}
			if !inst.CanInterrupt() {
				t.Fatal("the action plugin cannot be interrupted")
			}
			inst.Interrupt()
			select {
			case r := <-done:
				if r.err != nil {
					t.Fatalf("Run after Interrupt: %v (the interrupt killed the plugin instead of reaching it)", r.err)
				}
				if r.res.Error == "" {
					t.Errorf("an interrupted step succeeded: %+v", r.res)
				}
			case <-ctx.Done():
				t.Fatal("Interrupt did not stop the operation")
			}
			if !slices.Contains([]string{"bubblewrap", "namespaces"}, string(l.Sandbox.Isolation)) {
				t.Errorf("isolation %q", l.Sandbox.Isolation)
			}
		})
	}
}

// A sandboxed action plugin given a delegated cgroup runs its steps under
// their limits: a step past its memory limit is killed for it, a fork
// bomb stops at its process limit, and Kill removes the cgroup with the
// steps' cgroups below it.
func TestSandboxedStepLimits(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("cgroups are writable for root here only")
	}
	for _, mode := range []string{"bubblewrap", "namespaces"} {
		t.Run(mode, func(t *testing.T) {
			l := newLoader(t)
			l.Sandbox = testSandbox(t, mode)
			work := t.TempDir()
			label := fmt.Sprintf("lim-%s-%d", mode, os.Getpid())
			inst, err := l.Start(t.Context(), "action", pluginhost.StartOptions{WorkDir: work, DelegateCgroup: label})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(inst.Kill)
			if len(jobCgroups(t, label)) == 0 {
				t.Fatal("no cgroup was delegated to the plugin")
			}
			cfg := map[string]any{"sandbox": map[string]any{"memory_mb": 32}, "steps": []any{map[string]any{"name": "big",
				"script": `echo before; perl -e '$x = "a" x (256 << 20); print length($x), "\n"'; echo after`}}}
			res, logs := run(t, inst, work, cfg, nil)
			all := allText(logs)
			if !strings.Contains(res.Error, "killed: exceeded its memory limit of 32 MiB") || strings.Contains(all, "after") {
				t.Errorf("result %+v, log:\n%s", res, all)
			}
			if strings.Contains(all, "no CPU, memory or process limits") {
				t.Errorf("the step ran without limits:\n%s", all)
			}
			cfg = map[string]any{"sandbox": map[string]any{"pids": 10}, "steps": []any{map[string]any{"name": "bomb",
				"script": `for i in $(seq 30); do sleep 5 & done; wait`}}}
			res, logs = run(t, inst, work, cfg, nil)
			if all := allText(logs); res.Error == "" || !strings.Contains(strings.ToLower(all), "fork") {
				t.Errorf("30 processes ran under a limit of 10: %+v\n%s", res, all)
			}
			inst.Kill()
			if left := jobCgroups(t, label); len(left) > 0 {
				t.Errorf("Kill left the plugin's cgroups %v", left)
			}
		})
	}
}

func allText(logs []sdk.LogEvent) string {
	var b strings.Builder
	for _, l := range logs {
		b.WriteString(l.Text + "\n")
	}
	return b.String()
}

// jobCgroups lists the cgroups delegated with label below this process's
// cgroups, v1 or v2.
func jobCgroups(t *testing.T, label string) []string {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		dirs := []string{filepath.Join("/sys/fs/cgroup", parts[2])}
		for _, c := range strings.Split(parts[1], ",") {
			if c != "" {
				dirs = []string{filepath.Join("/sys/fs/cgroup", c, parts[2])}
			}
		}
		for _, d := range dirs {
			m, _ := filepath.Glob(filepath.Join(d, "byoc-job-*-"+label+"-*"))
			found = append(found, m...)
		}
	}
	return found
}

// hostAddr is a non-loopback address of this machine, or "" when it has
// none.
func hostAddr(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

// countingServer serves HTTP on addr and counts the requests it got.
func countingServer(t *testing.T, addr, body string) (string, *atomic.Int64) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.WriteString(w, body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), &n
}

// In each sandbox, vendor code (a pinned third-party plugin's shell, and
// an action step with network) reaches a service on the host's loopback
// (standing for the instance metadata service and the agent's local
// services) neither directly nor through the proxy, by HTTP or SOCKS5,
// while a destination the policy allows works through the proxy only.
// Each refusal reaches OnEgressDenied with the destination and the rule.
func TestSandboxEgress(t *testing.T) {
	for _, mode := range []string{"bubblewrap", "namespaces"} {
		t.Run(mode, func(t *testing.T) {
			secretAddr, secretHits := countingServer(t, "127.0.0.1:0", "instance-role-credentials")
			allowedHost := hostAddr(t)
			l := newLoader(t)
			l.Sandbox = testSandbox(t, mode)
			// An endpoint the agent was configured with, on the host's
			// loopback (a development registry, a kind cluster's API
			// server): an exception, forwarded into the sandbox.
			configuredAddr, configuredHits := countingServer(t, "127.0.0.1:0", "configured-endpoint")
			l.Egress = &pluginhost.Egress{Policy: egress.Policy{Exceptions: []netip.AddrPort{netip.MustParseAddrPort(configuredAddr)}}}
			// The built-in action type runs its relay itself (under
			// bubblewrap); the pinned third-party testkit gets the
			// agent's binary as its relay.
			l.OwnRelay = true
			if allowedHost == "" {
				// No other address here: the proxy's dialer stands in
				// for the world, sending 192.0.2.1 to a loopback server.
				allowedHost = "192.0.2.1"
				worldAddr, _ := countingServer(t, "127.0.0.1:0", "hello-world")
				l.Egress.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
					if strings.HasPrefix(addr, "192.0.2.1:") {
						addr = worldAddr
					}
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}
			}
			worldAddr, worldHits := countingServer(t, allowedHost+":0", "hello-world")
			if l.Egress.Dial != nil {
				_, port, _ := net.SplitHostPort(worldAddr)
				worldAddr = "192.0.2.1:" + port
			}
			var mu sync.Mutex
			var denied []egress.Denial
			dir, sum := install(t, testkit(t), "testkit")
			l.Dirs, l.Pins = []string{dir}, map[string]string{"testkit": sum}
			work := t.TempDir()
			kit, err := l.Start(t.Context(), "testkit", pluginhost.StartOptions{WorkDir: work, OnEgressDenied: func(d egress.Denial) {
				mu.Lock()
				denied = append(denied, d)
				mu.Unlock()
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(kit.Kill)
			px := l.EgressEnv()["HTTP_PROXY"]
			script := fmt.Sprintf(`S=%s W=%s P=%s C=%s
c() { curl -sS -m 10 "$@" 2>&1; echo " [exit $?]"; }
echo "env: $HTTPS_PROXY $ALL_PROXY"
echo "direct-secret: $(c --noproxy '*' http://$S/)"
echo "proxy-secret: $(env -u NO_PROXY -u no_proxy curl -sS -m 10 -x $P http://$S/ 2>&1; echo " [exit $?]")"
echo "connect-secret: $(env -u NO_PROXY -u no_proxy curl -sS -m 10 -p -x $P http://$S/ 2>&1; echo " [exit $?]")"
echo "socks-secret: $(c --socks5-hostname ${P#http://} http://$S/)"
echo "metadata: $(c http://169.254.169.254/latest/meta-data/iam/security-credentials/)"
echo "metadata6: $(c 'http://[fd00:ec2::254]/latest/api/token')"
echo "direct-world: $(c --noproxy '*' http://$W/)"
echo "proxy-world: $(c http://$W/)"
echo "socks-world: $(c --socks5-hostname ${P#http://} http://$W/)"
echo "configured: $(c http://$C/)"
echo done`, secretAddr, worldAddr, px, configuredAddr)
			res, logs := run(t, kit, work, map[string]any{"mode": "sh", "script": script}, nil)
			out := strings.Join(stdout(logs), "\n")
			if res.Error != "" || !strings.Contains(out, "done") {
				t.Fatalf("result %+v:\n%s", res, out)
			}
			line := func(k string) string {
				for _, l := range strings.Split(out, "\n") {
					if v, ok := strings.CutPrefix(l, k+": "); ok {
						return v
					}
				}
				return ""
			}
			for _, k := range []string{"direct-secret", "proxy-secret", "connect-secret", "socks-secret", "metadata", "metadata6", "direct-world"} {
				if v := line(k); strings.Contains(v, "instance-role-credentials") || strings.Contains(v, "hello-world") || strings.HasSuffix(v, "[exit 0]") && !strings.Contains(v, "refused by the sandbox's egress policy") {
					t.Errorf("%s reached: %q", k, v)
				}
			}
			for _, k := range []string{"proxy-secret", "metadata", "metadata6"} {
				if v := line(k); !strings.Contains(v, "refused by the sandbox's egress policy") {
					t.Errorf("%s: %q, want the proxy's refusal", k, v)
				}
			}
			for _, k := range []string{"proxy-world", "socks-world"} {
				if v := line(k); v != "hello-world [exit 0]" {
					t.Errorf("%s: %q, want hello-world", k, v)
				}
			}
			if v := line("configured"); v != "configured-endpoint [exit 0]" || configuredHits.Load() != 1 {
				t.Errorf("configured endpoint: %q (%d requests), want it reached directly", v, configuredHits.Load())
			}
			if !strings.Contains(line("env"), "127.0.0.1:") {
				t.Errorf("no proxy in the plugin's environment: %q", line("env"))
			}
			if n := secretHits.Load(); n != 0 {
				t.Errorf("the host's loopback service was reached %d times", n)
			}
			if n := worldHits.Load(); n < 2 {
				t.Errorf("the allowed destination was reached %d times, want 2", n)
			}

			// An action step with network shares the plugin's namespace
			// and, with the job's environment, its proxy.
			inst, err := l.Start(t.Context(), "action", pluginhost.StartOptions{WorkDir: work})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(inst.Kill)
			step := fmt.Sprintf(`curl -sS -m 10 http://%s/ ; echo; curl -sS -m 10 http://%s/ || echo loopback-unreachable; env -u NO_PROXY -u no_proxy curl -sS -m 10 -x "$HTTP_PROXY" http://%[2]s/; echo; curl -sS -m 10 http://%s/; echo; echo "relay-env=$%s"`, worldAddr, secretAddr, configuredAddr, sandbox.RelayEnv)
			res, logs = run(t, inst, work, map[string]any{"sandbox": map[string]any{"network": true}, "steps": []any{map[string]any{"name": "net", "script": step}}}, l.EgressEnv())
			all := allText(logs)
			if res.Error != "" || !strings.Contains(all, "hello-world") || !strings.Contains(all, "loopback-unreachable") || !strings.Contains(all, "configured-endpoint") || !strings.Contains(all, "relay-env=\n") || !strings.Contains(all, "refused by the sandbox's egress policy") || strings.Contains(all, "instance-role-credentials") {
				t.Errorf("action step: %+v\n%s", res, all)
			}

			kit.Kill()
			mu.Lock()
			defer mu.Unlock()
			var got []string
			for _, d := range denied {
				got = append(got, d.String())
			}
			for _, w := range []string{secretAddr + ": always denied: loopback (127.0.0.0/8)", "169.254.169.254:80: always denied: instance metadata service (169.254.169.254)",
				"[fd00:ec2::254]:80: always denied: instance metadata service (fd00:ec2::254)"} {
				if !slices.Contains(got, w) {
					t.Errorf("denials lack %q: %q", w, got)
				}
			}
			if s := kit.EgressRefused(); !strings.Contains(s, "connections refused") {
				t.Errorf("EgressRefused = %q", s)
			}

			// --sandbox-network none: no proxy, no way out.
			l.Egress = &pluginhost.Egress{Network: pluginhost.NetworkNone}
			none, err := l.Start(t.Context(), "testkit", pluginhost.StartOptions{WorkDir: work})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(none.Kill)
			res, logs = run(t, none, work, map[string]any{"mode": "sh", "script": fmt.Sprintf(`echo "proxy=$HTTP_PROXY"; curl -sS -m 10 http://%s/ 2>&1; curl -sS -m 10 -x %s http://%[1]s/ 2>&1; echo done`, worldAddr, px)}, nil)
			if out := strings.Join(stdout(logs), "\n"); !strings.Contains(out, "proxy=\n") || strings.Contains(out, "hello-world") || !strings.Contains(out, "done") {
				t.Errorf("network none: %+v\n%s", res, out)
			}
		})
	}
}

// The egress proxy follows the agent's lease on the job: once the lease
// has run out (an agent frozen past it runs again and its watchdog has
// not yet stopped the plugin), a step's request is refused by the
// proxy, not delivered, while the plugin's own stop (sdk.HostLeaseSlack
// later) has not come yet. Here through a configured endpoint on the
// host's loopback, as the fault harness's recorder is reached.
func TestSandboxEgressEndsWithTheLease(t *testing.T) {
	l := newLoader(t)
	l.Sandbox = testSandbox(t, "bubblewrap")
	addr, hits := countingServer(t, "127.0.0.1:0", "recorded")
	l.Egress = &pluginhost.Egress{Policy: egress.Policy{Exceptions: []netip.AddrPort{netip.MustParseAddrPort(addr)}}}
	work := t.TempDir()
	if err := os.Chmod(work, 0o777); err != nil {
		t.Fatal(err)
	}
	var left atomic.Int64
	left.Store(int64(time.Minute))
	inst, err := l.Start(t.Context(), "action", pluginhost.StartOptions{WorkDir: work, Lease: func() time.Duration { return time.Duration(left.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inst.Kill)
	gate := filepath.Join(work, "go")
	step := fmt.Sprintf(`curl -sS -m 5 http://%[1]s/; echo " [first exit $?]"
while [ ! -e %[2]s ]; do sleep 0.05; done
r=0; curl -sS -m 5 http://%[1]s/ || r=$?; echo " [second exit $r]"
r=0; env -u NO_PROXY -u no_proxy curl -sS -m 5 -x "$HTTP_PROXY" http://192.0.2.1/ || r=$?; echo " [proxied exit $r]"`, addr, gate)
	type ran struct {
		res  *sdk.Result
		logs []sdk.LogEvent
		err  error
	}
	done := make(chan ran, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var logs []sdk.LogEvent
		var mu sync.Mutex
		res, err := inst.Run(ctx, sdk.OpApply, &sdk.RunRequest{Job: sdk.JobContext{JobID: "j", WorkDir: work},
			Config: map[string]any{"sandbox": map[string]any{"network": true}, "steps": []any{map[string]any{"name": "beats", "script": step}}}, Env: l.EgressEnv()},
			func(e sdk.LogEvent) { mu.Lock(); logs = append(logs, e); mu.Unlock() })
		mu.Lock()
		defer mu.Unlock()
		done <- ran{res, logs, err}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for hits.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the step's first request never arrived")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// No renewal comes: the lease runs out 300 ms from now (the agent's
	// keeper reads that within 100 ms). The step's next request, just
	// after, is refused once the agent, asked again for half a second,
	// still says so; the plugin itself stops the step a second after the
	// lease's end.
	end := time.Now().Add(300 * time.Millisecond)
	left.Store(int64(time.Until(end)))
	go func() {
		for time.Now().Before(end.Add(time.Second)) {
			left.Store(int64(time.Until(end)))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(time.Until(end) + 50*time.Millisecond)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-done
	out := allText(r.logs)
	if n := hits.Load(); n != 1 {
		t.Errorf("the endpoint got %d requests, want 1: the one sent after the lease ran out went through\n%s", n, out)
	}
	// The forwarded endpoint's relay is a raw tunnel: its client sees
	// the connection reset; a client of the proxy itself reads why (if
	// the step got that far before the plugin stopped it).
	if strings.Contains(out, "[second exit 0]") || strings.Contains(out, "[proxied exit") && !strings.Contains(out, "lease on the job ran out") {
		t.Errorf("the step's requests after the lease ran out were not refused by the proxy, naming the lease: %+v %v\n%s", r.res, r.err, out)
	}
}
