package telemetry

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/agentd/egress"
	"github.com/byoc-dev/byoc/agentd/permissions"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// The collector's bounds.
const (
	// MaxBatchSamples and MaxBatchLines bound one batch (imsd refuses
	// more).
	MaxBatchSamples = 2000
	MaxBatchLines   = 500
	// MaxLineBytes bounds one forwarded log line; a longer one is cut.
	MaxLineBytes = 8 << 10
	// MaxReadBytes bounds what is read of one log file per interval, and
	// of a file first seen (its last MaxReadBytes).
	MaxReadBytes = 256 << 10
	// MaxFiles bounds the files one log source's glob may match.
	MaxFiles = 64
	// QueueBatches is how many batches wait for the stream at most;
	// beyond, a batch is dropped and its samples and lines counted.
	QueueBatches = 8
	// MinInterval is the shortest interval a source is read at.
	MinInterval = time.Second
)

// Collector reads the app's declared telemetry sources as the customer's
// setting allows and queues batches for the agent's stream.
type Collector struct {
	// Setting returns the customer's setting now (read from the signed
	// permissions.json); an error reads as off.
	Setting func() (permissions.TelemetrySetting, error)
	// Tick is how often sources are looked at (MinInterval if zero).
	Tick time.Duration
	Log  *slog.Logger
	Now  func() time.Time
	// Hidden are the agent's own paths (its state directory, secrets
	// file, ...: files or directories). A log source's file that is one
	// of them or under one, also through a symbolic link, is never read:
	// the vendor's declaration names the paths, and the agent's identity,
	// its customer's control files, secrets and recordings are not logs.
	Hidden []string

	cfg    atomic.Pointer[agentv1.TelemetryConfig]
	out    chan *agentv1.TelemetryBatch
	once   sync.Once
	client *http.Client

	droppedSamples, droppedLines atomic.Uint64

	// Run's own state.
	due     map[string]time.Time
	offsets map[string]int64
	errs    map[string]string
	rules   *Rules
}

func (c *Collector) init() {
	c.once.Do(func() {
		c.out = make(chan *agentv1.TelemetryBatch, QueueBatches)
		// Endpoints are in the customer's own network: never through the
		// proxy the agent reaches imsd by.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
		// The vendor's declaration names the URLs: never the cloud's
		// metadata service (the machine's credentials) or another
		// link-local address, checked on the address dialled, so a name
		// resolving there or a redirect leading there is refused too.
		d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("telemetry: dial %s: %w", address, err)
			}
			if rule := egress.CredentialEndpoint(ap.Addr()); rule != "" {
				return fmt.Errorf("telemetry: %s is refused (%s): the agent never scrapes metrics there, whatever the app's declaration names", address, rule)
			}
			return nil
		}}
		t.DialContext = d.DialContext
		c.client = &http.Client{Transport: t, Timeout: 10 * time.Second}
		c.due, c.offsets, c.errs = map[string]time.Time{}, map[string]int64{}, map[string]string{}
		if c.Now == nil {
			c.Now = time.Now
		}
		if c.Log == nil {
			c.Log = slog.New(slog.DiscardHandler)
		}
	})
}

// SetConfig takes the app's telemetry declaration imsd sent.
func (c *Collector) SetConfig(cfg *agentv1.TelemetryConfig) {
	c.init()
	c.cfg.Store(cfg)
}

// Config is the declaration taken last (nil: none).
func (c *Collector) Config() *agentv1.TelemetryConfig { return c.cfg.Load() }

// Batches are the batches ready for the stream.
func (c *Collector) Batches() <-chan *agentv1.TelemetryBatch {
	c.init()
	return c.out
}

// Dropped are the samples and lines dropped for the bounds so far.
func (c *Collector) Dropped() (samples, lines uint64) {
	return c.droppedSamples.Load(), c.droppedLines.Load()
}

// Run looks at the sources every Tick until ctx ends.
func (c *Collector) Run(ctx context.Context) {
	c.init()
	tick := max(c.Tick, 10*time.Millisecond)
	if c.Tick == 0 {
		tick = MinInterval
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		c.Collect(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Collect reads every source that is due once, and queues what it read.
func (c *Collector) Collect(ctx context.Context) {
	c.init()
	cfg := c.cfg.Load()
	if cfg == nil {
		return
	}
	s, err := c.Setting()
	if err != nil {
		s = permissions.TelemetrySetting{}
	}
	if c.rules == nil || !c.rules.Setting.Equal(s) {
		if c.rules, err = NewRules(s); err != nil {
			c.Log.Error("the customer's telemetry setting cannot be applied; forwarding nothing", "err", err)
			c.rules, _ = NewRules(permissions.TelemetrySetting{})
		}
	}
	now := c.Now()
	var b batcher
	b.c = c
	for _, m := range cfg.Metrics {
		key := "metrics:" + m.Name
		if !c.rules.Setting.Metrics() || now.Before(c.due[key]) {
			continue
		}
		c.due[key] = now.Add(max(time.Duration(m.IntervalMs)*time.Millisecond, MinInterval))
		samples, err := c.scrape(ctx, m, now)
		c.report(key, err)
		for _, s := range samples {
			b.sample(s)
		}
	}
	for _, l := range cfg.Logs {
		key := "logs:" + l.Name
		if now.Before(c.due[key]) {
			continue
		}
		c.due[key] = now.Add(max(time.Duration(l.IntervalMs)*time.Millisecond, MinInterval))
		c.report(key, c.tail(l, c.rules.Setting.Logs(), now, &b))
	}
	b.flush()
}

// report logs a source's error when it changes (and its recovery).
func (c *Collector) report(key string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if c.errs[key] == msg {
		return
	}
	c.errs[key] = msg
	if err != nil {
		c.Log.Warn("telemetry source failed", "source", key, "err", err)
	} else {
		c.Log.Info("telemetry source read", "source", key)
	}
}

func (c *Collector) scrape(ctx context.Context, m *agentv1.MetricsSource, now time.Time) ([]*agentv1.MetricSample, error) {
	timeout := min(max(time.Duration(m.IntervalMs)*time.Millisecond, MinInterval), 10*time.Second)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.Url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	res, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", m.Url, res.Status)
	}
	return ParseMetrics(m.Name, res.Body, now, c.rules)
}

// tail reads the new lines of the files of l when send is set; else it
// only moves its offsets to the files' ends, so that lines written while
// logs are off are never sent. A file first seen while logs are on is
// read from its start, at most its last MaxReadBytes; one that shrank
// (rotated, truncated) from its start again.
func (c *Collector) tail(l *agentv1.LogSource, send bool, now time.Time, b *batcher) error {
	files, err := filepath.Glob(l.Path)
	if err != nil {
		return err
	}
	if len(files) > MaxFiles {
		files = files[:MaxFiles]
	}
	var refused error
	for _, f := range files {
		key := l.Name + "\x00" + f
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			continue
		}
		if c.hidden(real) {
			refused = &hiddenError{name: f, real: real}
			continue
		}
		fi, err := os.Stat(f)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		off, seen := c.offsets[key]
		size := fi.Size()
		if !send {
			c.offsets[key] = size
			continue
		}
		if !seen || size < off {
			off = max(0, size-MaxReadBytes)
		}
		if size == off {
			c.offsets[key] = off
			continue
		}
		n, err := c.readLines(l.Name, f, off, min(size, off+MaxReadBytes), now, b)
		var he *hiddenError
		if errors.As(err, &he) {
			refused = err
			continue
		}
		if err != nil {
			return err
		}
		c.offsets[key] = off + n
	}
	return refused
}

// hidden reports whether path (resolved) is one of c.Hidden or under one.
func (c *Collector) hidden(path string) bool {
	for _, h := range c.Hidden {
		if r, err := filepath.EvalSymlinks(h); err == nil {
			h = r
		}
		if rel, err := filepath.Rel(h, path); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// checkOpened refuses an opened log file that is one of the agent's own:
// where the descriptor really leads (/proc/self/fd, which no link swapped
// after the open can change) is under one of c.Hidden, or the file has
// more than one name on the filesystem of one of them (a hard link to the
// agent's key in a log directory has no path of the agent's to give it
// away).
func (c *Collector) checkOpened(fh *os.File, name string) error {
	if len(c.Hidden) == 0 {
		return nil
	}
	if real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fh.Fd())); err == nil && c.hidden(real) {
		return &hiddenError{name: name, real: real}
	}
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Nlink <= 1 {
		return nil
	}
	for _, h := range c.Hidden {
		var hs syscall.Stat_t
		if syscall.Stat(h, &hs) == nil && hs.Dev == st.Dev {
			return &hiddenError{name: name, real: fmt.Sprintf("a file with %d names on the filesystem of %s", st.Nlink, h)}
		}
	}
	return nil
}

// A hiddenError is a log file tail refused as one of the agent's own.
type hiddenError struct{ name, real string }

func (e *hiddenError) Error() string {
	return fmt.Sprintf("%s: the agent's own file (%s), never read as a log", e.name, e.real)
}

// readLines reads the whole lines of file between off and end, and
// returns how many bytes it consumed (up to the last newline).
func (c *Collector) readLines(source, file string, off, end int64, now time.Time, b *batcher) (int64, error) {
	fh, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	// The check tail made on the name is checked again on what was
	// opened: a link swapped between the two is caught here.
	if err := c.checkOpened(fh, file); err != nil {
		return 0, err
	}
	buf := make([]byte, end-off)
	n, err := fh.ReadAt(buf, off)
	if err != nil && err != io.EOF {
		return 0, err
	}
	buf = buf[:n]
	last := bytes.LastIndexByte(buf, '\n')
	if last < 0 {
		if int64(n) >= MaxReadBytes { // one line longer than a read: cut it
			last = n - 1
		} else {
			return 0, nil
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(buf[:last+1]))
	sc.Buffer(make([]byte, 0, 64<<10), MaxReadBytes+1)
	for sc.Scan() {
		text := string(bytes.TrimRight(sc.Bytes(), "\r"))
		if text == "" {
			continue
		}
		// A forwarded line is UTF-8 (a proto string must be: a batch
		// that is not cannot be sent, and its Send would end the
		// stream), cut at a character's boundary.
		text = c.rules.Line(strings.ToValidUTF8(text, "\uFFFD"))
		if len(text) > MaxLineBytes {
			cut := MaxLineBytes
			for cut > 0 && !utf8.RuneStart(text[cut]) {
				cut--
			}
			text = text[:cut] + "…"
		}
		b.line(&agentv1.TelemetryLine{Source: source, File: file, Text: text, Time: timestamppb.New(now)})
	}
	return int64(last + 1), nil
}

// batcher cuts what one Collect read into batches within the bounds.
type batcher struct {
	c   *Collector
	cur *agentv1.TelemetryBatch
}

func (b *batcher) batch() *agentv1.TelemetryBatch {
	if b.cur == nil {
		b.cur = &agentv1.TelemetryBatch{}
	}
	return b.cur
}

func (b *batcher) sample(s *agentv1.MetricSample) {
	if len(b.batch().Samples) >= MaxBatchSamples {
		b.flush()
	}
	b.batch().Samples = append(b.batch().Samples, s)
}

func (b *batcher) line(l *agentv1.TelemetryLine) {
	if len(b.batch().Lines) >= MaxBatchLines {
		b.flush()
	}
	b.batch().Lines = append(b.batch().Lines, l)
}

// flush queues the batch, or drops it and counts what it held when the
// queue is full.
func (b *batcher) flush() {
	m := b.cur
	b.cur = nil
	if m == nil || (len(m.Samples) == 0 && len(m.Lines) == 0) {
		return
	}
	select {
	case b.c.out <- m:
	default:
		b.c.droppedSamples.Add(uint64(len(m.Samples)))
		b.c.droppedLines.Add(uint64(len(m.Lines)))
	}
}
