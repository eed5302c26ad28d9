// Package bundle measures the import of an offline bundle as agentd
// bundle import does it: the signed tar is verified and unpacked
// (internal/bundlefile: the manifest's signature, then every file's
// SHA-256 while it streams to disk), then every image is copied from the
// unpacked OCI image layout into the install registry (internal/ocicopy,
// blobs the registry holds are not sent). Against: the disk's sequential
// write throughput (a file of the bundle's size, written and synced) and
// skopeo copy of the same unpacked layout into a fresh registry of the
// same kind (Debian's docker-registry, started here). Figures are printed,
// never asserted. Sizes: BYOC_BENCH_BUNDLE_MB (default 200: 20 images of
// 10 MB) and BYOC_BENCH_BUNDLE_LAYER_MB (default 256: one image of one
// layer, for the memory an import takes).
package bundle

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

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
// packs them into a signed bundle tar; it returns the tar's path, the
// images, and the key that signed it.
func makeBundle(b *testing.B, dir string, n int, layerBytes int64, seed uint64) (string, []image, ed25519.PublicKey) {
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
	path := filepath.Join(dir, "bundle.tar")
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
}

// importBundle verifies and unpacks the tar into staging (which must not
// exist), then copies every image into reg, as agentd bundle import does.
func importBundle(b *testing.B, path, staging string, pub ed25519.PublicKey, imgs []image, reg ocicopy.Registry) importResult {
	b.Helper()
	ctx := context.Background()
	var res importResult
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	keys := map[string]ed25519.PublicKey{agentproto.KeyID(pub): pub}
	start := time.Now()
	_, _, err = bundlefile.Read(bufio.NewReaderSize(f, 1<<20), staging, func(raw []byte, _ *bundlefile.Manifest, sig bundlefile.Signature) error {
		return agentproto.VerifyBundleManifest(keys, sig.KeyID, raw, sig.Signature)
	})
	if err != nil {
		b.Fatal(err)
	}
	res.verify = time.Since(start)
	start = time.Now()
	layout := ocicopy.Registry{LayoutRoot: filepath.Join(staging, "oci")}
	st, err := bundleload.LoadImages(ctx, layout, reg, ocicopy.Credentials{}, loads(imgs))
	if err != nil {
		b.Fatal(err)
	}
	res.blobBytes, res.blobsSent, res.blobsHeld, res.manifestsMoved = st.BlobBytes, st.BlobsSent, st.BlobsHeld, st.ManifestsSent
	res.load = time.Since(start)
	return res
}

// diskWrite writes and syncs a file of size bytes in dir, and returns the
// throughput in bytes per second.
func diskWrite(b *testing.B, dir string, size int64) float64 {
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
	f.Close()
	return float64(size) / time.Since(start).Seconds()
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
	ocitest.Need(b)
	mb := envInt("BYOC_BENCH_BUNDLE_LAYER_MB", 256)
	dir := b.TempDir()
	path, imgs, pub := makeBundle(b, dir, 1, int64(mb)<<20, 900)
	reg := ocitest.StartRegistry(b, ocitest.RegistryOptions{})
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
	b.ResetTimer()
	res := importBundle(b, path, filepath.Join(dir, "staging"), pub, imgs, dst)
	b.StopTimer()
	close(stop)
	wg.Wait()
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Printf("\nbundle import, one image of one %d MB layer (%s, %d CPUs, %s)\n", mb, runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("  verify+unpack %s, load %s, %d blob bytes moved\n", res.verify.Round(time.Millisecond), res.load.Round(time.Millisecond), res.blobBytes)
	fmt.Printf("  peak Go heap in use %.1f MiB; peak RSS of the process %.1f MiB (the layer: %d MiB)\n", float64(peak.Load())/(1<<20), float64(ru.Maxrss)/1024, mb)
}

// BenchmarkBundleImport imports a bundle of 20 images into a fresh
// registry, then the same bundle again (0 blob bytes), and copies the
// same unpacked layout with skopeo into another fresh registry.
func BenchmarkBundleImport(b *testing.B) {
	ocitest.Need(b)
	total := envInt("BYOC_BENCH_BUNDLE_MB", 200)
	const n = 20
	dir := b.TempDir()
	path, imgs, pub := makeBundle(b, dir, n, int64(total)<<20/n, 100)
	size := fileSize(b, path)
	disk := diskWrite(b, dir, size)

	reg := ocitest.StartRegistry(b, ocitest.RegistryOptions{})
	dst, _ := ocicopy.ParseRegistry(reg.URL())
	staging := filepath.Join(dir, "staging")
	b.ResetTimer()
	first := importBundle(b, path, staging, pub, imgs, dst)
	b.StopTimer()
	// Keep the first unpack for skopeo; the unchanged import unpacks again.
	again := importBundle(b, path, filepath.Join(dir, "staging2"), pub, imgs, dst)
	os.RemoveAll(filepath.Join(dir, "staging2"))

	skopeo := time.Duration(0)
	if bin, err := exec.LookPath("skopeo"); err == nil {
		reg2 := ocitest.StartRegistry(b, ocitest.RegistryOptions{})
		home := b.TempDir()
		start := time.Now()
		for _, im := range imgs {
			cmd := exec.Command(bin, "copy", "--insecure-policy", "--preserve-digests", "--dest-tls-verify=false", "-q",
				"oci:"+filepath.Join(staging, "oci", im.repo)+":bench", "docker://"+reg2.Host+"/"+im.repo+":bench")
			cmd.Env = append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+home)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("skopeo copy %s: %v: %s", im.repo, err, out)
			}
		}
		skopeo = time.Since(start)
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
	}

	fmt.Printf("\nbundle import, %d images of one %d MB layer, %d MB tar (%s, %d CPUs, %s)\n", n, total/n, size>>20,
		runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"))
	whole := first.verify + first.load
	fmt.Printf("  disk sequential write (a %d MB file, synced): %.0f MB/s\n", size>>20, disk/1e6)
	fmt.Printf("  first import: verify+unpack %s (%.0f MB/s), load into the registry %s (%.0f MB/s): %s in all, %.0f MB/s of bundle = %.2f x the disk's write throughput\n",
		first.verify.Round(time.Millisecond), mbps(size, first.verify), first.load.Round(time.Millisecond), mbps(first.blobBytes, first.load),
		whole.Round(time.Millisecond), mbps(size, whole), mbps(size, whole)*1e6/disk)
	fmt.Printf("    %d blobs sent, %d blob bytes moved\n", first.blobsSent, first.blobBytes)
	fmt.Printf("  unchanged import: verify+unpack %s, load %s: %d blob bytes moved, %d blobs sent, %d held already\n",
		again.verify.Round(time.Millisecond), again.load.Round(time.Millisecond), again.blobBytes, again.blobsSent, again.blobsHeld)
	if skopeo > 0 {
		fmt.Printf("  skopeo copy of the same unpacked layout into a fresh registry: %s; byoc load / skopeo = %.2f (below 1: byoc is faster)\n",
			skopeo.Round(time.Millisecond), first.load.Seconds()/skopeo.Seconds())
	} else {
		fmt.Println("  skopeo not found (apt-get install skopeo): no comparison")
	}
}
