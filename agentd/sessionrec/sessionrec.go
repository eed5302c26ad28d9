// Package sessionrec keeps the customer's record of support sessions in
// the agent's state directory: each session's recording in asciicast v2
// (STATE/sessions/ID.cast: a header line, then one [time, code, data]
// event a line, "o" output, "i" input, "r" resize), written as the
// session runs and synced when it ends, and its summary (ID.json). The
// agentd session commands read them; a kill file (ID.kill) asks the
// running agent to end a session.
package sessionrec

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/byoc-dev/byoc/internal/asciicast"
)

// DirName is the sessions directory inside the state directory.
const DirName = "sessions"

// Dir is the sessions directory of state dir state.
func Dir(state string) string { return filepath.Join(state, DirName) }

// CastPath, MetaPath and KillPath are session id's files in dir.
func CastPath(dir, id string) string { return filepath.Join(dir, id+".cast") }
func MetaPath(dir, id string) string { return filepath.Join(dir, id+".json") }
func KillPath(dir, id string) string { return filepath.Join(dir, id+".kill") }

// Header and Event are asciicast v2's (internal/asciicast, which the
// CLI shares to play the vendor's copy of a recording).
type (
	Header = asciicast.Header
	Event  = asciicast.Event
)

// Writer writes one recording as the session runs. It is safe for
// concurrent use.
type Writer struct {
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	h      hash.Hash
	n      int64
	start  time.Time
	last   float64
	err    error
	closed bool
}

// Create starts the recording of session id in dir (created 0700), with
// h's header (version 2 and the timestamp are set here). The file is
// new: an existing one is an error.
func Create(dir, id string, h Header, start time.Time) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(CastPath(dir, id), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	w := &Writer{f: f, w: bufio.NewWriterSize(f, 32<<10), h: sha256.New(), start: start}
	h.Version = 2
	h.Timestamp = start.Unix()
	b, err := json.Marshal(h)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.write(append(b, '\n'))
	if err := w.flushLocked(); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	_, w.err = w.w.Write(b)
	w.h.Write(b)
	w.n += int64(len(b))
}

func (w *Writer) flushLocked() error {
	if w.err == nil {
		w.err = w.w.Flush()
	}
	return w.err
}

// Event records one event at t. Times never go back: an event at a time
// before the last one's is recorded at the last one's. Data must be
// valid UTF-8 (Text makes it so).
func (w *Writer) Event(t time.Time, code, data string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("recording closed")
	}
	sec := float64(t.Sub(w.start).Microseconds()) / 1e6
	if sec < w.last {
		sec = w.last
	}
	w.last = sec
	d, err := json.Marshal(data)
	if err != nil {
		return err
	}
	line := fmt.Appendf(nil, "[%.6f, %q, %s]\n", sec, code, d)
	w.write(line)
	// Written as it happens: agentd session watch follows the file.
	return w.flushLocked()
}

// Size is how many bytes the recording holds so far.
func (w *Writer) Size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// Close syncs and closes the recording and returns its SHA-256 (hex)
// and size.
func (w *Writer) Close() (string, int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sum := hex.EncodeToString(w.h.Sum(nil))
	if w.closed {
		return sum, w.n, w.err
	}
	w.closed = true
	err := w.flushLocked()
	if serr := w.f.Sync(); err == nil {
		err = serr
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return sum, w.n, err
}

// Text turns bytes of terminal output into valid UTF-8, as a recording
// holds it: carry is the incomplete sequence at the end of the previous
// chunk (prepended), and the returned carry is this chunk's; an invalid
// byte becomes U+FFFD. What the operator receives is this text, so a
// recording's output is byte for byte what they saw.
func Text(carry, b []byte) (string, []byte) {
	if len(carry) > 0 {
		b = append(slices.Clone(carry), b...)
	}
	// Keep back an incomplete sequence at the end (at most 3 bytes).
	cut := len(b)
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				cut = i
			}
			break
		}
	}
	rest := slices.Clone(b[cut:])
	b = b[:cut]
	if utf8.Valid(b) {
		return string(b), rest
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), rest
}

// Read reads a recording and checks it is valid asciicast v2
// (asciicast.Read).
func Read(r io.Reader) (Header, []Event, error) { return asciicast.Read(r) }

// Meta is a session's summary (ID.json), written when it starts and
// again when it ends.
type Meta struct {
	ID        string    `json:"id"`
	Operator  string    `json:"operator"`
	Grant     string    `json:"grant"`
	Component string    `json:"component,omitempty"`
	Command   []string  `json:"command,omitempty"`
	Started   time.Time `json:"started"`
	Ended     time.Time `json:"ended,omitzero"`
	Reason    string    `json:"reason,omitempty"`
	ExitCode  int       `json:"exit_code"`
	// OutputBytes and InputBytes count the bytes the session relayed.
	OutputBytes int64 `json:"output_bytes"`
	InputBytes  int64 `json:"input_bytes"`
	// SHA256 and Size are the closed recording's.
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size,omitempty"`
	// PID is the agent's process id while the session runs.
	PID int `json:"pid,omitempty"`
	// Reported is set once the session's end went out to imsd, whose
	// audit records it; an ended session not yet reported is reported
	// when the agent starts.
	Reported bool `json:"reported,omitempty"`
	// ToVendor is set when the customer allowed imsd a copy of the
	// recording when the session started (agentd
	// --session-recordings-to-vendor); a session without it is never
	// sent, whatever the setting later.
	ToVendor bool `json:"to_vendor,omitempty"`
	// VendorKept is set once imsd confirmed keeping its copy; until then
	// an allowed recording is sent again on each new stream.
	VendorKept bool `json:"vendor_kept,omitempty"`
}

// WriteMeta writes m as dir/ID.json, atomically (0600).
func WriteMeta(dir string, m Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+m.ID+".json.*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), MetaPath(dir, m.ID))
}

// ReadMeta reads session id's summary.
func ReadMeta(dir, id string) (Meta, error) {
	var m Meta
	b, err := os.ReadFile(MetaPath(dir, id))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", MetaPath(dir, id), err)
	}
	return m, nil
}

// List returns every session's summary in dir, oldest first.
func List(dir string) ([]Meta, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Meta
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(id, ".") {
			continue
		}
		m, err := ReadMeta(dir, id)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Meta) int { return a.Started.Compare(b.Started) })
	return out, nil
}
