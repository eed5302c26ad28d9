package bundlefile

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"golang.org/x/sys/unix"
)

// directFile writes n random bytes to a file in dir and opens it.
func directFile(t *testing.T, dir string, n int) (*os.File, []byte) {
	t.Helper()
	data := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	p := filepath.Join(dir, "tar")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, data
}

// directFixture writes n random bytes to a file in a temporary
// directory, opens it, and opens it for direct I/O (df); it skips t
// where direct I/O is refused.
func directFixture(t *testing.T, n int) (f, df *os.File, data []byte) {
	t.Helper()
	f, data = directFile(t, t.TempDir(), n)
	if df = directOpen(f); df == nil {
		t.Skip("no direct I/O here")
	}
	return f, df, data
}

// hookPread has direct reads go through pread (which may call
// preadDirect for the real read) until t ends.
func hookPread(t *testing.T, pread func(f *os.File, buf []byte, off int64) (int, error)) {
	directPread = pread
	t.Cleanup(func() { directPread = preadDirect })
}

// directSupported reports whether dir's file system takes O_DIRECT.
func directSupported(t *testing.T, dir string) bool {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECT|unix.O_TMPFILE, 0o600)
	if err != nil {
		fd, err = unix.Open(filepath.Join(dir, "tar"), unix.O_RDONLY|unix.O_DIRECT, 0)
		if err != nil {
			return false
		}
	}
	unix.Close(fd)
	return true
}

// TestDirectReaderRanges reads ranges at every kind of offset and length
// (unaligned, across blocks, to the file's end) with reads of every size,
// and compares with the file's bytes.
func TestDirectReaderRanges(t *testing.T) {
	dir := t.TempDir()
	const size = 3*directBlock + 12345
	f, data := directFile(t, dir, size)
	if directOpen(f) == nil {
		if os.Getenv("CI") == "true" && directSupported(t, dir) {
			t.Fatal("direct I/O refused where the file system takes it")
		}
		t.Skip("no direct I/O here")
	}
	ranges := [][2]int64{
		{0, size},
		{0, 1},
		{1, 4095},
		{4095, 2},
		{4096, directBlock},
		{513, directBlock + 1},
		{directBlock - 7, 14},
		{3*directBlock + 1, 12344},
		{size - 1, 1},
		{2*directBlock + 4096*3 + 17, size - (2*directBlock + 4096*3 + 17)},
	}
	for _, rg := range ranges {
		for _, chunk := range []int{1, 4095, 4097, 300 << 10, 2 << 20} {
			d := &directReader{f: directOpen(f), fallback: f, pos: rg[0], end: rg[0] + rg[1]}
			got, err := io.ReadAll(io.LimitReader(struct{ io.Reader }{readChunks{d, chunk}}, rg[1]+10))
			if err != nil {
				t.Fatalf("range %v, reads of %d: %v", rg, chunk, err)
			}
			if !bytes.Equal(got, data[rg[0]:rg[0]+rg[1]]) {
				t.Fatalf("range %v, reads of %d: %d bytes, not the file's", rg, chunk, len(got))
			}
			if d.f != nil || d.raw != nil {
				t.Fatalf("range %v: descriptor or buffer kept after the end", rg)
			}
		}
	}
	// io.ReadAll through iotest's checks of the io.Reader contract.
	d := &directReader{f: directOpen(f), fallback: f, pos: 100, end: 100 + 2*directBlock}
	if err := iotest.TestReader(d, data[100:100+2*directBlock]); err != nil {
		t.Fatal(err)
	}
}

// readChunks reads at most n bytes a call.
type readChunks struct {
	r io.Reader
	n int
}

func (c readChunks) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// TestDirectReaderFallsBack: a direct read refused (EINVAL) midway
// carries on through the page cache from the same byte.
func TestDirectReaderFallsBack(t *testing.T) {
	f, df, data := directFixture(t, 3*directBlock)
	calls := 0
	hookPread(t, func(f *os.File, buf []byte, off int64) (int, error) {
		calls++
		if calls > 1 {
			return 0, &os.PathError{Op: "read", Path: f.Name(), Err: unix.EINVAL}
		}
		return preadDirect(f, buf, off)
	})
	d := &directReader{f: df, fallback: f, pos: 5, end: 3*directBlock - 5}
	got, err := io.ReadAll(d)
	if err != nil || !bytes.Equal(got, data[5:3*directBlock-5]) {
		t.Fatalf("after the fallback: %v, %d bytes", err, len(got))
	}
	if calls != 2 {
		t.Fatalf("%d direct reads, want 2 (one, then the refused one)", calls)
	}
}

// TestDirectReaderFileShrank: the tar cut short after Open ends the
// range early with io.EOF (OpenFile's reader names it tampered).
func TestDirectReaderFileShrank(t *testing.T) {
	f, df, _ := directFixture(t, 2*directBlock)
	if err := os.Truncate(f.Name(), directBlock+100); err != nil {
		t.Fatal(err)
	}
	d := &directReader{f: df, fallback: f, pos: 0, end: 2 * directBlock}
	got, err := io.ReadAll(d)
	if err != nil || len(got) != directBlock+100 {
		t.Fatalf("shrunk file: %v after %d bytes", err, len(got))
	}
}

// TestDirectReaderReadsAhead: while a block is consumed, the next one is
// read in the background (a direct read gets no read-ahead from the
// kernel), and every block is read once.
func TestDirectReaderReadsAhead(t *testing.T) {
	f, df, data := directFixture(t, 3*directBlock+100)
	var mu sync.Mutex
	var offs []int64
	read := make(chan int64, 8)
	hookPread(t, func(f *os.File, buf []byte, off int64) (int, error) {
		mu.Lock()
		offs = append(offs, off)
		mu.Unlock()
		n, err := preadDirect(f, buf, off)
		read <- off
		return n, err
	})
	d := &directReader{f: df, fallback: f, pos: 10, end: 3*directBlock + 50}
	one := make([]byte, 1)
	if _, err := d.Read(one); err != nil || one[0] != data[10] {
		t.Fatalf("first byte: %v", err)
	}
	// The first block was read for the call; the second is read without
	// another call.
	for _, want := range []int64{0, directBlock} {
		select {
		case off := <-read:
			if off != want {
				t.Fatalf("read at %d, want %d", off, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the block at %d was not read ahead", want)
		}
	}
	rest, err := io.ReadAll(d)
	if err != nil || !bytes.Equal(rest, data[11:3*directBlock+50]) {
		t.Fatalf("the rest: %v, %d bytes", err, len(rest))
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int64{0, directBlock, 2 * directBlock, 3 * directBlock}; !slices.Equal(offs, want) {
		t.Fatalf("blocks read at %v, want each once: %v", offs, want)
	}
	if d.f != nil || d.raw != nil || d.next != nil {
		t.Fatal("descriptor or buffers kept after the end")
	}
}

// TestDirectReaderCloseWaitsForReadAhead: Close does not close the
// descriptor (or pool the buffer) under a read still running.
func TestDirectReaderCloseWaitsForReadAhead(t *testing.T) {
	f, df, _ := directFixture(t, 3*directBlock)
	release := make(chan struct{})
	blocked := make(chan struct{})
	var lateErr error
	calls := 0
	hookPread(t, func(f *os.File, buf []byte, off int64) (int, error) {
		calls++
		if calls == 1 {
			return preadDirect(f, buf, off)
		}
		close(blocked)
		<-release
		n, err := preadDirect(f, buf, off)
		lateErr = err
		return n, err
	})
	d := &directReader{f: df, fallback: f, pos: 0, end: 3 * directBlock}
	if _, err := d.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	<-blocked
	closed := make(chan struct{})
	go func() { d.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a read ahead was still running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	if lateErr != nil {
		t.Fatalf("the read ahead ran on a closed descriptor: %v", lateErr)
	}
}
