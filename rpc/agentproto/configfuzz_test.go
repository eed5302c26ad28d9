package agentproto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// genConfig builds a config from fuzz bytes: deep chains, wide objects,
// long lists and keys, and odd types (NaN, integers, invalid UTF-8, Go
// types no config holds), within a node budget.
type genConfig struct {
	b     []byte
	nodes int
}

func (g *genConfig) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

func (g *genConfig) str() string {
	n := int(g.byte())
	if n > len(g.b) {
		n = len(g.b)
	}
	s := string(g.b[:n])
	g.b = g.b[n:]
	return s
}

func (g *genConfig) value(depth int) any {
	g.nodes++
	if g.nodes > 20_000 || depth > 300 {
		return nil
	}
	switch op := g.byte() % 14; op {
	case 0:
		return nil
	case 1:
		return g.byte()%2 == 0
	case 2:
		var buf [8]byte
		for i := range buf {
			buf[i] = g.byte()
		}
		return math.Float64frombits(binary.BigEndian.Uint64(buf[:]))
	case 3:
		return g.str()
	case 4:
		l := make([]any, g.byte()%8)
		for i := range l {
			l[i] = g.value(depth + 1)
		}
		return l
	case 5:
		return g.object(depth, int(g.byte()%8))
	case 6: // a chain
		n := int(g.byte()) * 2
		top := map[string]any{}
		cur := top
		for range n {
			next := map[string]any{}
			cur[g.str()] = next
			cur = next
		}
		return top
	case 7: // wide
		m := map[string]any{}
		n := int(g.byte()) * 60
		for i := range n {
			m["k"+strconv.Itoa(i)] = float64(i)
		}
		return m
	case 8: // a long list
		return make([]any, int(g.byte())*500)
	case 9: // a long key
		return map[string]any{strings.Repeat("k", int(g.byte())*8): g.value(depth + 1)}
	case 10:
		return int64(g.byte())
	case 11:
		return []string{g.str(), g.str()}
	case 12:
		return map[string]string{g.str(): g.str()}
	default:
		return struct{ X int }{int(g.byte())}
	}
}

func (g *genConfig) object(depth, n int) map[string]any {
	m := make(map[string]any, n)
	for range n {
		m[g.str()] = g.value(depth + 1)
	}
	return m
}

// FuzzCheckConfig: CheckConfig and ConfigDigest (the agent's and imsd's
// wire side's check) agree on every config; what CheckConfig accepts
// encodes as JSON, and decoded from it (as imsd stores it and the agent
// reads it) is still accepted, with the same digest for a config of
// float64 numbers; a refusal is a *ConfigError with a bounded path.
func FuzzCheckConfig(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{5, 2, 1, 'a', 3, 2, 'h', 'i', 1, 'b', 6, 60, 1, 'x'})
	f.Add([]byte{5, 1, 1, 'w', 7, 170})
	f.Add([]byte{5, 1, 1, 'n', 2, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{5, 1, 1, 's', 3, 2, 0xff, 0xfe})
	f.Add([]byte{5, 1, 1, 'l', 8, 201})
	f.Add([]byte{5, 1, 0, 9, 129, 0})
	f.Add([]byte{5, 2, 1, 'i', 10, 7, 1, 'o', 13, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		g := &genConfig{b: b}
		cfg := g.object(0, int(g.byte()%6))
		err := CheckConfig(cfg)
		var ce *ConfigError
		if err != nil {
			if !errors.As(err, &ce) {
				t.Fatalf("CheckConfig: %v is not a *ConfigError", err)
			}
			if len(ce.Path) > maxPathBytes+100 || ce.Problem == "" {
				t.Fatalf("CheckConfig: path of %d bytes, problem %q", len(ce.Path), ce.Problem)
			}
		}
		_, derr := ConfigDigest(cfg)
		if err != nil && derr == nil {
			t.Fatalf("ConfigDigest took a config CheckConfig refused (%v)", err)
		}
		if err != nil {
			return
		}
		js, jerr := json.Marshal(cfg)
		if jerr != nil {
			t.Fatalf("CheckConfig took a config that does not encode as JSON: %v", jerr)
		}
		var back map[string]any
		if err := json.Unmarshal(js, &back); err != nil {
			t.Fatal(err)
		}
		if err := CheckConfig(back); err != nil {
			t.Fatalf("accepted, but not once through JSON: %v", err)
		}
		d2, err := ConfigDigest(back)
		if err != nil {
			t.Fatalf("accepted, but the agent's digest refuses it through JSON: %v", err)
		}
		if derr == nil {
			d1, _ := ConfigDigest(cfg)
			if d1 != d2 {
				t.Fatal("the digest changed through JSON")
			}
		}
	})
}
