// Package ledger is the agent's egress ledger: a record, in its state
// dir, of every message the agent sends to imsd (the kind, the size of
// the marshalled message before it is sealed, the install and job it
// concerns, its SHA-256, and, where the customer turned it on, the full
// content of log lines and job outputs). `agentd egress list|stats`
// reads it. It is not the plugin sandbox's egress proxy (agentd/egress),
// which filters the plugins' own network traffic.
//
// The file (egress/ledger.jsonl, JSON Lines of Entry) is appended and
// synced, never rewritten. Record only queues an entry: one goroutine
// writes the queue in batches, so the agent's stream never waits on the
// disk. When the file passes Options.MaxBytes it becomes ledger.1.jsonl
// (replacing the one before) and a new file starts: the ledger keeps
// between MaxBytes and twice that. A torn last line (a crash
// mid-append) is cut off when the agent opens the file again.
package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/internal/atomicfile"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// File names in Dir.
const (
	File    = "ledger.jsonl"
	OldFile = "ledger.1.jsonl"
)

// DirName is the ledger's folder in the agent's state dir.
const DirName = "egress"

// Dir is where the ledger lives under the agent's state dir.
func Dir(stateDir string) string { return filepath.Join(stateDir, DirName) }

// DefaultMaxBytes is the size at which the ledger file rotates.
const DefaultMaxBytes = 64 << 20

// maxQueued bounds the bytes queued and not yet written (a disk that
// stopped taking writes): beyond it entries are counted, not kept, and an
// entry of kind "dropped" says how many once the disk takes them again.
const maxQueued = 8 << 20

// Content kinds the customer may turn on (agentd --egress-ledger-content).
const (
	ContentLogs    = "logs"
	ContentOutputs = "outputs"
)

// ParseContent parses a comma-separated list of content kinds.
func ParseContent(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, w := range strings.Split(s, ",") {
		switch w = strings.TrimSpace(w); w {
		case "":
		case ContentLogs, ContentOutputs:
			out[w] = true
		default:
			return nil, fmt.Errorf("--egress-ledger-content: %q is not a content kind (want logs, outputs, or both comma-separated)", w)
		}
	}
	return out, nil
}

// Entry is one message the agent sent.
type Entry struct {
	Time time.Time `json:"time"`
	// Kind is the message: hello, heartbeat, ack, logs, result,
	// channel_hello (the handshake), or a call: enroll, list_break_glass,
	// decide_break_glass, list_audit_records, revoke_self; "dropped"
	// counts entries the ledger could not keep (Count).
	Kind string `json:"kind"`
	// Size is the length in bytes of the marshalled message (before it
	// is sealed).
	Size    int    `json:"size"`
	Install string `json:"install,omitempty"`
	Job     string `json:"job,omitempty"`
	// SHA256 is the hex SHA-256 of the marshalled message.
	SHA256 string `json:"sha256,omitempty"`
	// Content is the message's log lines or outputs (protojson), when
	// the customer turned that on.
	Content json.RawMessage `json:"content,omitempty"`
	// Count is the number of entries dropped, for kind "dropped".
	Count int `json:"count,omitempty"`
}

// Options configure a Ledger.
type Options struct {
	// MaxBytes is the size at which the file rotates (DefaultMaxBytes).
	MaxBytes int64
	// Content names the content kinds kept in full (ContentLogs,
	// ContentOutputs).
	Content map[string]bool
	// Install is the install every entry concerns.
	Install string
	// Now is the clock (time.Now).
	Now func() time.Time
	// NoRotate leaves rotation to the agent: for a short-lived command
	// (agentd breakglass, audit compare, identity revoke) that appends
	// beside a running agent.
	NoRotate bool
}

// Ledger is the agent's open ledger. Its methods may be called from
// several goroutines.
type Ledger struct {
	dir  string
	opts Options
	// failWrites makes every write fail as a full disk would (tests: set
	// from another goroutine than the writer's, so atomic).
	failWrites atomic.Bool

	mu      sync.Mutex
	queue   [][]byte
	queued  int
	dropped int
	wake    chan struct{}
	flushed *sync.Cond
	gen     uint64 // batches taken by the writer
	done    uint64 // batches written
	closed  bool
	err     error // the last write error (kept until a write succeeds)

	f    *os.File
	size int64
	// newline starts the next append with a newline (NoRotate, after a
	// torn line).
	newline bool
	stop    chan struct{}
	exit    chan struct{}
}

// fsync and syncDir are replaced by tests.
var (
	fsync   = (*os.File).Sync
	syncDir = atomicfile.SyncDir
)

// Open opens (creating it, 0600 in a 0700 dir) the ledger under
// stateDir and starts its writer. Close stops it.
func Open(stateDir string, opts Options) (*Ledger, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	dir := Dir(stateDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("egress ledger: %w", err)
	}
	l := &Ledger{dir: dir, opts: opts, wake: make(chan struct{}, 1), stop: make(chan struct{}), exit: make(chan struct{})}
	l.flushed = sync.NewCond(&l.mu)
	if err := l.openFile(); err != nil {
		return nil, err
	}
	go l.writer()
	return l, nil
}

// openFile opens the current file for appending, cutting off a torn last
// line.
func (l *Ledger) openFile() error {
	path := filepath.Join(l.dir, File)
	_, err := os.Lstat(path)
	created := errors.Is(err, fs.ErrNotExist)
	// O_APPEND: a command appends beside the running agent, each batch
	// in one write.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("egress ledger: %w", err)
	}
	// A new file made durable in its directory (as the audit journal's):
	// entries synced into a file whose entry a power cut loses are lost.
	if created {
		if err := syncDir(l.dir); err != nil {
			f.Close()
			return fmt.Errorf("egress ledger %s: %w", path, err)
		}
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("egress ledger %s: %w", path, err)
	}
	end := fi.Size()
	if end > 0 {
		from := max(0, end-(64<<10))
		b := make([]byte, end-from)
		if _, err := f.ReadAt(b, from); err != nil && err != io.EOF {
			f.Close()
			return fmt.Errorf("egress ledger %s: %w", path, err)
		}
		if i := bytes.LastIndexByte(b, '\n'); i < len(b)-1 && l.opts.NoRotate {
			// Beside a running agent, whose write this may be: no cut;
			// the first append starts a line of its own.
			l.newline = true
		} else if i < len(b)-1 {
			// A torn last line (or a line longer than the window, which
			// the ledger never writes): cut off.
			end = from + int64(i) + 1
			if err := f.Truncate(end); err != nil {
				f.Close()
				return fmt.Errorf("egress ledger %s: cut off a torn last line: %w", path, err)
			}
		}
	}
	l.f, l.size = f, end
	return nil
}

// SetInstall sets the install later entries concern (the agent learns it
// at enrolment).
func (l *Ledger) SetInstall(id string) {
	l.mu.Lock()
	l.opts.Install = id
	l.mu.Unlock()
}

// Record queues e (its Time set if zero). It never blocks on the disk.
func (l *Ledger) Record(e Entry) {
	if e.Time.IsZero() {
		e.Time = l.opts.Now()
	}
	if e.Install == "" {
		l.mu.Lock()
		e.Install = l.opts.Install
		l.mu.Unlock()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	b = append(b, '\n')
	l.mu.Lock()
	if l.closed || l.queued+len(b) > maxQueued {
		l.dropped++
		l.mu.Unlock()
		return
	}
	l.queue = append(l.queue, b)
	l.queued += len(b)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// RecordMessage records m, whose marshalled form is plain, as kind; job
// is the job it concerns (empty: none). Content is kept for logs and
// results when the customer turned it on.
func (l *Ledger) RecordMessage(kind, job string, m proto.Message, plain []byte) {
	sum := sha256.Sum256(plain)
	e := Entry{Kind: kind, Job: job, Size: len(plain), SHA256: hex.EncodeToString(sum[:])}
	switch v := m.(type) {
	case *agentv1.JobLogs:
		if l.opts.Content[ContentLogs] {
			e.Content, _ = protojson.Marshal(&agentv1.JobLogs{Lines: v.Lines})
		}
	case *agentv1.JobResult:
		if l.opts.Content[ContentOutputs] && len(v.Outputs) > 0 {
			e.Content, _ = protojson.Marshal(&agentv1.JobResult{Outputs: v.Outputs})
		}
	}
	l.Record(e)
}

// RecordBytes records a request that is not a message (the registry
// token exchange, an HTTP GET) by what of it leaves, plain.
func (l *Ledger) RecordBytes(kind, job string, plain []byte) {
	sum := sha256.Sum256(plain)
	l.Record(Entry{Kind: kind, Job: job, Size: len(plain), SHA256: hex.EncodeToString(sum[:])})
}

// Tap records a ConnectRequest the agent sends (agentchannel.Tap).
func (l *Ledger) Tap(m *agentv1.ConnectRequest, plain []byte) {
	kind, job, inner := Describe(m)
	l.RecordMessage(kind, job, inner, plain)
}

// Describe names a ConnectRequest's kind (its oneof field's name), the job
// it concerns and its inner message.
func Describe(m *agentv1.ConnectRequest) (kind, job string, inner proto.Message) {
	switch v := m.Msg.(type) {
	case *agentv1.ConnectRequest_Hello:
		return "hello", "", v.Hello
	case *agentv1.ConnectRequest_Heartbeat:
		return "heartbeat", "", v.Heartbeat
	case *agentv1.ConnectRequest_Ack:
		return "ack", v.Ack.GetJobId(), v.Ack
	case *agentv1.ConnectRequest_Logs:
		return "logs", v.Logs.GetJobId(), v.Logs
	case *agentv1.ConnectRequest_Result:
		return "result", v.Result.GetJobId(), v.Result
	case *agentv1.ConnectRequest_ChannelHello:
		return "channel_hello", "", v.ChannelHello
	case *agentv1.ConnectRequest_Telemetry:
		return "telemetry", "", v.Telemetry
	}
	return "other", "", m
}

// UnaryKind names the kind of a call's request by its procedure
// ("/byoc.agent.v1.AgentService/ListBreakGlass" is list_break_glass).
func UnaryKind(procedure string) string {
	name := procedure[strings.LastIndexByte(procedure, '/')+1:]
	var b strings.Builder
	for i, r := range name {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// writer writes queued entries in batches until stop.
func (l *Ledger) writer() {
	defer close(l.exit)
	for {
		select {
		case <-l.wake:
		case <-l.stop:
			l.writeBatch()
			return
		}
		l.writeBatch()
	}
}

// writeBatch writes and syncs everything queued.
func (l *Ledger) writeBatch() {
	l.mu.Lock()
	batch, dropped := l.queue, l.dropped
	l.queue, l.queued, l.dropped = nil, 0, 0
	l.gen++
	gen := l.gen
	l.mu.Unlock()
	entries := len(batch)
	if dropped > 0 {
		b, _ := json.Marshal(Entry{Time: l.opts.Now(), Kind: "dropped", Count: dropped})
		batch = append(batch, append(b, '\n'))
	}
	var err error
	lost := false
	if len(batch) > 0 {
		lost, err = l.write(bytes.Join(batch, nil))
	}
	l.mu.Lock()
	if err != nil {
		l.err = err
		if lost {
			// The entries and the count the marker carried, not the
			// marker itself: a lost marker must not shrink the count.
			l.dropped += entries + dropped
		}
	} else if len(batch) > 0 {
		l.err = nil
	}
	l.done = gen
	l.flushed.Broadcast()
	l.mu.Unlock()
}

// write appends b, rotating first when the file is full. lost reports
// that b is not in the file (a sync error leaves it there, maybe not
// durable).
func (l *Ledger) write(b []byte) (lost bool, err error) {
	if l.failWrites.Load() {
		return true, errors.New("egress ledger: the disk refused the write")
	}
	if l.f == nil {
		if err := l.openFile(); err != nil {
			return true, err
		}
	}
	if !l.opts.NoRotate && l.size > 0 && l.size+int64(len(b)) > l.opts.MaxBytes {
		if err := l.rotate(); err != nil {
			return true, err
		}
	}
	if l.newline {
		b = append([]byte{'\n'}, b...)
		l.newline = false
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	if err != nil {
		if n > 0 {
			// A partial line: the next append starts a line of its own.
			l.newline = true
		}
		return true, fmt.Errorf("egress ledger: %w", err)
	}
	if err := fsync(l.f); err != nil {
		return false, fmt.Errorf("egress ledger: sync: %w", err)
	}
	return false, nil
}

// rotate moves the current file to OldFile and starts a new one.
func (l *Ledger) rotate() error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("egress ledger: %w", err)
	}
	l.f = nil
	if err := os.Rename(filepath.Join(l.dir, File), filepath.Join(l.dir, OldFile)); err != nil {
		return fmt.Errorf("egress ledger: rotate: %w", err)
	}
	return l.openFile()
}

// Flush waits until everything recorded before it is on disk, and
// returns the last write error, if any.
func (l *Ledger) Flush() error {
	l.mu.Lock()
	want := l.gen + 1
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.done < want && !l.closed {
		l.flushed.Wait()
	}
	return l.err
}

// Close writes what is queued and closes the file.
func (l *Ledger) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	close(l.stop)
	<-l.exit
	l.mu.Lock()
	l.closed = true
	err := l.err
	l.flushed.Broadcast()
	l.mu.Unlock()
	if l.f != nil {
		if cerr := l.f.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// Read returns the entries under stateDir at or after since (zero: all),
// oldest first: the rotated file's, then the current one's. A torn last
// line is left out; a line that is not an entry is an error naming it.
func Read(stateDir string, since time.Time) ([]Entry, error) {
	var out []Entry
	for _, name := range []string{OldFile, File} {
		path := filepath.Join(Dir(stateDir), name)
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for line, n := 1, 0; n < len(b); line++ {
			i := bytes.IndexByte(b[n:], '\n')
			if i < 0 {
				break // torn
			}
			if i == 0 {
				n++ // an empty line: a command's append after a torn line
				continue
			}
			var e Entry
			if err := json.Unmarshal(b[n:n+i], &e); err != nil {
				return nil, fmt.Errorf("%s:%d: not a ledger entry: %w", path, line, err)
			}
			n += i + 1
			if !e.Time.Before(since) {
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// KindStats sums the entries of one kind.
type KindStats struct {
	Kind     string
	Messages int
	Bytes    int64
}

// Stats sums entries by kind (sorted by kind) and in total.
func Stats(es []Entry) (byKind []KindStats, total KindStats) {
	m := map[string]*KindStats{}
	for _, e := range es {
		if e.Kind == "dropped" {
			continue
		}
		s := m[e.Kind]
		if s == nil {
			s = &KindStats{Kind: e.Kind}
			m[e.Kind] = s
		}
		s.Messages++
		s.Bytes += int64(e.Size)
		total.Messages++
		total.Bytes += int64(e.Size)
	}
	for _, s := range m {
		byKind = append(byKind, *s)
	}
	sort.Slice(byKind, func(i, j int) bool { return byKind[i].Kind < byKind[j].Kind })
	total.Kind = "total"
	return byKind, total
}
