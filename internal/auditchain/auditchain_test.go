package auditchain

import (
	"fmt"
	"testing"
)

func chain(n int) []Record {
	var rs []Record
	var prev *Record
	for i := range n {
		r := Next(prev, Record{Chain: "inst-1", At: int64(1000 + i), Kind: "job.acked", Actor: "agent:a", Subject: fmt.Sprintf("job:%d", i), Data: `{"n":"1"}`})
		rs = append(rs, r)
		prev = &rs[len(rs)-1]
	}
	return rs
}

// TestHashEncoding pins the documented encoding: a change here breaks
// every customer's verifier.
func TestHashEncoding(t *testing.T) {
	r := Record{Chain: "inst-1", Seq: 1, At: 5, Kind: "job.acked", Actor: "agent:a", Subject: "job:j", Data: "{}", Prev: ""}
	// printf '6:inst-1,1:1,1:5,9:job.acked,7:agent:a,5:job:j,2:{},0:,' | sha256sum
	const want = "eefa0fefbe30d4ad69cc1aa7c9b041866a231d1535690bba6c1adc29fd1e4219"
	if got := Hash(r); got != want {
		t.Errorf("Hash = %s, want %s", got, want)
	}
}

func TestVerify(t *testing.T) {
	tests := []struct {
		name   string
		tamper func([]Record) []Record
		seq    int64
		what   string
	}{
		{"intact", func(rs []Record) []Record { return rs }, 0, ""},
		{"edited", func(rs []Record) []Record { rs[2].Subject = "job:x"; return rs }, 3, "changed"},
		{"edited with its hash recomputed", func(rs []Record) []Record { rs[2].Subject = "job:x"; rs[2].Hash = Hash(rs[2]); return rs }, 3, "changed"},
		{"prev edited", func(rs []Record) []Record { rs[2].Prev = rs[0].Hash + "0"; return rs }, 3, "changed"},
		{"removed", func(rs []Record) []Record { return append(rs[:2:2], rs[3:]...) }, 3, "removed"},
		{"first removed", func(rs []Record) []Record { return rs[1:] }, 1, "removed"},
		{"inserted", func(rs []Record) []Record {
			forged := Next(&rs[1], Record{Chain: "inst-1", Kind: "forged", Data: "{}"})
			out := append(rs[:2:2], forged)
			for _, r := range rs[2:] {
				r.Seq++
				out = append(out, r)
			}
			return out
		}, 3, "inserted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Verify(tc.tamper(chain(5)))
			if tc.what == "" {
				if p != nil {
					t.Fatalf("Verify: %v, want nil", p)
				}
				return
			}
			if p == nil || p.Seq != tc.seq || p.What != tc.what {
				t.Fatalf("Verify: %v, want record %d %s", p, tc.seq, tc.what)
			}
		})
	}
}
