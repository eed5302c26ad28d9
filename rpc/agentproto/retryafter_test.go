package agentproto

import (
	"testing"
	"time"
)

func TestRetryAfterRoundTrip(t *testing.T) {
	if d, ok := ParseRetryAfter(FormatRetryAfter(1500 * time.Millisecond)); !ok || d != 1500*time.Millisecond {
		t.Fatalf("ParseRetryAfter(FormatRetryAfter(1.5s)) = %s, %v", d, ok)
	}
	for _, v := range []string{"", "soon", "0", "-5", "3600001", "1.5"} {
		if d, ok := ParseRetryAfter(v); ok {
			t.Errorf("ParseRetryAfter(%q) = %s, true; want no hint", v, d)
		}
	}
}
