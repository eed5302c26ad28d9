// Package imagesync measures OCI copies from one registry to another on
// loopback, side by side: byoc's copy (internal/ocicopy, what the image
// type runs), skopeo (Debian), crane and the oras CLI, on the same data
// and the same registries (Debian's docker-registry, started here). Each
// copy goes to a fresh, empty destination registry; then the same tool
// copies again (an unchanged re-sync) through a proxy that counts the
// blob bytes it uploads. Run with `make bench` (which installs the pinned
// crane and oras first, scripts/bench-tools.sh); figures are printed,
// never asserted.
package imagesync

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
)

// A tool copies ref (REPO@DIGEST) from the registry src to dst (both
// HOST:PORT), with home as its HOME.
type tool struct {
	name string
	copy func(ctx context.Context, src, dst, repo string, dgst digest.Digest, home string) (cpu time.Duration, err error)
}

// findBinary looks in .cache/bench-tools/bin (scripts/bench-tools.sh),
// then on PATH.
func findBinary(name string) string {
	if wd, err := os.Getwd(); err == nil {
		p := filepath.Join(wd, "..", "..", ".cache", "bench-tools", "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

// command runs a peer and returns the CPU time it used.
func command(ctx context.Context, home, bin string, args ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "DOCKER_CONFIG="+filepath.Join(home, ".docker"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func tools(b *testing.B) ([]tool, []string) {
	var ts []tool
	var missing []string
	concurrency := envInt("BYOC_BENCH_IMAGE_CONCURRENCY", 0)
	ts = append(ts, tool{"byoc", func(ctx context.Context, src, dst, repo string, d digest.Digest, _ string) (time.Duration, error) {
		cpu0 := selfCPU()
		open := func(host string) (*ocicopy.Repo, error) {
			reg, err := ocicopy.ParseRegistry("http://" + host)
			if err != nil {
				return nil, err
			}
			return ocicopy.Open(ctx, reg, repo, ocicopy.Credentials{})
		}
		s, err := open(src)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		t, err := open(dst)
		if err != nil {
			return 0, err
		}
		defer t.Close()
		_, err = ocicopy.Copy(ctx, s, t, d, ocicopy.Options{Concurrency: concurrency})
		return selfCPU() - cpu0, err
	}})
	if bin := findBinary("skopeo"); bin != "" {
		ts = append(ts, tool{"skopeo", func(ctx context.Context, src, dst, repo string, d digest.Digest, home string) (time.Duration, error) {
			return command(ctx, home, bin, "copy", "--insecure-policy", "--all", "--preserve-digests", "--src-tls-verify=false", "--dest-tls-verify=false", "-q",
				"docker://"+src+"/"+repo+"@"+d.String(), "docker://"+dst+"/"+repo+":bench")
		}})
	} else {
		missing = append(missing, "skopeo (apt-get install skopeo)")
	}
	if bin := findBinary("crane"); bin != "" {
		ts = append(ts, tool{"crane", func(ctx context.Context, src, dst, repo string, d digest.Digest, home string) (time.Duration, error) {
			return command(ctx, home, bin, "copy", "--insecure", src+"/"+repo+"@"+d.String(), dst+"/"+repo+":bench")
		}})
	} else {
		missing = append(missing, "crane (scripts/bench-tools.sh)")
	}
	if bin := findBinary("oras"); bin != "" {
		ts = append(ts, tool{"oras", func(ctx context.Context, src, dst, repo string, d digest.Digest, home string) (time.Duration, error) {
			return command(ctx, home, bin, "cp", "--from-plain-http", "--to-plain-http", src+"/"+repo+"@"+d.String(), dst+"/"+repo+":bench")
		}})
	} else {
		missing = append(missing, "oras (scripts/bench-tools.sh)")
	}
	if only := os.Getenv("BYOC_BENCH_IMAGE_TOOLS"); only != "" {
		ts = slices.DeleteFunc(ts, func(t tool) bool { return !slices.Contains(strings.Split(only, ","), t.name) })
	}
	return ts, missing
}

// result is one tool's runs of one case.
type result struct {
	copies, resyncs []time.Duration
	cpu             []time.Duration
	resyncBytes     []int64
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func BenchmarkImageSync(b *testing.B) {
	ctx := context.Background()
	ts, missing := tools(b)
	rounds := envInt("BYOC_BENCH_IMAGE_ROUNDS", 5)
	bigMB := envInt("BYOC_BENCH_IMAGE_MB", 500)
	src := ocitest.StartRegistry(b, ocitest.RegistryOptions{})
	srcReg, _ := ocicopy.ParseRegistry(src.URL())

	type benchCase struct {
		name, repo string
		spec       ocitest.ImageSpec
		root       ocispec.Descriptor
		bytes      int64
	}
	many := make([]int64, 20)
	for i := range many {
		many[i] = 10 << 20
	}
	cases := []*benchCase{
		{name: fmt.Sprintf("1 x %d MB", bigMB), repo: "bench/big", spec: ocitest.ImageSpec{Seed: 1000, Layers: []int64{int64(bigMB) << 20}, Gzip: true}},
		{name: "20 x 10 MB", repo: "bench/many", spec: ocitest.ImageSpec{Seed: 2000, Layers: many, Gzip: true}},
	}
	for _, c := range cases {
		r, err := ocicopy.Open(ctx, srcReg, c.repo, ocicopy.Credentials{})
		if err != nil {
			b.Fatal(err)
		}
		if c.root, err = ocitest.Image(ctx, r, c.spec); err != nil {
			b.Fatal(err)
		}
		nodes, _, err := ocicopy.Walk(ctx, r, c.root.Digest, false)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range nodes {
			c.bytes += n.Descriptor.Size
		}
		// Read every blob once, so the source's files are in the page
		// cache for every tool alike.
		for _, n := range nodes {
			rc, err := r.Fetch(ctx, n.Descriptor)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, rc)
			rc.Close()
		}
		r.Close()
	}

	results := map[string]map[string]*result{}
	b.ResetTimer()
	for _, c := range cases {
		results[c.name] = map[string]*result{}
		for round := range rounds {
			// Rotate the order each round, so no tool always goes first.
			order := slices.Clone(ts)
			for range round % len(order) {
				order = append(order[1:], order[0])
			}
			for _, t := range order {
				res := results[c.name][t.name]
				if res == nil {
					res = &result{}
					results[c.name][t.name] = res
				}
				dst := ocitest.StartRegistry(b, ocitest.RegistryOptions{})
				home := b.TempDir()
				start := time.Now()
				cpu, err := t.copy(ctx, src.Host, dst.Host, c.repo, c.root.Digest, home)
				if err != nil {
					b.Fatalf("%s, %s: %v", c.name, t.name, err)
				}
				res.copies = append(res.copies, time.Since(start))
				res.cpu = append(res.cpu, cpu)
				checkCopied(b, dst, c.repo, c.root.Digest, t.name)

				proxy := ocitest.StartProxy(b, dst.Host)
				start = time.Now()
				if _, err := t.copy(ctx, src.Host, proxy.Host, c.repo, c.root.Digest, home); err != nil {
					b.Fatalf("%s, %s re-sync: %v", c.name, t.name, err)
				}
				res.resyncs = append(res.resyncs, time.Since(start))
				res.resyncBytes = append(res.resyncBytes, proxy.TotalUploaded())
				dst.Stop()
				os.RemoveAll(dst.Dir)
			}
		}
	}
	b.StopTimer()

	fmt.Printf("\nimage sync, registry -> registry on loopback (docker-registry 2.8, no auth), %d rounds, median (best); %s, %d CPUs, %s\n",
		rounds, runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"))
	for _, m := range missing {
		fmt.Printf("  not measured: %s\n", m)
	}
	for _, c := range cases {
		fmt.Printf("%s (%.1f MB in all, layers gzip):\n", c.name, float64(c.bytes)/1e6)
		fastestPeer := time.Duration(0)
		for _, t := range ts {
			if t.name == "byoc" {
				continue
			}
			if m := median(results[c.name][t.name].copies); fastestPeer == 0 || m < fastestPeer {
				fastestPeer = m
			}
		}
		fmt.Printf("  %-7s %16s %10s %16s %10s %14s %12s\n", "tool", "copy MB/s", "time", "vs fastest peer", "tool CPU", "re-sync time", "re-sync B")
		for _, t := range ts {
			res := results[c.name][t.name]
			m := median(res.copies)
			ratio := "-"
			if fastestPeer > 0 {
				ratio = fmt.Sprintf("%.2fx", fastestPeer.Seconds()/m.Seconds())
			}
			fmt.Printf("  %-7s %7.1f (%6.1f) %10s %16s %10s %14s %12d\n", t.name,
				float64(c.bytes)/1e6/m.Seconds(), float64(c.bytes)/1e6/slices.Min(res.copies).Seconds(),
				m.Round(time.Millisecond), ratio, median(res.cpu).Round(time.Millisecond), median(res.resyncs).Round(time.Millisecond), slices.Max(res.resyncBytes))
		}
	}
	fmt.Println("  (vs fastest peer: the fastest of skopeo, crane and oras by median time divided by this tool's; above 1 is faster. tool CPU: user+system time of the copying process, median; the registries' is not counted. re-sync B: blob bytes uploaded by the second, unchanged copy, the most over the rounds)")
}

// checkCopied fails unless dst holds the whole graph of d.
func checkCopied(b *testing.B, dst *ocitest.Registry, repo string, d digest.Digest, tool string) {
	b.Helper()
	reg, _ := ocicopy.ParseRegistry(dst.URL())
	r, err := ocicopy.Open(context.Background(), reg, repo, ocicopy.Credentials{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	missing, err := ocicopy.Missing(context.Background(), r, d, false)
	if err != nil || len(missing) > 0 {
		b.Fatalf("%s did not copy %s whole: %v, missing %d", tool, d, err, len(missing))
	}
}
