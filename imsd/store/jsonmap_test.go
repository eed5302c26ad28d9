package store

import (
	"encoding/json"
	"testing"
)

// FuzzEncodeMap: encodeMap writes exactly what encoding/json writes.
func FuzzEncodeMap(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"b\\", "<a&b>", "\x00\x1f\b\f\n\r\t", "\u2028\u2029", "\xff\xfe", "é✓😀", "a\xc3"} {
		f.Add(s, s+"x", "k")
	}
	f.Fuzz(func(t *testing.T, k1, v1, v2 string) {
		m := map[string]string{k1: v1, "k2" + k1: v2, "z": v1 + v2}
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := encodeMap(m); got != string(want) {
			t.Fatalf("encodeMap = %s, json.Marshal = %s", got, want)
		}
	})
}
