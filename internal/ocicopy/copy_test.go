package ocicopy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
)

// TestMain lets the test binary be a copying process that a test kills
// (OCICOPY_TEST_CHILD=copy; the source, destination and digest in env).
func TestMain(m *testing.M) {
	if os.Getenv("OCICOPY_TEST_CHILD") == "copy" {
		ctx := context.Background()
		src := openEnv("OCICOPY_TEST_SRC", srcCreds)
		dst := openEnv("OCICOPY_TEST_DST", dstCreds)
		_, err := ocicopy.Copy(ctx, src, dst, digest.Digest(os.Getenv("OCICOPY_TEST_DIGEST")), ocicopy.Options{Concurrency: 1})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func openEnv(name string, creds ocicopy.Credentials) *ocicopy.Repo {
	loc, repo, _ := strings.Cut(os.Getenv(name), " ")
	reg, err := ocicopy.ParseRegistry(loc)
	if err == nil {
		var r *ocicopy.Repo
		if r, err = ocicopy.Open(context.Background(), reg, repo, creds); err == nil {
			return r
		}
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(2)
	return nil
}

// open opens repository in the registry at loc.
func open(tb testing.TB, loc, repository string, creds ocicopy.Credentials) *ocicopy.Repo {
	tb.Helper()
	reg, err := ocicopy.ParseRegistry(loc)
	if err != nil {
		tb.Fatal(err)
	}
	r, err := ocicopy.Open(context.Background(), reg, repository, creds)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

var (
	srcCreds = ocicopy.Credentials{Username: "vendor", Password: "vendor-secret"}
	dstCreds = ocicopy.Credentials{Username: "install", Password: "install-secret"}
)

func registries(t *testing.T) (src, dst *ocitest.Registry) {
	t.Helper()
	src = ocitest.StartRegistry(t, ocitest.RegistryOptions{Username: srcCreds.Username, Password: srcCreds.Password})
	dst = ocitest.StartRegistry(t, ocitest.RegistryOptions{Username: dstCreds.Username, Password: dstCreds.Password})
	return src, dst
}

// blobBytes is the size of a plan's blobs (its non-manifest nodes).
func blobBytes(p *ocicopy.Plan) (n int64) {
	for _, node := range p.Nodes {
		if !node.Manifest {
			n += node.Descriptor.Size
		}
	}
	return n
}

// assertSame checks that dst holds the whole graph of root, node for
// node as src has it.
func assertSame(t *testing.T, src, dst *ocicopy.Repo, root digest.Digest) {
	t.Helper()
	ctx := context.Background()
	want, _, err := ocicopy.Walk(ctx, src, root, true)
	if err != nil {
		t.Fatal(err)
	}
	got, rootDesc, err := ocicopy.Walk(ctx, dst, root, true)
	if err != nil {
		t.Fatalf("walk %s at the destination: %v", root, err)
	}
	if rootDesc.Digest != root {
		t.Fatalf("destination root %s, want %s", rootDesc.Digest, root)
	}
	digests := func(ns []ocicopy.Node) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.Descriptor.Digest.String())
		}
		sort.Strings(out)
		return out
	}
	if g, w := strings.Join(digests(got), "\n"), strings.Join(digests(want), "\n"); g != w {
		t.Fatalf("destination graph:\n%s\nwant:\n%s", g, w)
	}
	for _, n := range got {
		ok, err := dst.Exists(ctx, n.Descriptor)
		if err != nil || !ok {
			t.Fatalf("destination lacks %s (%v)", n.Descriptor.Digest, err)
		}
	}
}

func TestCopyImageAndResync(t *testing.T) {
	ctx := context.Background()
	srcReg, dstReg := registries(t)
	src := open(t, srcReg.URL(), "acme/api", srcCreds)
	dst := open(t, dstReg.URL(), "install/api", dstCreds)
	img, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 1, Layers: []int64{3 << 20, 1 << 20, 12345}})
	if err != nil {
		t.Fatal(err)
	}

	p, err := ocicopy.PlanCopy(ctx, src, dst, img.Digest, ocicopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Missing()) != 5 || p.MissingBytes != p.TotalBytes {
		t.Fatalf("plan of a copy to an empty registry: %d missing nodes, %d of %d bytes; want all 5", len(p.Missing()), p.MissingBytes, p.TotalBytes)
	}
	res, err := p.Apply(ctx, ocicopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Root.Digest != img.Digest || res.Root.MediaType != ocispec.MediaTypeImageManifest || res.Root.Size != img.Size {
		t.Fatalf("result root %+v, want %+v", res.Root, img)
	}
	if res.BlobBytes != blobBytes(p) || res.BytesTransferred != p.TotalBytes || res.BlobsCopied != 4 || res.ManifestsCopied != 1 {
		t.Fatalf("first copy: %+v; want %d blob bytes, %d in all, 4 blobs, 1 manifest", res, blobBytes(p), p.TotalBytes)
	}
	assertSame(t, src, dst, img.Digest)

	// An unchanged re-sync sends nothing.
	res, err = ocicopy.Copy(ctx, src, dst, img.Digest, ocicopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.BlobBytes != 0 || res.BytesTransferred != 0 || res.BlobsCopied != 0 || res.BlobsSkipped != 4 || res.ManifestsSkipped != 1 {
		t.Fatalf("re-sync: %+v; want nothing sent, 4 blobs and 1 manifest skipped", res)
	}
}

func TestCopyIndexWithReferrers(t *testing.T) {
	ctx := context.Background()
	srcReg, dstReg := registries(t)
	src := open(t, srcReg.URL(), "acme/multi", srcCreds)
	amd, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 10, Layers: []int64{1 << 20, 4096}, Platform: &ocispec.Platform{OS: "linux", Architecture: "amd64"}})
	if err != nil {
		t.Fatal(err)
	}
	arm, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 20, Layers: []int64{1 << 20}, Platform: &ocispec.Platform{OS: "linux", Architecture: "arm64"}})
	if err != nil {
		t.Fatal(err)
	}
	idx, err := ocitest.Index(ctx, src, amd, arm)
	if err != nil {
		t.Fatal(err)
	}
	// A signature of the index, an SBOM of one platform's image, and a
	// signature of the SBOM.
	sig, err := ocitest.Artifact(ctx, src, idx, "application/vnd.example.signature", []byte("signed"))
	if err != nil {
		t.Fatal(err)
	}
	sbom, err := ocitest.Artifact(ctx, src, arm, "application/spdx+json", []byte(`{"spdxVersion":"SPDX-2.3"}`))
	if err != nil {
		t.Fatal(err)
	}
	sbomSig, err := ocitest.Artifact(ctx, src, sbom, "application/vnd.example.signature", []byte("signed sbom"))
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, dst string
	}{
		{"registry", dstReg.URL()},
		{"layout", "oci:" + t.TempDir()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := open(t, tc.dst, "install/multi", dstCreds)
			res, err := ocicopy.Copy(ctx, src, dst, idx.Digest, ocicopy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Root.Digest != idx.Digest || res.Root.MediaType != ocispec.MediaTypeImageIndex {
				t.Fatalf("root %+v, want the index %s", res.Root, idx.Digest)
			}
			// The index, two images, three artifacts.
			if res.ManifestsCopied != 6 {
				t.Fatalf("copied %d manifests, want 6 (index, 2 images, 3 referrers): %+v", res.ManifestsCopied, res)
			}
			assertSame(t, src, dst, idx.Digest)
			for _, d := range []ocispec.Descriptor{sig, sbom, sbomSig} {
				if ok, err := dst.Exists(ctx, d); err != nil || !ok {
					t.Fatalf("referrer %s (%s) not copied: %v", d.Digest, d.ArtifactType, err)
				}
			}
			// The destination can list them as referrers, so a verifier
			// there finds the signature.
			nodes, _, err := ocicopy.Walk(ctx, dst, arm.Digest, true)
			if err != nil {
				t.Fatal(err)
			}
			var found []string
			for _, n := range nodes {
				found = append(found, n.Descriptor.Digest.String())
			}
			if !strings.Contains(strings.Join(found, " "), sbomSig.Digest.String()) {
				t.Fatalf("the destination lists no signature of the SBOM of %s: %v", arm.Digest, found)
			}
			res, err = ocicopy.Copy(ctx, src, dst, idx.Digest, ocicopy.Options{})
			if err != nil || res.BytesTransferred != 0 {
				t.Fatalf("re-sync: %+v, %v; want nothing sent", res, err)
			}

			// Back from the destination to a fresh layout: the same digests.
			back := open(t, "oci:"+t.TempDir(), "again", ocicopy.Credentials{})
			if _, err := ocicopy.Copy(ctx, dst, back, idx.Digest, ocicopy.Options{}); err != nil {
				t.Fatal(err)
			}
			assertSame(t, src, back, idx.Digest)
		})
	}
}

func TestInterruptedCopyResumes(t *testing.T) {
	ctx := context.Background()
	srcReg, dstReg := registries(t)
	proxy := ocitest.StartProxy(t, dstReg.Host)
	src := open(t, srcReg.URL(), "acme/big", srcCreds)
	dst := open(t, "http://"+proxy.Host, "install/big", dstCreds)
	sizes := []int64{2 << 20, 2 << 20, 2 << 20, 2 << 20, 2 << 20, 2 << 20}
	img, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 30, Layers: sizes})
	if err != nil {
		t.Fatal(err)
	}

	// The first copy is cancelled once two blobs are complete, with more
	// in flight.
	cctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	done := map[digest.Digest]int64{}
	opts := ocicopy.Options{Concurrency: 2, Progress: func(e ocicopy.Event) {
		if !e.Done || e.Manifest {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		done[e.Descriptor.Digest] = e.Descriptor.Size
		if len(done) == 2 {
			cancel()
		}
	}}
	p, err := ocicopy.PlanCopy(cctx, src, dst, img.Digest, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Apply(cctx, opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled copy: err %v, want context.Canceled", err)
	}
	if ok, _ := dst.Exists(ctx, p.Root); ok {
		t.Fatal("the interrupted copy pushed the manifest")
	}
	mu.Lock()
	completed := len(done)
	mu.Unlock()
	if completed < 2 || completed == len(sizes)+1 {
		t.Fatalf("%d blobs completed before the cancel took effect; the test needs some but not all", completed)
	}

	// Again: the completed blobs are not sent again, the rest are.
	p, err = ocicopy.PlanCopy(ctx, src, dst, img.Digest, ocicopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var rest int64
	present := 0
	for _, n := range p.Nodes {
		if _, ok := done[n.Descriptor.Digest]; ok && !n.Present {
			t.Fatalf("blob %s completed in the first copy but the plan says it is missing", n.Descriptor.Digest)
		}
		switch {
		case !n.Present && !n.Manifest:
			rest += n.Descriptor.Size
		case n.Present && !n.Manifest:
			// A blob may also have completed at the registry while its
			// response was cut by the cancel.
			present++
		}
	}
	res, err := p.Apply(ctx, ocicopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.BlobBytes != rest || res.BlobsSkipped != present || present < completed {
		t.Fatalf("resumed copy sent %d blob bytes and skipped %d blobs; want %d bytes (the blobs not completed) and %d skipped (at least the %d completed)", res.BlobBytes, res.BlobsSkipped, rest, present, completed)
	}
	for d, size := range done {
		if n := proxy.Puts(d.String()); n != 1 {
			t.Errorf("completed blob %s was uploaded %d times, want once", d, n)
		}
		if n := proxy.Uploaded(d.String()); n != size {
			t.Errorf("completed blob %s: %d bytes uploaded over both copies, want %d", d, n, size)
		}
	}
	assertSame(t, src, dst, img.Digest)
}

// A copying process killed with SIGKILL mid-copy: the next copy sends
// only what had not completed, and no completed blob twice.
func TestKilledCopyResumes(t *testing.T) {
	ctx := context.Background()
	srcReg, dstReg := registries(t)
	proxy := ocitest.StartProxy(t, dstReg.Host)
	proxy.SetUploadRate(16 << 20)
	src := open(t, srcReg.URL(), "acme/big", srcCreds)
	dst := open(t, dstReg.URL(), "install/big", dstCreds)
	img, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 70, Layers: []int64{4 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20, 4 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	nodes, _, err := ocicopy.Walk(ctx, src, img.Digest, false)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(self, "-test.run=^$")
	child.Env = append(os.Environ(), "OCICOPY_TEST_CHILD=copy",
		"OCICOPY_TEST_SRC="+srcReg.URL()+" acme/big",
		"OCICOPY_TEST_DST=http://"+proxy.Host+" install/big",
		"OCICOPY_TEST_DIGEST="+img.Digest.String())
	var out strings.Builder
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once two blobs are at the destination.
	deadline := time.Now().Add(30 * time.Second)
	for {
		present := 0
		for _, n := range nodes {
			if ok, _ := dst.Exists(ctx, n.Descriptor); ok && !n.Manifest {
				present++
			}
		}
		if present >= 2 {
			break
		}
		if time.Now().After(deadline) {
			child.Process.Kill()
			child.Wait()
			t.Fatalf("no two blobs at the destination after 30s; the child said:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	child.Process.Kill()
	if err := child.Wait(); err == nil {
		t.Fatalf("the copy finished before it was killed; the test needs it cut short")
	}

	// The resumed copy goes through the proxy too, so it counts every
	// upload of both.
	viaProxy := open(t, "http://"+proxy.Host, "install/big", dstCreds)
	p, err := ocicopy.PlanCopy(ctx, src, viaProxy, img.Digest, ocicopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var done []ocicopy.Node
	var rest int64
	for _, n := range p.Nodes {
		switch {
		case n.Manifest && n.Present:
			t.Fatal("the killed copy pushed the manifest")
		case n.Present:
			done = append(done, n)
		case !n.Manifest:
			rest += n.Descriptor.Size
		}
	}
	if len(done) < 2 || rest == 0 {
		t.Fatalf("%d blobs done and %d bytes left when killed; the test needs both", len(done), rest)
	}
	res, err := p.Apply(ctx, ocicopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.BlobBytes != rest {
		t.Fatalf("the resumed copy sent %d blob bytes, want %d (only what the killed one had not completed)", res.BlobBytes, rest)
	}
	for _, n := range done {
		if c := proxy.Puts(n.Descriptor.Digest.String()); c != 1 {
			t.Errorf("blob %s, complete when the copy was killed, was uploaded %d times over both copies (want once)", n.Descriptor.Digest, c)
		}
	}
	assertSame(t, src, dst, img.Digest)
}

// treeFiles lists a directory tree's files with their sizes.
func treeFiles(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			info, _ := d.Info()
			out = append(out, fmt.Sprint(strings.TrimPrefix(path, dir), " ", info.Size()))
		}
		return nil
	})
	return strings.Join(out, "\n")
}

func TestSourceOutage(t *testing.T) {
	ctx := context.Background()
	srcReg, dstReg := registries(t)
	src := open(t, srcReg.URL(), "acme/api", srcCreds)
	dst := open(t, dstReg.URL(), "install/api", dstCreds)
	old, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 40, Layers: []int64{1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ocicopy.Copy(ctx, src, dst, old.Digest, ocicopy.Options{}); err != nil {
		t.Fatal(err)
	}
	img, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 41, Layers: []int64{2 << 20, 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	before := treeFiles(t, filepath.Join(dstReg.Dir, "storage"))

	srcReg.Stop()
	_, err = ocicopy.Copy(ctx, src, dst, img.Digest, ocicopy.Options{})
	var ue *ocicopy.UnreachableError
	if !errors.As(err, &ue) || ue.Side != ocicopy.Source || ue.Registry != srcReg.Host {
		t.Fatalf("copy from a stopped registry: %v; want an UnreachableError of the source %s", err, srcReg.Host)
	}
	if !strings.Contains(err.Error(), "source registry "+srcReg.Host+" is unreachable") {
		t.Fatalf("error %q does not say the source is unreachable", err)
	}
	if after := treeFiles(t, filepath.Join(dstReg.Dir, "storage")); after != before {
		t.Fatalf("the destination's storage changed during a source outage:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// What ran before is still there, whole.
	if _, _, err := ocicopy.Walk(ctx, dst, old.Digest, false); err != nil {
		t.Fatalf("the image copied before the outage: %v", err)
	}

	srcReg.Start()
	res, err := ocicopy.Copy(ctx, src, dst, img.Digest, ocicopy.Options{})
	if err != nil {
		t.Fatalf("copy after the source is back: %v", err)
	}
	if res.Root.Digest != img.Digest {
		t.Fatalf("copied %s, want %s", res.Root.Digest, img.Digest)
	}
	assertSame(t, src, dst, img.Digest)
}

func TestSourceFailsMidCopy(t *testing.T) {
	ctx := context.Background()
	srcReg, dstReg := registries(t)
	proxy := ocitest.StartProxy(t, srcReg.Host)
	src := open(t, "http://"+proxy.Host, "acme/api", srcCreds)
	dst := open(t, dstReg.URL(), "install/api", dstCreds)
	img, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 50, Layers: []int64{4 << 20, 4 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := ocicopy.PlanCopy(ctx, src, dst, img.Digest, ocicopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The source dies after the plan, half way through a blob: the
	// connection is cut.
	proxy.SetTamper(func(_ string, body io.Reader) io.Reader {
		return io.MultiReader(io.LimitReader(body, 1<<20), errReader{io.ErrUnexpectedEOF})
	})
	_, err = p.Apply(ctx, ocicopy.Options{})
	var ue *ocicopy.UnreachableError
	if !errors.As(err, &ue) || ue.Side != ocicopy.Source {
		t.Fatalf("copy with the source cut mid-blob: %v; want an UnreachableError of the source", err)
	}
	if ok, _ := dst.Exists(ctx, img); ok {
		t.Fatal("the manifest reached the destination although its blobs did not")
	}
	proxy.SetTamper(nil)
	if _, err := ocicopy.Copy(ctx, src, dst, img.Digest, ocicopy.Options{}); err != nil {
		t.Fatal(err)
	}
	assertSame(t, src, dst, img.Digest)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestTamperedBlobRefused(t *testing.T) {
	ctx := context.Background()
	srcReg, dstReg := registries(t)
	proxy := ocitest.StartProxy(t, srcReg.Host)
	src := open(t, "http://"+proxy.Host, "acme/api", srcCreds)
	img, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 60, Layers: []int64{1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	// The source serves every blob with its last byte changed.
	proxy.SetTamper(func(_ string, body io.Reader) io.Reader { return &flipLast{r: body} })
	for _, tc := range []struct {
		name, loc string
		local     bool
	}{
		// By default the destination's own check refuses the blob.
		{"registry", dstReg.URL(), false}, {"layout", "oci:" + t.TempDir(), false},
		// With LocalVerify, the copy's does first.
		{"registry-local", dstReg.URL(), true}, {"layout-local", "oci:" + t.TempDir(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := open(t, tc.loc, "install/"+tc.name, dstCreds)
			_, err := ocicopy.Copy(ctx, src, dst, img.Digest, ocicopy.Options{LocalVerify: tc.local})
			if !errors.Is(err, ocicopy.ErrDigestMismatch) {
				t.Fatalf("copy of tampered blobs: %v; want ErrDigestMismatch", err)
			}
			nodes, _, werr := ocicopy.Walk(ctx, src, img.Digest, false)
			if werr != nil {
				t.Fatal(werr)
			}
			for _, n := range nodes {
				if ok, _ := dst.Exists(ctx, n.Descriptor); ok && !n.Manifest && n.Descriptor.Size > 1000 {
					t.Fatalf("the tampered blob %s reached the destination", n.Descriptor.Digest)
				}
				if ok, _ := dst.Exists(ctx, n.Descriptor); ok && n.Manifest {
					t.Fatalf("manifest %s reached the destination", n.Descriptor.Digest)
				}
			}
		})
	}
}

// flipLast changes the last byte a reader gives.
type flipLast struct {
	r    io.Reader
	held []byte
}

func (f *flipLast) Read(b []byte) (int, error) {
	if len(b) < 2 {
		b = make([]byte, 2)[:len(b)]
	}
	// Read at most len(b)-len(held) bytes, so held plus them fit in b.
	buf := make([]byte, len(b)-len(f.held))
	n, err := f.r.Read(buf)
	data := append(f.held, buf[:n]...)
	f.held = nil
	if err == io.EOF {
		if len(data) > 0 {
			data[len(data)-1] ^= 0xff
		}
		return copy(b, data), io.EOF
	}
	if len(data) == 0 {
		return 0, err
	}
	f.held = []byte{data[len(data)-1]}
	return copy(b, data[:len(data)-1]), err
}
