// Package auditlog is the agent's side of the audit trail, in its state
// dir: its copy of its install's audit chain as imsd sends it
// (install.jsonl), checked link by link before a record is kept, and its
// own journal (agent.jsonl), a hash chain of what only the agent knows
// (assignments it refused, jobs it did not start). Both files are JSON
// Lines of internal/auditchain.Record, the format of `byoc audit export`,
// so one verifier reads all three.
//
// Files are appended and synced, never rewritten; a torn last line (a
// crash mid-append) is cut off when the agent opens the file again.
//
// A file may have more than one writer: the running agent, and a
// command of the customer's that records what it refused while the agent
// runs (agentd plugin install). Every append holds an exclusive lock of
// the file (flock) and first reads again the file's last record when the
// file grew since this Log's last append, so each record follows the
// one on disk before it, whoever wrote that.
package auditlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/byoc-dev/byoc/internal/atomicfile"
	"github.com/byoc-dev/byoc/internal/auditchain"
)

// File names in Dir.
const (
	InstallFile = "install.jsonl"
	AgentFile   = "agent.jsonl"
)

// Dir is where the files live under the agent's state dir.
func Dir(stateDir string) string { return filepath.Join(stateDir, "audit") }

// AgentChain names the agent's own journal's chain.
func AgentChain(agentID string) string { return "agent:" + agentID }

// ReadFile returns every complete record of a file, in file order; a
// missing file holds none. A torn last line (no newline) is left out. A
// line that is not a record is an error naming its line.
func ReadFile(path string) ([]auditchain.Record, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rs, _, err := parse(path, b)
	return rs, err
}

// parse reads records from b and returns how many bytes of b the complete
// lines take.
func parse(path string, b []byte) ([]auditchain.Record, int, error) {
	var out []auditchain.Record
	n := 0
	for line := 1; n < len(b); line++ {
		i := bytes.IndexByte(b[n:], '\n')
		if i < 0 {
			break // torn
		}
		var r auditchain.Record
		if err := json.Unmarshal(b[n:n+i], &r); err != nil {
			return nil, 0, fmt.Errorf("%s:%d: not an audit record: %w", path, line, err)
		}
		out = append(out, r)
		n += i + 1
	}
	return out, n, nil
}

// Log is one of the agent's audit files, open for appending. Its methods
// may be called from several goroutines.
type Log struct {
	mu    sync.Mutex
	path  string
	chain string
	f     *os.File
	head  *auditchain.Record
	// end is where the file's complete lines end as this Log last saw
	// it: its next record goes there, unless another writer appended
	// since (refreshLocked).
	end int64
	// seen indexes recent records by kind, subject and a data value
	// (Find); it is bounded by maxIndex.
	seen  map[findKey]int64
	order []findKey
	// broken, once set, refuses every append: the file could not be
	// written (a partial append may be on disk).
	broken error
}

type findKey struct{ kind, subject, key, value string }

// maxIndex bounds Find's index (the records of recent jobs).
const maxIndex = 10_000

// fsync syncs a file and syncDir a directory; tests replace them to see
// what Open makes durable.
var (
	fsync   = (*os.File).Sync
	syncDir = atomicfile.SyncDir
)

// Open opens (creating it, 0600, in a 0700 dir, both synced) the file at path for the
// records of chain. It reads only the file's end: its last complete
// record, the head new records follow, and a torn last line after it,
// which it cuts off (and syncs the cut). It does not verify the file (agentd audit verify
// does), so that a copy damaged long ago still takes new records and can
// be reported, and a long copy costs nothing at start.
func Open(path, chain string) (*Log, error) {
	dir := filepath.Dir(path)
	_, err := os.Stat(dir)
	newDir := errors.Is(err, fs.ErrNotExist)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	_, err = os.Lstat(path)
	created := errors.Is(err, fs.ErrNotExist)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	// Another writer's append under way is not a torn line: the file's
	// end is read under the lock every writer holds while it appends.
	unlock, err := lockFile(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	head, end, err := readEnd(f)
	unlock()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	// A new file (and a new directory) made durable in its directory:
	// records synced into a file whose entry a power cut loses are lost.
	if created {
		err = fsync(f)
		if err == nil {
			err = syncDir(dir)
		}
		if err == nil && newDir {
			err = syncDir(filepath.Dir(dir))
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("audit log %s: %w", path, err)
		}
	}
	l := &Log{path: path, chain: chain, f: f, seen: map[findKey]int64{}, head: head, end: end}
	return l, nil
}

// lockFile takes f's exclusive lock, which every writer of the file
// holds while it appends, and returns its release.
func lockFile(f *os.File) (unlock func(), err error) {
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }, nil
}

// readEnd returns f's last complete record and where the complete lines
// end, after cutting off a torn last line (a writer that crashed
// mid-append), the cut made durable before a record follows, so that a
// power cut cannot bring it back between the head and the next record.
// f's lock is held.
func readEnd(f *os.File) (*auditchain.Record, int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	head, end, err := lastRecord(f)
	if err != nil {
		return nil, 0, err
	}
	if end < fi.Size() {
		if err := f.Truncate(end); err != nil {
			return nil, 0, fmt.Errorf("cut off a torn last line: %w", err)
		}
		if err := fsync(f); err != nil {
			return nil, 0, fmt.Errorf("sync after cutting off a torn last line: %w", err)
		}
	}
	return head, end, nil
}

// refreshLocked takes the file's lock and, when the file is no longer
// as this Log left it (another writer appended), reads its last record
// again, the head the next record follows. l.mu is held; the returned
// function releases the file's lock.
func (l *Log) refreshLocked() (unlock func(), err error) {
	unlock, err = lockFile(l.f)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", l.path, err)
	}
	fi, err := l.f.Stat()
	if err == nil && fi.Size() == l.end {
		return unlock, nil
	}
	var head *auditchain.Record
	var end int64
	if err == nil {
		head, end, err = readEnd(l.f)
	}
	if err != nil {
		unlock()
		return nil, fmt.Errorf("audit log %s: %w", l.path, err)
	}
	l.head, l.end = head, end
	return unlock, nil
}

// lastRecord returns f's last complete record (nil for none) and where
// the complete lines end, reading backwards from the end in growing
// chunks until it holds a whole last line.
func lastRecord(f *os.File) (*auditchain.Record, int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := fi.Size()
	for chunk := int64(64 << 10); ; chunk *= 4 {
		from := max(0, size-chunk)
		b := make([]byte, size-from)
		if _, err := f.ReadAt(b, from); err != nil && err != io.EOF {
			return nil, 0, err
		}
		last := bytes.LastIndexByte(b, '\n')
		if last < 0 {
			if from == 0 {
				return nil, 0, nil // no complete line
			}
			continue
		}
		start := bytes.LastIndexByte(b[:last], '\n') + 1
		if start == 0 && from > 0 {
			continue // the line may begin before the chunk
		}
		var r auditchain.Record
		if err := json.Unmarshal(b[start:last], &r); err != nil {
			return nil, 0, fmt.Errorf("its last line is not an audit record: %w", err)
		}
		return &r, from + int64(last) + 1, nil
	}
}

// Close closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// Path is the file's path.
func (l *Log) Path() string { return l.path }

// Head returns the last record's seq and hash (0 and "" for none).
func (l *Log) Head() (int64, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head == nil {
		return 0, ""
	}
	return l.head.Seq, l.head.Hash
}

// MismatchError is a record that does not follow the copy: imsd's chain
// and the agent's copy disagree from it on (or the record was damaged on
// the way). Nothing from it on is kept.
type MismatchError struct {
	Seq    int64
	Detail string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("record %d does not follow the agent's copy of the chain: %s (agentd audit compare names where they disagree)", e.Seq, e.Detail)
}

// AppendCopy checks that rs continue the copy (the chain, the next seq,
// prev the hash of the record before, hash the record's own) and appends
// and syncs them. Records the copy already holds, identical, are skipped
// (imsd may send a record twice across reconnects). On a mismatch it keeps
// the records before it and returns a *MismatchError.
func (l *Log) AppendCopy(rs []auditchain.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken != nil {
		return l.broken
	}
	unlock, err := l.refreshLocked()
	if err != nil {
		return err
	}
	defer unlock()
	var take []auditchain.Record
	head := l.head
	var bad error
	for _, r := range rs {
		want := int64(1)
		prev := ""
		if head != nil {
			want, prev = head.Seq+1, head.Hash
		}
		if head != nil && r.Seq <= head.Seq {
			if r.Seq == head.Seq && r.Hash != head.Hash {
				bad = &MismatchError{r.Seq, fmt.Sprintf("the copy's record %d has hash %.12s…, this one %.12s…", r.Seq, head.Hash, r.Hash)}
				break
			}
			continue // held already
		}
		switch {
		case r.Chain != l.chain:
			bad = &MismatchError{r.Seq, fmt.Sprintf("it is of chain %q, the copy of %q", r.Chain, l.chain)}
		case r.Seq != want:
			bad = &MismatchError{r.Seq, fmt.Sprintf("the copy's next record is %d", want)}
		case r.Prev != prev:
			bad = &MismatchError{r.Seq, fmt.Sprintf("its prev %.12s… is not the hash of the copy's record %d (%.12s…)", r.Prev, want-1, prev)}
		case auditchain.Hash(r) != r.Hash:
			bad = &MismatchError{r.Seq, "its content does not match its hash"}
		}
		if bad != nil {
			break
		}
		take = append(take, r)
		head = &take[len(take)-1]
	}
	if err := l.writeLocked(take); err != nil {
		return err
	}
	return bad
}

// Add appends one record of the agent's own, chained to the file's head
// (seq, prev and hash set here), and syncs it. The head is the file's
// last record, whichever writer appended it.
func (l *Log) Add(r auditchain.Record) (auditchain.Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken != nil {
		return auditchain.Record{}, l.broken
	}
	unlock, err := l.refreshLocked()
	if err != nil {
		return auditchain.Record{}, err
	}
	defer unlock()
	r.Chain = l.chain
	r = auditchain.Next(l.head, r)
	if err := l.writeLocked([]auditchain.Record{r}); err != nil {
		return auditchain.Record{}, err
	}
	return r, nil
}

func (l *Log) writeLocked(rs []auditchain.Record) error {
	if len(rs) == 0 {
		return nil
	}
	if l.broken != nil {
		return l.broken
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, r := range rs {
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("audit log %s: %w", l.path, err)
		}
	}
	if _, err := l.f.WriteAt(buf.Bytes(), l.end); err != nil {
		l.broken = fmt.Errorf("audit log %s: write: %w", l.path, err)
		return l.broken
	}
	if err := l.f.Sync(); err != nil {
		l.broken = fmt.Errorf("audit log %s: sync: %w", l.path, err)
		return l.broken
	}
	for _, r := range rs {
		l.index(r)
	}
	h := rs[len(rs)-1]
	l.head = &h
	l.end += int64(buf.Len())
	return nil
}

// indexed are the records Find looks up, and the data key each is found by.
var indexed = map[string]string{"job.acked": "token"}

func (l *Log) index(r auditchain.Record) {
	key, ok := indexed[r.Kind]
	if !ok {
		return
	}
	var data map[string]string
	if json.Unmarshal([]byte(r.Data), &data) != nil {
		return
	}
	k := findKey{r.Kind, r.Subject, key, data[key]}
	if _, dup := l.seen[k]; !dup {
		l.order = append(l.order, k)
		if len(l.order) > maxIndex {
			delete(l.seen, l.order[0])
			l.order = l.order[1:]
		}
	}
	l.seen[k] = r.Seq
}

// FindAck returns the seq of the copy's job.acked record of job jobID
// acked under token, or 0 when the copy holds none (among its recent
// records).
func (l *Log) FindAck(jobID string, token int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[findKey{"job.acked", "job:" + jobID, "token", fmt.Sprint(token)}]
}

// EncodeData encodes a record's data as a JSON object of strings with
// sorted keys, as imsd stores it.
func EncodeData(data map[string]string) (string, error) {
	if data == nil {
		return "{}", nil
	}
	b, err := json.Marshal(data) // maps are encoded with sorted keys
	return string(b), err
}

// Difference is the first record on which an agent's copy of its
// install's chain and imsd's chain disagree.
type Difference struct {
	Seq int64
	// What is "differs" (both hold record Seq, not the same),
	// "missing from imsd" (the copy holds it, imsd's chain does not:
	// removed there) or "missing from the copy" (imsd's chain holds it
	// within the copy's range, the copy does not).
	What   string
	Detail string
}

func (d *Difference) Error() string {
	return fmt.Sprintf("record %d %s: %s", d.Seq, d.What, d.Detail)
}

// Compare returns the first record where copy (the agent's, in file
// order) and imsd (imsd's chain, in seq order) disagree, or nil when every
// record of the copy is in imsd's chain, identical. Records of imsd's
// chain after the copy's last are not a disagreement: the agent has not
// received them yet.
func Compare(copy, imsd []auditchain.Record) *Difference {
	for k, l := range copy {
		if k >= len(imsd) {
			return &Difference{l.Seq, "missing from imsd", fmt.Sprintf("the agent's copy holds %d records (up to %d), imsd's chain %d", len(copy), copy[len(copy)-1].Seq, len(imsd))}
		}
		r := imsd[k]
		switch {
		case r.Seq > l.Seq:
			return &Difference{l.Seq, "missing from imsd", fmt.Sprintf("the agent's copy holds it (%s %s); imsd's chain goes on with record %d", l.Kind, l.Subject, r.Seq)}
		case r.Seq < l.Seq:
			return &Difference{r.Seq, "missing from the copy", fmt.Sprintf("imsd's chain holds it (%s %s); the agent's copy goes on with record %d", r.Kind, r.Subject, l.Seq)}
		case r != l:
			return &Difference{l.Seq, "differs", fieldsDiffer(l, r)}
		}
	}
	return nil
}

// fieldsDiffer names the fields in which the copy's record l and imsd's r
// differ.
func fieldsDiffer(l, r auditchain.Record) string {
	var out []string
	add := func(name, a, b string) {
		if a != b {
			out = append(out, fmt.Sprintf("%s %q in the agent's copy, %q in imsd's chain", name, a, b))
		}
	}
	add("chain", l.Chain, r.Chain)
	add("at", fmt.Sprint(l.At), fmt.Sprint(r.At))
	add("kind", l.Kind, r.Kind)
	add("actor", l.Actor, r.Actor)
	add("subject", l.Subject, r.Subject)
	add("data", l.Data, r.Data)
	add("prev", l.Prev, r.Prev)
	add("hash", l.Hash, r.Hash)
	return strings.Join(out, "; ")
}
