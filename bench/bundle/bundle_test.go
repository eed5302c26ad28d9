// Package bundle measures the import of an offline bundle as agentd
// bundle import does it: the signed tar's manifest and small files are
// verified and unpacked (internal/bundlefile Open), then every image is
// loaded into the install registry, its layers streamed from their byte
// ranges in the tar and hashed as they go (internal/bundlefile/bundleload,
// internal/ocicopy; blobs the registry holds are not sent). Against, in
// the same run: the disk's sequential synced write and uncached read of a
// file of the bundle's size, and skopeo copy of the same images' layouts
// into a fresh registry of the same program; each into Debian's
// docker-registry and into CNCF Distribution v3 built with this
// machine's Go (make bench-tools), started here. Figures are printed, never asserted, each with the load
// average. Sizes: BYOC_BENCH_BUNDLE_MB (default 200: 20 images of 10 MB)
// and BYOC_BENCH_BUNDLE_LAYER_MB (default 256: one image of one layer,
// for the memory an import takes); BYOC_BENCH_BUNDLE_DIR puts the tar on
// another filesystem; BYOC_BENCH_PROFILE=PREFIX writes CPU profiles of
// the import and of the registry.
package bundle

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/internal/bundlefile/bundleload"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

type image struct {
	repo string
	root ocispec.Descriptor
}

// makeBundle writes n images of one layer of layerBytes each into an OCI
// layout root under dir/src/oci, each tagged "bench" (for skopeo), and
// packs them into a signed bundle tar in tarDir (dir/src is removed); it
// returns the tar's path, the images, and the key that signed it.
func makeBundle(b *testing.B, dir, tarDir string, n int, layerBytes int64, seed uint64) (string, []image, ed25519.PublicKey) {
	b.Helper()
	ctx := context.Background()
	src := filepath.Join(dir, "src")
	root := ocicopy.Registry{LayoutRoot: filepath.Join(src, "oci")}
	var imgs []image
	for i := range n {
		repo := fmt.Sprintf("bench/app%02d", i)
		r, err := ocicopy.Open(ctx, root, repo, ocicopy.Credentials{})
		if err != nil {
			b.Fatal(err)
		}
		d, err := ocitest.Image(ctx, r, ocitest.ImageSpec{Seed: seed + uint64(i)*7919, Layers: []int64{layerBytes}})
		if err == nil {
			err = r.Tag(ctx, d, "bench")
		}
		r.Close()
		if err != nil {
			b.Fatal(err)
		}
		imgs = append(imgs, image{repo, d})
	}
	if err := os.WriteFile(filepath.Join(src, "jobs.json"), []byte("[]\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	files, err := bundlefile.Scan(src)
	if err != nil {
		b.Fatal(err)
	}
	pub, key, _ := ed25519.GenerateKey(nil)
	raw, _ := json.Marshal(bundlefile.Manifest{Format: bundlefile.Format, Kind: bundlefile.KindBundle, ID: "bdl_bench", Files: files})
	path := filepath.Join(tarDir, "bundle.tar")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := bundlefile.Write(w, src, raw, bundlefile.Signature{KeyID: agentproto.KeyID(pub), Signature: agentproto.SignBundleManifest(key, raw)}); err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	os.RemoveAll(src)
	return path, imgs, pub
}

// importResult is one import's phases and what it moved.
type importResult struct {
	verify, load   time.Duration
	blobBytes      int64
	blobsSent      int
	blobsHeld      int
	manifestsMoved int
	streamed       int64
}

func verifier(pub ed25519.PublicKey) bundlefile.VerifyFunc {
	keys := map[string]ed25519.PublicKey{agentproto.KeyID(pub): pub}
	return func(raw []byte, _ *bundlefile.Manifest, sig bundlefile.Signature) error {
		return agentproto.VerifyBundleManifest(keys, sig.KeyID, raw, sig.Signature)
	}
}

// importBundle imports the tar as agentd bundle import does: the
// manifest's signature and the small files checked and unpacked into
// staging (which must not exist), then every image loaded into reg, its
// layers streamed from their ranges in the tar. staging is removed.
func importBundle(b *testing.B, path, staging string, pub ed25519.PublicKey, imgs []image, reg ocicopy.Registry) importResult {
	b.Helper()
	ctx := context.Background()
	var res importResult
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	defer os.RemoveAll(staging)
	start := time.Now()
	bdl, err := bundlefile.Open(f, staging, verifier(pub), bundleload.Stream)
	if err != nil {
		b.Fatal(err)
	}
	res.verify = time.Since(start)
	res.streamed = bdl.StreamedBytes()
	start = time.Now()
	src := bundleload.Source{Layout: ocicopy.Registry{LayoutRoot: filepath.Join(staging, bundleload.LayoutDir)}, Bundle: bdl}
	st, err := bundleload.LoadImages(ctx, src, reg, ocicopy.Credentials{}, loads(imgs))
	if err != nil {
		b.Fatal(err)
	}
	res.blobBytes, res.blobsSent, res.blobsHeld, res.manifestsMoved = st.BlobBytes, st.BlobsSent, st.BlobsHeld, st.ManifestsSent
	res.load = time.Since(start)
	return res
}

// dropCache writes back and drops from the page cache every file under
// p, so that the next read of them comes from the disk.
func dropCache(b *testing.B, p string) {
	b.Helper()
	err := filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.OpenFile(q, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			return err
		}
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
	if err != nil {
		b.Fatal(err)
	}
}

// diskProbe writes and syncs a file of size bytes in dir, drops it from
// the page cache and reads it back, and returns both throughputs in
// bytes per second.
func diskProbe(b *testing.B, dir string, size int64) (write, read float64) {
	b.Helper()
	p := filepath.Join(dir, "disk-probe")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(p)
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 31)
	}
	start := time.Now()
	for n := int64(0); n < size; n += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	write = float64(size) / time.Since(start).Seconds()
	f.Close()
	dropCache(b, p)
	f, err = os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	start = time.Now()
	n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
	if err != nil {
		b.Fatal(err)
	}
	return write, float64(n) / time.Since(start).Seconds()
}

// syncTime is how long writing back what the page cache holds takes
// (the registry does not sync what it stores).
func syncTime() time.Duration {
	start := time.Now()
	syscall.Sync()
	return time.Since(start)
}

// profiles starts, with BYOC_BENCH_PROFILE=PREFIX, a CPU profile of this
// process (PREFIX.byoc.pprof) and one of the registry (PREFIX.registry.pprof,
// through its debug server: the registry is restarted with one) for
// BYOC_BENCH_PROFILE_SECONDS (default 10); the returned func stops this
// process's and waits for the registry's.
func profiles(b *testing.B, reg *ocitest.Registry, round int) func() {
	b.Helper()
	prefix := os.Getenv("BYOC_BENCH_PROFILE")
	if prefix == "" {
		return func() {}
	}
	if round > 0 {
		prefix += fmt.Sprintf(".%d", round)
	}
	secs := envInt("BYOC_BENCH_PROFILE_SECONDS", 10)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := filepath.Join(reg.Dir, "config.yml")
	c, err := os.ReadFile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(cfg, append(c, "  debug:\n    addr: "+addr+"\n"...), 0o600); err != nil {
		b.Fatal(err)
	}
	reg.Stop()
	reg.Start()
	out, err := os.Create(prefix + ".byoc.pprof")
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
		if err != nil {
			fmt.Println("  registry profile:", err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(prefix + ".registry.pprof")
		if err == nil {
			io.Copy(f, resp.Body)
			f.Close()
		}
	}()
	return func() {
		pprof.StopCPUProfile()
		out.Close()
		<-done
	}
}

// load is the machine's load average, for every figure (the machine is
// shared).
func load() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load ?"
	}
	return "load " + strings.Join(f[:3], " ")
}

// cpu is the CPU time this process and the registry's spent so far.
type cpu struct{ self, registry time.Duration }

func cpuNow(reg *ocitest.Registry) cpu {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	c := cpu{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), reg.Dir) {
			continue
		}
		st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		// utime and stime are fields 14 and 15, after the ")" ending
		// the command's name.
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) > 13 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			c.registry += time.Duration(u+s) * (time.Second / 100)
		}
	}
	return c
}

func loads(imgs []image) []bundleload.Load {
	out := make([]bundleload.Load, len(imgs))
	for i, im := range imgs {
		out[i] = bundleload.Load{Repository: im.repo, Target: im.repo, Digest: im.root.Digest}
	}
	return out
}

func mbps(bytes int64, d time.Duration) float64 { return float64(bytes) / d.Seconds() / 1e6 }

func fileSize(b *testing.B, p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		b.Fatal(err)
	}
	return fi.Size()
}

// BenchmarkBundleLargeLayer imports a bundle of one image of one large
// layer and prints the most heap the process held meanwhile (sampled
// every 5 ms) and its peak RSS: the layer streams, it is never held.
// It runs first, so the peak RSS is this import's (and the bundle's
// making, which streams too).
func BenchmarkBundleLargeLayer(b *testing.B) {
	mb := envInt("BYOC_BENCH_BUNDLE_LAYER_MB", 256)
	kinds := registries(b)
	dir := b.TempDir()
	path, imgs, pub := makeBundle(b, dir, dir, 1, int64(mb)<<20, 900)
	fmt.Printf("\nbundle import, one image of one %d MB layer (%s, %d CPUs, %s)\n", mb, runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02 15:04"))
	for i, kind := range kinds {
		dropCache(b, path)
		reg := ocitest.StartRegistry(b, ocitest.RegistryOptions{Binary: kind.binary})
		dst, _ := ocicopy.ParseRegistry(reg.URL())
		runtime.GC()
		var peak atomic.Uint64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			var ms runtime.MemStats
			for {
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak.Load() {
					peak.Store(ms.HeapInuse)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		})
		l0 := load()
		c0 := cpuNow(reg)
		if i == 0 {
			b.ResetTimer()
		} else {
			b.StartTimer()
		}
		res := importBundle(b, path, filepath.Join(dir, fmt.Sprintf("staging%d", i)), pub, imgs, dst)
		b.StopTimer()
		c1 := cpuNow(reg)
		close(stop)
		wg.Wait()
		reg.Stop()
		os.RemoveAll(reg.Dir)
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		fmt.Printf("  into %s: verify %s, load %s (%.0f MB/s), %d blob bytes moved, %d streamed from the tar; CPU: this process %s, the registry %s [%s before, %s after]\n",
			kind.name, res.verify.Round(time.Millisecond), res.load.Round(time.Millisecond), mbps(res.blobBytes, res.load), res.blobBytes, res.streamed,
			(c1.self - c0.self).Round(time.Millisecond), (c1.registry - c0.registry).Round(time.Millisecond), l0, load())
		fmt.Printf("    peak Go heap in use %.1f MiB; peak RSS of the process so far %.1f MiB (the layer: %d MiB)\n", float64(peak.Load())/(1<<20), float64(ru.Maxrss)/1024, mb)
	}
}

// registryKind is one registry program the import is measured into.
type registryKind struct{ name, binary string }

// registries are the install registries the import is measured into:
// Debian's docker-registry (distribution 2.8.2, built with Go 1.19,
// whose SHA-256 does not use the CPU's SHA extensions) and, when `make
// bench-tools` installed it, CNCF Distribution v3.0.0 built with this
// machine's Go (BYOC_BENCH_REGISTRY_V3 names another binary).
// BYOC_BENCH_BUNDLE_REGISTRIES=debian or =distribution keeps one.
func registries(b *testing.B) []registryKind {
	want := os.Getenv("BYOC_BENCH_BUNDLE_REGISTRIES")
	keep := func(name string) bool { return want == "" || strings.Contains(want, name) }
	var out []registryKind
	if keep("debian") {
		ocitest.Need(b)
		out = append(out, registryKind{"Debian's docker-registry 2.8.2 (Go 1.19)", ""})
	}
	if keep("distribution") {
		v3 := os.Getenv("BYOC_BENCH_REGISTRY_V3")
		if v3 == "" {
			v3, _ = filepath.Abs("../../.cache/bench-tools/bin/registry")
		}
		if _, err := os.Stat(v3); err != nil {
			fmt.Printf("  CNCF Distribution v3 not installed (make bench-tools): %v\n", err)
		} else {
			out = append(out, registryKind{"CNCF Distribution v3.0.0 (" + runtime.Version() + ")", v3})
		}
	}
	if len(out) == 0 {
		b.Skip("no registry to measure into")
	}
	return out
}

// BenchmarkBundleImport measures, in one run and on one disk: the disk's
// sequential synced write and uncached read of a file of the bundle's
// size; then for each registry program (registries): the import of a
// bundle of 20 images into a fresh registry (the tar out of the page
// cache first), and with the write-back of what it stored; the same
// import again (0 blob bytes); then, the registry emptied, skopeo copy
// of the same images' layouts into another fresh registry of the same
// program, each unpacked from the tar just before. Each stage's data is
// deleted once measured: the disk holds at most the tar and one
// registry.
func BenchmarkBundleImport(b *testing.B) {
	total := envInt("BYOC_BENCH_BUNDLE_MB", 200)
	kinds := registries(b)
	const n = 20
	dir := b.TempDir()
	// The tar's directory: BYOC_BENCH_BUNDLE_DIR puts it elsewhere (on
	// a tmpfs, when the disk cannot hold the tar and the registry both).
	tarDir := dir
	if d := os.Getenv("BYOC_BENCH_BUNDLE_DIR"); d != "" {
		var err error
		if tarDir, err = os.MkdirTemp(d, "bench-bundle-"); err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(tarDir)
	}
	fmt.Printf("\nbundle import, %d images of one %d MB layer (%s, %d CPUs, %s), the tar in %s\n", n, total/n,
		runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02 15:04"), tarDir)
	write, read := diskProbe(b, dir, int64(total)<<20)
	fmt.Printf("  disk, a %d MB file: sequential write (synced) %.0f MB/s, sequential read (not cached) %.0f MB/s [%s]\n", total, write/1e6, read/1e6, load())

	path, imgs, pub := makeBundle(b, dir, tarDir, n, int64(total)<<20/n, 100)
	size := fileSize(b, path)
	for i, kind := range kinds {
		fmt.Printf("  into %s:\n", kind.name)
		if i == 0 {
			b.ResetTimer()
		} else {
			b.StartTimer()
		}
		whole, synced := importInto(b, kind, dir, path, size, pub, imgs, write, read, i)
		b.StopTimer()
		// This disk's synced write varies by a factor of up to five within
		// an hour (a virtual disk: the host's cache): probe it again
		// right after, and print the import against both probes.
		again, _ := diskProbe(b, dir, int64(total)<<20)
		fmt.Printf("    the disk probed again right after: sequential write (synced) %.0f MB/s; the import, synced = %.2f x that [%s]\n",
			again/1e6, mbps(size, whole+synced)*1e6/again, load())
		skopeoInto(b, kind, tarDir, path, size, pub, imgs, whole+synced)
	}
}

// importInto imports the bundle into a fresh registry of kind, prints
// the figures, imports it again (unchanged), and removes the registry.
func importInto(b *testing.B, kind registryKind, dir, path string, size int64, pub ed25519.PublicKey, imgs []image, write, read float64, round int) (whole, synced time.Duration) {
	dropCache(b, path)
	syncTime()
	reg := ocitest.StartRegistry(b, ocitest.RegistryOptions{Binary: kind.binary})
	defer os.RemoveAll(reg.Dir)
	defer reg.Stop()
	dst, _ := ocicopy.ParseRegistry(reg.URL())
	stopProfiles := profiles(b, reg, round)
	c0 := cpuNow(reg)
	l0 := load()
	first := importBundle(b, path, filepath.Join(dir, fmt.Sprintf("staging%d", round)), pub, imgs, dst)
	stopProfiles()
	c1 := cpuNow(reg)
	synced = syncTime()
	whole = first.verify + first.load
	fmt.Printf("    import of the %d MB tar (verify %s, load %s): %s, %.0f MB/s of bundle = %.2f x the disk's write, %.2f x its read [%s before, %s after]\n",
		size>>20, first.verify.Round(time.Millisecond), first.load.Round(time.Millisecond), whole.Round(time.Millisecond), mbps(size, whole),
		mbps(size, whole)*1e6/write, mbps(size, whole)*1e6/read, l0, load())
	fmt.Printf("      with the write-back of what the registry stored (sync %s): %.0f MB/s = %.2f x the disk's write\n",
		synced.Round(time.Millisecond), mbps(size, whole+synced), mbps(size, whole+synced)*1e6/write)
	fmt.Printf("      %d blobs sent, %d blob bytes moved, %d bytes streamed from the tar (not unpacked); CPU: this process %s, the registry %s, over %s\n",
		first.blobsSent, first.blobBytes, first.streamed, (c1.self - c0.self).Round(time.Millisecond), (c1.registry - c0.registry).Round(time.Millisecond), whole.Round(time.Millisecond))
	again := importBundle(b, path, filepath.Join(dir, fmt.Sprintf("staging%d-again", round)), pub, imgs, dst)
	fmt.Printf("    unchanged import: verify %s, load %s: %d blob bytes moved, %d blobs sent, %d held already [%s]\n",
		again.verify.Round(time.Millisecond), again.load.Round(time.Millisecond), again.blobBytes, again.blobsSent, again.blobsHeld, load())
	return whole, synced
}

// skopeoInto copies the same images with skopeo into a fresh registry of
// kind and prints the ratio against byoc's import (importSynced).
func skopeoInto(b *testing.B, kind registryKind, tarDir, path string, size int64, pub ed25519.PublicKey, imgs []image, importSynced time.Duration) {
	bin, err := exec.LookPath("skopeo")
	if err != nil {
		fmt.Println("    skopeo not found (apt-get install skopeo): no comparison")
		return
	}
	// skopeo reads a layout, not a bundle: each image's layout is
	// unpacked from the tar beside it (the rest of the tar skipped), out
	// of the page cache, copied, and removed, so the disk never holds
	// more than the tar and one registry.
	reg2 := ocitest.StartRegistry(b, ocitest.RegistryOptions{Binary: kind.binary})
	defer os.RemoveAll(reg2.Dir)
	defer reg2.Stop()
	home := b.TempDir()
	var skopeo, un time.Duration
	l0 := load()
	for _, im := range imgs {
		staging := filepath.Join(tarDir, "unpacked")
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		mine := bundleload.LayoutDir + "/" + im.repo + "/"
		start := time.Now()
		if _, err := bundlefile.Open(f, staging, verifier(pub), func(fl bundlefile.File) bool { return !strings.HasPrefix(fl.Path, mine) }); err != nil {
			b.Fatal(err)
		}
		un += time.Since(start)
		f.Close()
		dropCache(b, staging)
		start = time.Now()
		cmd := exec.Command(bin, "copy", "--insecure-policy", "--preserve-digests", "--dest-tls-verify=false", "-q",
			"oci:"+filepath.Join(staging, bundleload.LayoutDir, im.repo)+":bench", "docker://"+reg2.Host+"/"+im.repo+":bench")
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+home)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("skopeo copy %s: %v: %s", im.repo, err, out)
		}
		skopeo += time.Since(start)
		os.RemoveAll(staging)
	}
	skopeo += syncTime()
	d2, _ := ocicopy.ParseRegistry(reg2.URL())
	for _, im := range imgs {
		r, err := ocicopy.Open(context.Background(), d2, im.repo, ocicopy.Credentials{})
		if err != nil {
			b.Fatal(err)
		}
		if missing, err := ocicopy.Missing(context.Background(), r, digest.Digest(im.root.Digest), false); err != nil || len(missing) > 0 {
			b.Fatalf("skopeo's copy of %s lacks %d nodes: %v", im.repo, len(missing), err)
		}
		r.Close()
	}
	fmt.Printf("    unpacking the tar image by image (what skopeo needs first): %s, %.0f MB/s\n", un.Round(time.Millisecond), mbps(size, un))
	fmt.Printf("    skopeo copy of the unpacked layouts into a fresh registry, synced: %s (%.0f MB/s); byoc's import from the tar, synced / skopeo's copy = %.2f in time (below 1: byoc is faster), %.2f with the unpack skopeo needs counted [%s before, %s after]\n",
		skopeo.Round(time.Millisecond), mbps(size, skopeo), importSynced.Seconds()/skopeo.Seconds(), importSynced.Seconds()/(skopeo+un).Seconds(), l0, load())
}
