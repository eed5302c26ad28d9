package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/byoc-dev/byoc/internal/atomicfile"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// The replay record: every attempt (job id and attempt number) the agent
// accepted, so that an assignment sent again, by a replaying man in the
// middle or anyone else, is refused even after the agent restarted.
//
// It is bounded by the signatures' expiry: an assignment whose signature
// expired is refused anyway, so an entry is kept only until its
// signature's expiry plus seenSlack (for a clock stepped back a little),
// and at most maxSeen entries are kept: with more live entries than that
// the agent refuses new assignments rather than forget one (fail closed;
// at imsd's default lease, over 2,000 jobs a second on one agent).
//
// On disk it is STATE/seen-jobs: one line per accepted attempt,
// "EXPIRY-UNIX-MS ATTEMPT QUOTED-JOB-ID", appended and synced before the
// agent acks the attempt, compacted (rewritten atomically with only live
// entries) at start and, looked at every 1,024 entries, when most lines are dead. A torn last line
// (a crash mid-append) is ignored: its attempt was never acked.
//
// One entry outlives its expiry: the newest, the attempt of the job imsd
// made last (by the time its id carries, agentproto.IDTime). It is what
// the agent has done that is newest in imsd's eyes, online or from a
// bundle: agentd bundle import refuses a bundle imsd made before it (its
// jobs would roll the install back to what imsd wanted then).

// SeenFileName is the replay record's file in the state dir.
const SeenFileName = "seen-jobs"

const (
	maxSeen   = 100_000
	seenSlack = 5 * time.Minute
)

type seenKey struct {
	job     string
	attempt int64
}

type seenJobs struct {
	mu      sync.Mutex
	path    string
	f       *os.File
	entries map[seenKey]time.Time // to the signature's expiry
	lines   int                   // lines in the file
	added   int                   // entries added since the start
	// newest is the attempt whose job imsd made last, kept in the file
	// past its expiry (compact); newestAt is when imsd made it.
	newest    seenKey
	newestExp time.Time
	newestAt  time.Time
}

// consider makes k the newest entry if imsd made its job after the
// newest's (ids not of auth.NewSortableID's form are passed over).
func (s *seenJobs) consider(k seenKey, exp time.Time) {
	at, ok := agentproto.IDTime(k.job)
	if ok && at.After(s.newestAt) {
		s.newest, s.newestExp, s.newestAt = k, exp, at
	}
}

// Newest is the job of the newest attempt the agent accepted (see
// seenJobs.newest): its id and when imsd made it; "" for none.
type Newest struct {
	JobID string
	Made  time.Time
}

func (s *seenJobs) latest() Newest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Newest{JobID: s.newest.job, Made: s.newestAt}
}

// openSeen loads the record from dir, dropping what expired by now.
func openSeen(dir string, now time.Time) (*seenJobs, error) {
	s := &seenJobs{path: filepath.Join(dir, SeenFileName), entries: make(map[seenKey]time.Time)}
	b, err := os.ReadFile(s.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read replay record: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		k, exp, ok := parseSeen(sc.Text())
		if ok {
			s.consider(k, exp)
		}
		if ok && exp.Add(seenSlack).After(now) {
			if old, dup := s.entries[k]; !dup || exp.After(old) {
				s.entries[k] = exp
			}
		}
	}
	if err := s.compact(); err != nil {
		return nil, err
	}
	return s, nil
}

func parseSeen(line string) (seenKey, time.Time, bool) {
	exp, rest, ok1 := strings.Cut(line, " ")
	att, job, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return seenKey{}, time.Time{}, false
	}
	ms, err1 := strconv.ParseInt(exp, 10, 64)
	a, err2 := strconv.ParseInt(att, 10, 64)
	id, err3 := strconv.Unquote(job)
	if err1 != nil || err2 != nil || err3 != nil {
		return seenKey{}, time.Time{}, false
	}
	return seenKey{job: id, attempt: a}, time.UnixMilli(ms), true
}

func formatSeen(k seenKey, exp time.Time) string {
	return strconv.FormatInt(exp.UnixMilli(), 10) + " " + strconv.FormatInt(k.attempt, 10) + " " + strconv.Quote(k.job) + "\n"
}

// compact rewrites the file with the live entries and reopens it for
// appending.
func (s *seenJobs) compact() error {
	var b strings.Builder
	for k, exp := range s.entries {
		b.WriteString(formatSeen(k, exp))
	}
	if _, live := s.entries[s.newest]; !live && s.newest.job != "" {
		b.WriteString(formatSeen(s.newest, s.newestExp))
	}
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	if err := atomicfile.Write(s.path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write replay record: %w", err)
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open replay record: %w", err)
	}
	s.f, s.lines = f, strings.Count(b.String(), "\n")
	return nil
}

// has reports whether the attempt was accepted before.
func (s *seenJobs) has(job string, attempt int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.entries[seenKey{job, attempt}]
	return ok
}

// add records an accepted attempt durably, before its ack is sent.
func (s *seenJobs) add(job string, attempt int64, expires, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.entries) >= maxSeen {
		for k, exp := range s.entries {
			if !exp.Add(seenSlack).After(now) {
				delete(s.entries, k)
			}
		}
		if len(s.entries) >= maxSeen {
			return fmt.Errorf("the replay record holds %d unexpired attempts, its limit", len(s.entries))
		}
	}
	k := seenKey{job, attempt}
	if _, err := s.f.WriteString(formatSeen(k, expires)); err != nil {
		return fmt.Errorf("write replay record: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("sync replay record: %w", err)
	}
	s.entries[k] = expires
	s.consider(k, expires)
	s.lines++
	if s.added++; s.added%1024 == 0 {
		for k, exp := range s.entries {
			if !exp.Add(seenSlack).After(now) {
				delete(s.entries, k)
			}
		}
		if s.lines > 2*len(s.entries) {
			return s.compact()
		}
	}
	return nil
}
