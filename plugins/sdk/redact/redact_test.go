package redact_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/plugins/sdk/redact"
)

func TestString(t *testing.T) {
	r := redact.New("hunter22", "s3cr3t-token", "ab", "-----BEGIN KEY-----\nMIIEvQIBADANBg\n-----END KEY-----")
	tests := []struct{ in, want string }{
		{"password=hunter22!", "password=***!"},
		{"hunter22hunter22", "***"},
		{"token s3cr3t-token and hunter22", "token *** and ***"},
		{"short ab stays", "short ab stays"},
		{"key line MIIEvQIBADANBg", "key line ***"},
		{"nothing here", "nothing here"},
	}
	for _, tt := range tests {
		if got := r.String(tt.in); got != tt.want {
			t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := r.Map(map[string]string{"k": "v=hunter22"}); got["k"] != "v=***" {
		t.Errorf("Map = %v", got)
	}
}

// A secret split across consecutive events of a stream is still redacted,
// wherever it is cut, and no event is lost or reordered.
func TestStreamSplitSecret(t *testing.T) {
	const secret = "correct-horse-battery"
	text := "before " + secret + " after " + secret
	r := redact.New(secret)
	for cut1 := 1; cut1 < len(text); cut1++ {
		for _, cut2 := range []int{cut1 + 1, cut1 + 5, len(text)} {
			if cut2 > len(text) {
				continue
			}
			chunks := []string{text[:cut1], text[cut1:cut2], text[cut2:]}
			var got []string
			s := r.NewStream(0, func(e redact.Event) { got = append(got, e.Text) })
			for i, c := range chunks {
				if c != "" {
					s.Add(redact.Event{Stream: 1, Text: c})
				}
				// Lines of another stream in between change nothing.
				if i == 0 {
					s.Add(redact.Event{Stream: 2, Text: "other stream"})
				}
			}
			s.Flush()
			all := strings.Join(got, "")
			// No event may hold any 4-byte piece of the secret (the text
			// around it shares none).
			for _, e := range got {
				for j := 0; j+4 <= len(secret); j++ {
					if strings.Contains(e, secret[j:j+4]) {
						t.Fatalf("cuts %d,%d: event %q leaks %q; events %q", cut1, cut2, e, secret[j:j+4], got)
					}
				}
			}
			all = strings.Replace(all, "other stream", "", 1)
			if strings.Contains(all, secret) || !strings.HasPrefix(all, "before ") || !strings.Contains(all, " after ") {
				t.Fatalf("cuts %d,%d: events %q", cut1, cut2, got)
			}
		}
	}
}

func TestStreamKeepsOrder(t *testing.T) {
	r := redact.New("zzzz-secret")
	var got []string
	s := r.NewStream(time.Hour, func(e redact.Event) { got = append(got, fmt.Sprint(e.Stream, ":", e.Text)) })
	s.Add(redact.Event{Stream: 1, Text: "line one"})
	s.Add(redact.Event{Stream: 1, Text: "line two ends with zz"})
	s.Add(redact.Event{Stream: 3, Text: "system line."})
	if !slices.Equal(got, []string{"1:line one"}) {
		t.Fatalf("got %q; the line ending like the secret's start, and what follows it, must wait", got)
	}
	// (Lines end in "." lest they end like the start of an encoded form,
	// "enp6ei1zZWNyZXQ=", which would hold them.)
	s.Add(redact.Event{Stream: 1, Text: "zz-secret and more."})
	if want := []string{"1:line one", "1:line two ends with ***", "3:system line.", "1:*** and more."}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestStreamHeldLineIsReleasedAfterHold(t *testing.T) {
	r := redact.New("zzzz-secret")
	var mu sync.Mutex
	var got []string
	done := make(chan struct{})
	s := r.NewStream(20*time.Millisecond, func(e redact.Event) {
		mu.Lock()
		got = append(got, e.Text)
		mu.Unlock()
		close(done)
	})
	s.Add(redact.Event{Stream: 1, Text: "prompt zz"})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("held line never released")
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []string{"prompt zz"}) {
		t.Errorf("got %q", got)
	}
}
