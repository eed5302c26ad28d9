// Package asciicast reads asciicast v2 recordings (a header line, then
// one [time, code, data] event a line) and plays their output to a
// terminal with its timing. agentd (the customer's recordings) and the
// byoc CLI (the vendor's copy) share it.
package asciicast

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Header is an asciicast v2 header.
type Header struct {
	Version   int               `json:"version"`
	Width     int               `json:"width"`
	Height    int               `json:"height"`
	Timestamp int64             `json:"timestamp"`
	Title     string            `json:"title,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
}

// Event is one asciicast v2 event: seconds since the start, its code
// ("o", "i" or "r") and its data.
type Event struct {
	Time float64
	Code string
	Data string
}

// Read reads a recording and checks it is valid asciicast v2: a header
// of version 2 with a width, a height and a timestamp, then events with
// times that never go back and codes o, i or r (and m, markers).
func Read(r io.Reader) (Header, []Event, error) {
	var h Header
	var evs []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	line := 0
	last := 0.0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if line == 1 {
			if err := json.Unmarshal(b, &h); err != nil {
				return h, nil, fmt.Errorf("line 1: header: %w", err)
			}
			if h.Version != 2 || h.Width <= 0 || h.Height <= 0 || h.Timestamp <= 0 {
				return h, nil, fmt.Errorf("line 1: header: want version 2, a width, a height and a timestamp, got %s", b)
			}
			continue
		}
		if len(b) == 0 {
			continue
		}
		var raw []json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil || len(raw) != 3 {
			return h, nil, fmt.Errorf("line %d: an event is [time, code, data]: %s", line, b)
		}
		var e Event
		if err := json.Unmarshal(raw[0], &e.Time); err != nil {
			return h, nil, fmt.Errorf("line %d: time: %w", line, err)
		}
		if err := json.Unmarshal(raw[1], &e.Code); err != nil {
			return h, nil, fmt.Errorf("line %d: code: %w", line, err)
		}
		if err := json.Unmarshal(raw[2], &e.Data); err != nil {
			return h, nil, fmt.Errorf("line %d: data: %w", line, err)
		}
		switch e.Code {
		case "o", "i", "r", "m":
		default:
			return h, nil, fmt.Errorf("line %d: code %q: want o, i, r or m", line, e.Code)
		}
		if e.Time < last {
			return h, nil, fmt.Errorf("line %d: time %f goes back from %f", line, e.Time, last)
		}
		last = e.Time
		evs = append(evs, e)
	}
	if err := sc.Err(); err != nil {
		return h, nil, err
	}
	if line == 0 {
		return h, nil, errors.New("empty recording: no header")
	}
	return h, evs, nil
}

// Play writes the output events of evs to w with their timing, speed
// times faster, or (raw) at once, byte for byte. It returns nil when ctx
// ends first.
func Play(ctx context.Context, evs []Event, speed float64, raw bool, w io.Writer) error {
	if speed <= 0 {
		speed = 1
	}
	if !raw {
		// For a viewer's terminal: no control strings (Safe).
		w = Safe(w)
	}
	start := time.Now()
	for _, e := range evs {
		if e.Code != "o" {
			continue
		}
		if !raw {
			at := start.Add(time.Duration(e.Time / speed * float64(time.Second)))
			if d := time.Until(at); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil
				case <-t.C:
				}
			}
		}
		if _, err := io.WriteString(w, e.Data); err != nil {
			return err
		}
	}
	return nil
}
