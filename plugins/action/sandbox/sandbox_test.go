package sandbox

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseProcCgroup(t *testing.T) {
	got := parseProcCgroup("12:pids:/a\n4:memory:/process_api/x\n2:cpu,cpuacct:/b\n0::/unified\n")
	want := map[string]string{"pids": "/a", "memory": "/process_api/x", "cpu": "/b", "cpuacct": "/b", "": "/unified"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q = %q, want %q", k, got[k], v)
		}
	}
}

func TestBwrapArgs(t *testing.T) {
	args := strings.Join(bwrapArgs(Policy{WorkDir: "/w"}, false), " ")
	for _, want := range []string{"--unshare-net", "--unshare-pid", "--cap-drop ALL", "--tmpfs /tmp", "--bind /w /w", "--chdir /w", "--remount-ro /", "--ro-bind /usr /usr"} {
		if !strings.Contains(args, want) {
			t.Errorf("bwrap args lack %q: %s", want, args)
		}
	}
	if args := strings.Join(bwrapArgs(Policy{WorkDir: "/w", StateDir: "/s"}, false), " "); !strings.Contains(args, "--bind /w /w --bind /s /s --chdir /w") {
		t.Errorf("the state dir is not bound writable after the work dir: %s", args)
	}
	if args := strings.Join(bwrapArgs(Policy{WorkDir: "/w", Network: true}, false), " "); strings.Contains(args, "--unshare-net") {
		t.Errorf("network policy still unshares the network: %s", args)
	}
}

// A missing bubblewrap binary is reported, never silently skipped.
func TestMissingBubblewrapWarns(t *testing.T) {
	s := New(t.Context(), Options{Bwrap: "/nonexistent/bwrap", CgroupRoot: "/nonexistent"})
	if s.Level() == LevelBubblewrap {
		t.Fatal("level is bubblewrap without bubblewrap")
	}
	w := strings.Join(s.Warnings(), "\n")
	if !strings.Contains(w, "bubblewrap at /nonexistent/bwrap does not run") || !strings.Contains(w, "no CPU, memory or process limits") {
		t.Errorf("warnings = %q", s.Warnings())
	}
	if d := s.Describe(Policy{}); !strings.Contains(d, "no resource limits") {
		t.Errorf("Describe = %q", d)
	}
}

// BenchmarkStepOverhead measures what the sandbox adds to one step: a
// shell running `true`, plain and at each isolation level, p50 and p99.
func BenchmarkStepOverhead(b *testing.B) {
	dir := b.TempDir()
	argv := []string{"/bin/sh", "-e", "-c", "true"}
	plain := func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = dir
		return cmd.Run()
	}
	run := func(s *Sandbox) func(context.Context) error {
		return func(ctx context.Context) error {
			var out bytes.Buffer
			res, err := s.Run(ctx, Policy{WorkDir: dir, Limits: Limits{MemoryBytes: 256 << 20, CPUs: 1, PIDs: 64}, Stdout: &out, Stderr: &out}, argv)
			if err == nil && res.ExitCode != 0 {
				b.Fatalf("exit %d: %s", res.ExitCode, out.String())
			}
			return err
		}
	}
	full := New(b.Context(), Options{})
	cases := []struct {
		name string
		fn   func(context.Context) error
		skip string
	}{
		{"plain", plain, ""},
		{"bubblewrap+cgroups", run(full), skipUnless(full.Level() == LevelBubblewrap && full.cg != nil)},
		{"bubblewrap", run(New(b.Context(), Options{CgroupRoot: "/nonexistent"})), skipUnless(full.Level() == LevelBubblewrap)},
		{"namespaces+cgroups", run(New(b.Context(), Options{DisableBubblewrap: true})), ""},
	}
	var plainP50 float64
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if c.skip != "" {
				b.Skip(c.skip)
			}
			ds := make([]time.Duration, 0, b.N)
			for range b.N {
				t0 := time.Now()
				if err := c.fn(b.Context()); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(t0))
			}
			p50 := percentile(ds, 0.5)
			b.ReportMetric(p50, "p50-ms")
			b.ReportMetric(percentile(ds, 0.99), "p99-ms")
			if c.name == "plain" {
				plainP50 = p50
			} else if plainP50 > 0 {
				b.ReportMetric(p50-plainP50, "overhead-p50-ms")
			}
		})
	}
}

func skipUnless(ok bool) string {
	if ok {
		return ""
	}
	return "not available on this machine"
}

func percentile(ds []time.Duration, p float64) float64 {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	i := min(int(float64(len(ds))*p), len(ds)-1)
	return float64(ds[i].Microseconds()) / 1000
}
