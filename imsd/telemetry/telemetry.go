// Package telemetry holds, in imsd's memory and bounded, the app
// telemetry installs' agents forward under their customers' telemetry
// setting (agentd telemetry): per install, the newest sample of each
// metric series and a ring of the newest log lines. Nothing of it is
// persisted; an install's data is dropped once no batch arrived for
// Config.Expire, and the installs held are bounded too. Operators read
// it with GetTelemetry (byoc telemetry metrics|logs).
package telemetry

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// Defaults of Config.
const (
	DefaultMaxSeries   = 10000
	DefaultMaxLines    = 2000
	DefaultMaxInstalls = 1000
	DefaultExpire      = time.Hour
)

// MaxSampleBytes bounds what one held sample's source, name and labels
// (names and values) take, and one held line's source and file: a larger
// one is dropped and counted, so that an install's series and lines stay
// small whatever its agent sends (a line's text is bounded by the
// protocol, 16 KiB).
const MaxSampleBytes = 4 << 10

// MaxSampleLabels bounds a held sample's labels; more is dropped and
// counted.
const MaxSampleLabels = 64

// sampleSize is what m's source, name and labels take.
func sampleSize(m *agentv1.MetricSample) int {
	n := len(m.Source) + len(m.Name)
	for k, v := range m.Labels {
		n += len(k) + len(v)
	}
	return n
}

// Config bounds a Store.
type Config struct {
	// MaxSeries is the most series held per install; a sample of a new
	// series beyond it is dropped and counted.
	MaxSeries int
	// MaxLines is the most log lines held per install (the oldest go).
	MaxLines int
	// MaxInstalls is the most installs held; beyond, the one heard from
	// longest ago is dropped.
	MaxInstalls int
	// Expire drops an install's data once no batch came for this long.
	Expire time.Duration
}

// Sample is one metric sample held.
type Sample struct {
	Source, Name string
	Labels       map[string]string
	Value        float64
	Time         time.Time
}

// Line is one log line held; Seq numbers an install's lines from 1.
type Line struct {
	Seq                uint64
	Source, File, Text string
	Time               time.Time
}

// Snapshot is what is held of one install.
type Snapshot struct {
	Setting        string
	Samples        []Sample // by name, then labels
	Lines          []Line   // oldest first
	DroppedSamples uint64
	DroppedLines   uint64
	ReceivedAt     time.Time
}

type install struct {
	setting        string
	series         map[string]Sample
	lines          []Line // ring, len <= MaxLines
	next           int    // where the next line goes once full
	seq            uint64
	agentDropped   [2]uint64 // samples, lines: as the agent reported
	droppedSamples uint64    // by imsd
	droppedLines   uint64    // by imsd
	receivedAt     time.Time
}

// Store is the telemetry held. Its methods are safe for concurrent use.
type Store struct {
	cfg      Config
	mu       sync.Mutex
	installs map[string]*install
}

// New returns an empty Store.
func New(cfg Config) *Store {
	if cfg.MaxSeries <= 0 {
		cfg.MaxSeries = DefaultMaxSeries
	}
	if cfg.MaxLines <= 0 {
		cfg.MaxLines = DefaultMaxLines
	}
	if cfg.MaxInstalls <= 0 {
		cfg.MaxInstalls = DefaultMaxInstalls
	}
	if cfg.Expire <= 0 {
		cfg.Expire = DefaultExpire
	}
	return &Store{cfg: cfg, installs: map[string]*install{}}
}

func seriesKey(source, name string, labels map[string]string) string {
	var b strings.Builder
	b.WriteString(source)
	b.WriteByte(0)
	b.WriteString(name)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteByte(0)
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
	}
	return b.String()
}

// get returns install id's entry, making it (and making room) if needed.
// s.mu is held.
func (s *Store) get(id string, now time.Time) *install {
	in := s.installs[id]
	if in != nil {
		return in
	}
	for k, v := range s.installs {
		if now.Sub(v.receivedAt) > s.cfg.Expire && v.setting == "" {
			delete(s.installs, k)
		}
	}
	if len(s.installs) >= s.cfg.MaxInstalls {
		var oldest string
		for k, v := range s.installs {
			if oldest == "" || v.receivedAt.Before(s.installs[oldest].receivedAt) {
				oldest = k
			}
		}
		delete(s.installs, oldest)
	}
	in = &install{series: map[string]Sample{}}
	s.installs[id] = in
	return in
}

// SetSetting records the telemetry setting install id's agent reported
// ("off", "metrics", "metrics,logs"). Turned off, what was held of the
// install is dropped.
func (s *Store) SetSetting(id, setting string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if setting == "" || setting == "off" {
		if in := s.installs[id]; in != nil {
			*in = install{setting: setting, series: map[string]Sample{}}
		}
		return
	}
	in := s.installs[id]
	if in == nil {
		in = s.get(id, time.Time{})
	}
	in.setting = setting
	if setting != "metrics,logs" {
		in.lines, in.next = nil, 0
	}
}

// Add takes a batch install id's agent sent at now.
func (s *Store) Add(id string, b *agentv1.TelemetryBatch, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.get(id, now)
	in.receivedAt = now
	in.agentDropped = [2]uint64{b.DroppedSamples, b.DroppedLines}
	for _, m := range b.Samples {
		if len(m.Labels) > MaxSampleLabels || sampleSize(m) > MaxSampleBytes {
			in.droppedSamples++
			continue
		}
		k := seriesKey(m.Source, m.Name, m.Labels)
		if _, ok := in.series[k]; !ok && len(in.series) >= s.cfg.MaxSeries {
			in.droppedSamples++
			continue
		}
		in.series[k] = Sample{Source: m.Source, Name: m.Name, Labels: m.Labels, Value: m.Value, Time: m.Time.AsTime()}
	}
	for _, l := range b.Lines {
		if len(l.Source)+len(l.File) > MaxSampleBytes {
			in.droppedLines++
			continue
		}
		in.seq++
		line := Line{Seq: in.seq, Source: l.Source, File: l.File, Text: l.Text, Time: l.Time.AsTime()}
		if len(in.lines) < s.cfg.MaxLines {
			in.lines = append(in.lines, line)
			continue
		}
		in.lines[in.next] = line
		in.next = (in.next + 1) % s.cfg.MaxLines
	}
}

// Get returns what is held of install id, the log lines after seq
// linesAfter only.
func (s *Store) Get(id string, linesAfter uint64, now time.Time) Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.installs[id]
	if in == nil {
		return Snapshot{}
	}
	if now.Sub(in.receivedAt) > s.cfg.Expire && !in.receivedAt.IsZero() {
		in.series, in.lines, in.next = map[string]Sample{}, nil, 0
	}
	out := Snapshot{Setting: in.setting, DroppedSamples: in.agentDropped[0] + in.droppedSamples, DroppedLines: in.agentDropped[1] + in.droppedLines, ReceivedAt: in.receivedAt}
	for _, v := range in.series {
		out.Samples = append(out.Samples, v)
	}
	sort.Slice(out.Samples, func(i, j int) bool {
		a, b := out.Samples[i], out.Samples[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return seriesKey(a.Source, "", a.Labels) < seriesKey(b.Source, "", b.Labels)
	})
	ordered := append(slices.Clone(in.lines[in.next:]), in.lines[:in.next]...)
	for _, l := range ordered {
		if l.Seq > linesAfter {
			out.Lines = append(out.Lines, l)
		}
	}
	return out
}
