// Package bundlefile reads and writes byoc's signed tar files: the
// offline bundle (byoc bundle create, agentd bundle import) and its
// results file (agentd bundle export-results, byoc bundle
// import-results).
//
// A file is an uncompressed tar whose first entry is manifest.json (every
// other file's path, size and SHA-256, and what the file is for), whose
// second is manifest.sig (who signed the manifest's bytes, and the
// signature), and then every file the manifest lists, in its order.
// Read checks the signature before it reads anything else, then each
// file's size and digest while it streams it into a new directory of
// its own; any failure removes that directory and names the file, so a
// caller that acts only on Read's success acts on nothing tampered with.
// Layers are never held in memory: a file is hashed as it is copied.
package bundlefile

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Entry names of the manifest and its signature.
const (
	ManifestName  = "manifest.json"
	SignatureName = "manifest.sig"
)

// Format is the manifest format version this package writes and reads.
const Format = 1

// Kinds of files.
const (
	KindBundle  = "bundle"
	KindResults = "results"
)

// Manifest describes a file.
type Manifest struct {
	Format int    `json:"format"`
	Kind   string `json:"kind"`
	// ID names the bundle (bdl_…) a bundle or a results file is of.
	ID           string    `json:"id"`
	InstallID    string    `json:"install_id"`
	AgentID      string    `json:"agent_id"`
	App          string    `json:"app,omitempty"`
	Install      string    `json:"install,omitempty"`
	Revision     int64     `json:"revision,omitempty"`
	WorkflowKind string    `json:"workflow_kind,omitempty"`
	Created      time.Time `json:"created"`
	// JournalSeq and JournalHash are, in a bundle, the agent's audit
	// journal head imsd imported last (none: 0, ""): the results file
	// carries the journal records after it only.
	JournalSeq  int64  `json:"journal_seq,omitempty"`
	JournalHash string `json:"journal_hash,omitempty"`
	// AgentRelease is the agent release a bundle carries (byoc bundle
	// create --agent-release), if any: the agent verifies its own
	// signature, loads it into the install registry and checks it
	// against the customer's update policy.
	AgentRelease *Release `json:"agent_release,omitempty"`
	// PluginReleases are the plugin releases it carries (byoc bundle
	// create --plugin-release): verified and loaded likewise, for the
	// customer to install and pin (agentd plugin install).
	PluginReleases []Release `json:"plugin_releases,omitempty"`
	Files          []File    `json:"files"`
}

// Release is an agent or plugin release in a bundle's layout: repository
// Repository (of the layout, and of the install registry it is loaded
// into), manifest Digest, its Type (agent, or the plugin's component
// type) and Version.
type Release struct {
	Type       string `json:"type"`
	Repository string `json:"repository"`
	Digest     string `json:"digest"`
	Version    string `json:"version"`
}

// File is one file of the tar, by its slash-separated relative path.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Signature is manifest.sig: the signer's key id and its Ed25519
// signature over the manifest's bytes (with the context string of its
// kind: agentproto.SignBundleManifest, SignBundleResults).
type Signature struct {
	KeyID     string `json:"key_id"`
	Signature []byte `json:"signature"`
}

// Scan lists every regular file under dir with its size and SHA-256, by
// path. A symbolic link or special file is an error naming it.
func Scan(dir string) ([]File, error) {
	var out []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", rel)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		out = append(out, File{Path: filepath.ToSlash(rel), Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
		return nil
	})
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return out, err
}

// WriteFile writes the tar Write makes to the file out (created with
// perm, before the umask), whole or not at all: it is written to
// out.partial, synced and renamed into place; on an error nothing is
// left at out.partial and out is as it was.
func WriteFile(out string, perm os.FileMode, dir string, manifest []byte, sig Signature) error {
	tmp := out + ".partial"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = Write(w, dir, manifest, sig)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// Write writes the tar of dir's files as manifest lists them, with
// manifest (its bytes exactly as signed) and sig first. A file that
// changed since it was scanned is an error naming it.
func Write(w io.Writer, dir string, manifest []byte, sig Signature) error {
	var m Manifest
	if err := json.Unmarshal(manifest, &m); err != nil {
		return fmt.Errorf("%s: %w", ManifestName, err)
	}
	sigb, err := json.Marshal(sig)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, e := range []struct {
		name string
		b    []byte
	}{{ManifestName, manifest}, {SignatureName, sigb}} {
		if err := tw.WriteHeader(header(e.name, int64(len(e.b)))); err != nil {
			return err
		}
		if _, err := tw.Write(e.b); err != nil {
			return err
		}
	}
	for _, f := range m.Files {
		if err := writeFile(tw, dir, f); err != nil {
			return err
		}
	}
	return tw.Close()
}

func header(name string, size int64) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, Format: tar.FormatPAX}
}

func writeFile(tw *tar.Writer, dir string, f File) error {
	fh, err := os.Open(filepath.Join(dir, filepath.FromSlash(f.Path)))
	if err != nil {
		return err
	}
	defer fh.Close()
	if err := tw.WriteHeader(header(f.Path, f.Size)); err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tw, h), io.LimitReader(fh, f.Size))
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	if n != f.Size || hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
		return fmt.Errorf("%s changed while the file was written", f.Path)
	}
	return nil
}

// maxSmall bounds the manifest and its signature.
const maxSmall = 16 << 20

// A VerifyFunc checks the manifest's signature; it is given the
// manifest's bytes, decoded, and its signature.
type VerifyFunc func(raw []byte, m *Manifest, sig Signature) error

// Error is why Read refused a file: Part names the entry (the manifest,
// its signature or a file's path).
type Error struct {
	Part string
	Err  error
}

func (e *Error) Error() string { return e.Part + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ErrTampered is wrapped by every refusal of content that does not match
// the signed manifest.
var ErrTampered = errors.New("does not match the signed manifest")

// Read reads a tar from r into dest, a directory Read creates (it must
// not exist): the manifest's signature is checked by verify before any
// file is read, and every file's size and digest as it is copied. On any
// error dest is removed, and the error (an *Error) names what failed.
func Read(r io.Reader, dest string, verify VerifyFunc) (*Manifest, []byte, error) {
	m, raw, err := read(r, dest, verify, nil, nil)
	if err != nil {
		os.RemoveAll(dest)
		return nil, nil, err
	}
	return m, raw, nil
}

// Bundle is a tar opened by Open: its small files unpacked into Dir, the
// others (those Open was told to stream) served from their byte ranges
// in the tar by OpenFile.
type Bundle struct {
	Manifest *Manifest
	// Raw is the manifest's bytes, as signed.
	Raw []byte
	// Dir holds the unpacked files.
	Dir string

	f      *os.File
	ranges map[string]fileRange
}

// fileRange is where a streamed file's bytes are in the tar.
type fileRange struct {
	File
	off int64
}

// Open reads the tar in f as Read does, except that the files stream
// accepts are not unpacked, nor read: the manifest's signature is
// checked by verify first, then every entry's name, type and size
// against the manifest; unpacked files are hashed as they are written
// into dest (which Open creates, and removes on any error), and streamed
// ones are skipped over (f is seeked, not read) and recorded by offset.
// Their content is checked against the manifest as OpenFile's reader
// reads it. f must stay open while the Bundle is used.
func Open(f *os.File, dest string, verify VerifyFunc, stream func(File) bool) (*Bundle, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, &Error{"tar", err}
	}
	ranges := map[string]fileRange{}
	pos := func() (int64, error) { return f.Seek(0, io.SeekCurrent) }
	m, raw, err := read(f, dest, verify, func(fl File) bool { return stream != nil && stream(fl) }, func(fl File) error {
		off, err := pos()
		if err != nil {
			return &Error{fl.Path, err}
		}
		ranges[fl.Path] = fileRange{fl, off}
		return nil
	})
	if err != nil {
		os.RemoveAll(dest)
		return nil, err
	}
	return &Bundle{Manifest: m, Raw: raw, Dir: dest, f: f, ranges: ranges}, nil
}

// Streamed reports whether the file at path (as the manifest names it)
// is served from the tar rather than unpacked into Dir.
func (b *Bundle) Streamed(path string) bool {
	_, ok := b.ranges[path]
	return ok
}

// StreamedBytes is the size of the files served from the tar.
func (b *Bundle) StreamedBytes() int64 {
	var n int64
	for _, r := range b.ranges {
		n += r.Size
	}
	return n
}

// OpenFile reads a streamed file from its range in the tar, hashing it
// as it goes: the last bytes are withheld, and the read fails with an
// *Error naming the file and wrapping ErrTampered, unless the whole
// content matches the manifest's SHA-256. So a reader that sends what it
// reads on never sends a whole file that does not match. A path not
// streamed is an error wrapping fs.ErrNotExist.
func (b *Bundle) OpenFile(path string) (io.ReadCloser, error) {
	r, ok := b.ranges[path]
	if !ok {
		return nil, &Error{path, fmt.Errorf("not streamed from the bundle: %w", fs.ErrNotExist)}
	}
	rr := &rangeReader{f: r.File, h: sha256.New()}
	if d := directOpen(b.f); d != nil {
		rr.r = &directReader{f: d, fallback: b.f, pos: r.off, end: r.off + r.Size}
	} else {
		rr.r = io.NewSectionReader(b.f, r.off, r.Size)
	}
	return rr, nil
}

// rangeReader is a streamed file's reader (Bundle.OpenFile).
type rangeReader struct {
	r   io.Reader // directReader, or a SectionReader of the tar
	f   File
	h   hash.Hash
	n   int64
	err error
}

func (r *rangeReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.r.Read(p)
	r.h.Write(p[:n])
	r.n += int64(n)
	if r.n == r.f.Size {
		if got := hex.EncodeToString(r.h.Sum(nil)); got != r.f.SHA256 {
			r.err = &Error{r.f.Path, fmt.Errorf("sha256 %s where the manifest says %s: %w", got, r.f.SHA256, ErrTampered)}
			return 0, r.err
		}
		r.err = io.EOF
		return n, io.EOF
	}
	if err == io.EOF {
		// The file shrank under us since Open.
		r.err = &Error{r.f.Path, fmt.Errorf("%d bytes where the manifest says %d: %w", r.n, r.f.Size, ErrTampered)}
		return 0, r.err
	}
	if err != nil {
		r.err = &Error{r.f.Path, err}
		return n, r.err
	}
	return n, nil
}

func (r *rangeReader) Close() error {
	if d, ok := r.r.(*directReader); ok {
		d.Close()
	}
	return nil
}

// read reads the tar (see Read); a file skip accepts is not unpacked but
// handed to skipped right after its header, with r positioned at its
// first byte, and then passed over by the tar reader (which seeks when r
// is an io.Seeker).
func read(r io.Reader, dest string, verify VerifyFunc, skip func(File) bool, skipped func(File) error) (*Manifest, []byte, error) {
	tr := tar.NewReader(r)
	small := func(want string) ([]byte, error) {
		h, err := tr.Next()
		if err != nil {
			return nil, &Error{want, fmt.Errorf("missing: %w (not a byoc bundle file?)", err)}
		}
		if h.Name != want {
			return nil, &Error{want, fmt.Errorf("entry %q comes where %s must (not a byoc bundle file?)", h.Name, want)}
		}
		if h.Size > maxSmall {
			return nil, &Error{want, fmt.Errorf("%d bytes, more than %d", h.Size, maxSmall)}
		}
		return io.ReadAll(tr)
	}
	raw, err := small(ManifestName)
	if err != nil {
		return nil, nil, err
	}
	sigb, err := small(SignatureName)
	if err != nil {
		return nil, nil, err
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, &Error{ManifestName, err}
	}
	if m.Format != Format {
		return nil, nil, &Error{ManifestName, fmt.Errorf("format %d: this program reads format %d", m.Format, Format)}
	}
	var sig Signature
	if err := json.Unmarshal(sigb, &sig); err != nil {
		return nil, nil, &Error{SignatureName, err}
	}
	if err := verify(raw, &m, sig); err != nil {
		return nil, nil, &Error{SignatureName, err}
	}
	want := make(map[string]File, len(m.Files))
	for _, f := range m.Files {
		if !validPath(f.Path) {
			return nil, nil, &Error{ManifestName, fmt.Errorf("file path %q is not a clean relative path", f.Path)}
		}
		want[f.Path] = f
	}
	if err := os.Mkdir(dest, 0o700); err != nil {
		return nil, nil, &Error{dest, err}
	}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, &Error{"tar", err}
		}
		f, ok := want[h.Name]
		if !ok {
			return nil, nil, &Error{h.Name, fmt.Errorf("not listed in the manifest, or listed once and found twice: %w", ErrTampered)}
		}
		delete(want, h.Name)
		if h.Typeflag != tar.TypeReg {
			return nil, nil, &Error{h.Name, fmt.Errorf("not a regular file: %w", ErrTampered)}
		}
		if h.Size != f.Size {
			return nil, nil, &Error{h.Name, fmt.Errorf("%d bytes where the manifest says %d: %w", h.Size, f.Size, ErrTampered)}
		}
		if skip != nil && skip(f) {
			if err := skipped(f); err != nil {
				return nil, nil, err
			}
			continue
		}
		if err := extract(tr, dest, f); err != nil {
			return nil, nil, err
		}
	}
	if len(want) > 0 {
		missing := make([]string, 0, len(want))
		for p := range want {
			missing = append(missing, p)
		}
		slices.Sort(missing)
		return nil, nil, &Error{missing[0], fmt.Errorf("listed in the manifest but missing from the file (%d missing): %w", len(missing), ErrTampered)}
	}
	return &m, raw, nil
}

func extract(r io.Reader, dest string, f File) error {
	p := filepath.Join(dest, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return &Error{f.Path, err}
	}
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return &Error{f.Path, err}
	}
	h := sha256.New()
	bp := copyBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(io.MultiWriter(out, h), struct{ io.Reader }{r}, *bp)
	copyBufs.Put(bp)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &Error{f.Path, err}
	}
	if n != f.Size {
		return &Error{f.Path, fmt.Errorf("%d bytes where the manifest says %d: %w", n, f.Size, ErrTampered)}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return &Error{f.Path, fmt.Errorf("sha256 %s where the manifest says %s: %w", got, f.SHA256, ErrTampered)}
	}
	return nil
}

// copyBufs holds the buffers files are copied through: large reads and
// writes, one buffer per file at a time.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// validPath reports whether p is a clean relative slash path inside its
// root, of no reserved name.
func validPath(p string) bool {
	return p != "" && p != ManifestName && p != SignatureName && !strings.HasPrefix(p, "/") && path.Clean(p) == p &&
		p != "." && p != ".." && !strings.HasPrefix(p, "../") && !strings.Contains(p, "\\")
}
