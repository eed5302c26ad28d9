package bundlefile

import (
	"io"
	"os"
	"sync"
	"unsafe"
)

// A streamed file is read from the tar once, in order, and sent on: the
// page cache gains nothing from holding it, and filling it costs more
// CPU than anything else in an import (a 2 GB read of an uncached tar
// took 3.5 s of system time through the page cache and 0.14 s with
// O_DIRECT on this project's machine; docs/performance-bundles.md).
// Where the system and the tar's file system allow it (directOpen), the
// range is read with direct I/O in aligned blocks of directBlock bytes;
// otherwise, or when a direct read is refused, through the page cache.

const (
	// directAlign is the alignment direct I/O needs of the file offset,
	// the length and the buffer's address (the logical block size is
	// at most this on the disks agentd runs on).
	directAlign = 4096
	// directBlock is each direct read's length.
	directBlock = 1 << 20
)

// directPread is preadDirect; tests make it fail.
var directPread = preadDirect

// directBufs pools the aligned buffers (directBlock bytes, plus room to
// align them).
var directBufs = sync.Pool{New: func() any { b := make([]byte, directBlock+directAlign); return &b }}

// alignedBlock returns an aligned directBlock-byte slice of *raw.
func alignedBlock(raw *[]byte) []byte {
	b := *raw
	off := 0
	if r := addrMod(b, directAlign); r != 0 {
		off = directAlign - r
	}
	return b[off : off+directBlock]
}

// directReader reads [pos, end) of a file opened for direct I/O through
// an aligned buffer; on a refused read (EINVAL: the file system takes no
// direct I/O after all) it carries on from the same offset through
// fallback, the tar as Open was given it.
type directReader struct {
	f        *os.File // opened for direct I/O; nil once fallen back or closed
	fallback io.ReaderAt
	pos, end int64

	raw    *[]byte
	buf    []byte // aligned
	bufOff int64  // file offset of buf[0]
	bufN   int    // valid bytes in buf

	// next is the block after buf, being read while buf is consumed: a
	// direct read bypasses the kernel's read-ahead, so without it each
	// stream would wait for the disk once a block, with nothing of its
	// own to do meanwhile (docs/performance-bundles.md).
	next *readAhead
}

// readAhead is one block read in the background.
type readAhead struct {
	raw  *[]byte
	buf  []byte
	off  int64
	n    int
	err  error
	done chan struct{}
}

// startReadAhead reads the block at off into a pooled buffer, in the
// background.
func startReadAhead(f *os.File, off int64) *readAhead {
	ra := &readAhead{raw: directBufs.Get().(*[]byte), off: off, done: make(chan struct{})}
	ra.buf = alignedBlock(ra.raw)
	go func() {
		defer close(ra.done)
		ra.n, ra.err = directPread(f, ra.buf, off)
	}()
	return ra
}

// dropNext waits for the block being read ahead, if any, and returns its
// buffer to the pool.
func (d *directReader) dropNext() {
	if d.next != nil {
		<-d.next.done
		directBufs.Put(d.next.raw)
		d.next = nil
	}
}

func (d *directReader) Read(p []byte) (int, error) {
	if d.pos >= d.end {
		d.release()
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if d.f == nil {
		if d.fallback == nil {
			return 0, os.ErrClosed
		}
		// io.EOF before end: the file shrank since Open (the caller
		// says so).
		n, err := d.fallback.ReadAt(p[:min(int64(len(p)), d.end-d.pos)], d.pos)
		d.pos += int64(n)
		if err == io.EOF && n > 0 {
			err = nil
		}
		return n, err
	}
	if d.pos < d.bufOff || d.pos >= d.bufOff+int64(d.bufN) {
		aligned := d.pos &^ (directAlign - 1)
		var n int
		var err error
		if ra := d.next; ra != nil && ra.off == aligned {
			<-ra.done
			d.next = nil
			if d.raw != nil {
				directBufs.Put(d.raw)
			}
			d.raw, d.buf = ra.raw, ra.buf
			n, err = ra.n, ra.err
		} else {
			d.dropNext()
			if d.buf == nil {
				d.raw = directBufs.Get().(*[]byte)
				d.buf = alignedBlock(d.raw)
			}
			n, err = directPread(d.f, d.buf, aligned)
		}
		if err != nil {
			d.bufN = 0 // buf holds nothing now
			if isInvalid(err) {
				// Direct I/O refused on this file: carry on through the
				// page cache.
				d.release()
				return d.Read(p)
			}
			return 0, err
		}
		d.bufOff, d.bufN = aligned, n
		if d.pos >= d.bufOff+int64(d.bufN) {
			// The file ends before the range does (it shrank since Open).
			d.release()
			d.fallback = nil
			return 0, io.EOF
		}
		if n == directBlock && aligned+directBlock < d.end {
			d.next = startReadAhead(d.f, aligned+directBlock)
		}
	}
	from := int(d.pos - d.bufOff)
	n := copy(p, d.buf[from:min(int64(d.bufN), d.end-d.bufOff)])
	d.pos += int64(n)
	return n, nil
}

// release closes the direct descriptor and returns the buffer.
func (d *directReader) release() {
	d.dropNext()
	if d.f != nil {
		d.f.Close()
		d.f = nil
	}
	if d.raw != nil {
		directBufs.Put(d.raw)
		d.raw, d.buf, d.bufN = nil, nil, 0
	}
}

func (d *directReader) Close() error {
	d.release()
	d.fallback = nil
	return nil
}

// addrMod is b's address modulo align.
func addrMod(b []byte, align int) int {
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % uintptr(align))
}
