package asciicast_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/internal/asciicast"
)

const cast = `{"version":2,"width":80,"height":24,"timestamp":1700000000}
[0.0,"o","$ "]
[0.01,"i","ls\r"]
[0.02,"o","a b\r\n"]
[0.03,"r","100x40"]
`

// Play writes the output events alone, raw at once and timed no sooner
// than their times (divided by the speed).
func TestReadAndPlay(t *testing.T) {
	h, evs, err := asciicast.Read(strings.NewReader(cast))
	if err != nil || h.Width != 80 || len(evs) != 4 {
		t.Fatalf("read: %+v %v %v", h, evs, err)
	}
	var out bytes.Buffer
	if err := asciicast.Play(context.Background(), evs, 1, true, &out); err != nil || out.String() != "$ a b\r\n" {
		t.Fatalf("raw: %q %v", out.String(), err)
	}
	out.Reset()
	start := time.Now()
	if err := asciicast.Play(context.Background(), evs, 0.5, false, &out); err != nil || out.String() != "$ a b\r\n" {
		t.Fatalf("timed: %q %v", out.String(), err)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Fatalf("timed at speed 0.5 took %v, want at least 40ms", d)
	}
	if _, _, err := asciicast.Read(strings.NewReader(cast + `[0.01,"o","x"]` + "\n")); err == nil || !strings.Contains(err.Error(), "line 6") {
		t.Fatalf("time going back: %v", err)
	}
}
