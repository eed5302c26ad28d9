package redact_test

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk/redact"
)

// FuzzStream cuts a text holding a secret, plain and in one of its
// encoded forms, into events on two streams at random points. Properties:
// each stream's output, joined, holds neither the secret nor any of its
// whole encoded forms (however the events were cut); every event comes
// out once, in order, on its stream; a stream with nothing to redact
// comes out unchanged.
//
// Secrets holding the mask's "*" are left out: masking next to such a
// secret's own stars can spell it again.
func FuzzStream(f *testing.F) {
	f.Add("hunter22", "password=", " and then ", []byte{3, 9, 200, 17, 4, 4, 1}, uint8(0))
	f.Add("correct-horse-battery", "a\nb", "", []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, uint8(1))
	f.Add("p@ss/w0rd+\"q\"<&>", `{"k":"`, `"}`, []byte{0, 255, 31}, uint8(5))
	f.Add("-----BEGIN KEY-----\nMIIEvQIBADANBg\n-----END KEY-----", "key: ", "\n", []byte{40, 41, 42}, uint8(2))
	f.Add("aaaa", "aaa", "aaaaa", []byte{0, 1, 0, 1}, uint8(3))
	f.Fuzz(func(t *testing.T, secret, before, after string, cuts []byte, form uint8) {
		if len(secret) < redact.MinLength || strings.Contains(secret, redact.Mask[:1]) {
			return
		}
		forms := wholeForms(secret)
		text := before + forms[int(form)%len(forms)] + after + secret
		r := redact.New(secret)
		var in []redact.Event
		for i := 0; len(text) > 0; i++ {
			n, st := len(text), int32(0)
			if i < len(cuts) {
				n, st = min(n, 1+int(cuts[i]>>1)%24), int32(cuts[i]&1)
			}
			in = append(in, redact.Event{Stream: st, Text: text[:n]})
			text = text[n:]
		}
		var out []redact.Event
		s := r.NewStream(0, func(e redact.Event) { out = append(out, e) })
		for _, e := range in {
			s.Add(e)
		}
		s.Flush()
		if len(out) != len(in) {
			t.Fatalf("%d events in, %d out", len(in), len(out))
		}
		for st := range int32(2) {
			var inText, outText strings.Builder
			for i := range in {
				if in[i].Stream != out[i].Stream {
					t.Fatalf("event %d came out on stream %d, went in on %d", i, out[i].Stream, in[i].Stream)
				}
				if in[i].Stream == st {
					inText.WriteString(in[i].Text)
					outText.WriteString(out[i].Text)
				}
			}
			for _, f := range forms {
				if strings.Contains(outText.String(), f) {
					t.Fatalf("stream %d: %q survives in %q", st, f, outText.String())
				}
			}
			if r.String(inText.String()) == inText.String() && outText.String() != inText.String() {
				t.Fatalf("stream %d changed with nothing to redact: %q became %q", st, inText.String(), outText.String())
			}
		}
	})
}

// wholeForms is the secret and its encodings as a program prints them.
func wholeForms(secret string) []string {
	js, _ := json.Marshal(secret)
	var raw strings.Builder
	e := json.NewEncoder(&raw)
	e.SetEscapeHTML(false)
	e.Encode(secret)
	jr := strings.TrimSpace(raw.String())
	return []string{
		secret,
		base64.StdEncoding.EncodeToString([]byte(secret)),
		base64.URLEncoding.EncodeToString([]byte(secret)),
		base64.RawStdEncoding.EncodeToString([]byte(secret)),
		url.QueryEscape(secret),
		url.PathEscape(secret),
		string(js[1 : len(js)-1]),
		jr[1 : len(jr)-1],
	}
}
