package redact_test

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk/redact"
)

// A secret's base64 (whole, and inside longer base64 at every
// alignment), URL-encoded and JSON-escaped forms are masked too.
func TestEncodedForms(t *testing.T) {
	const secret = `p@ss/w0rd+"quoted"<&>`
	r := redact.New(secret)
	js, _ := json.Marshal(secret)
	for name, in := range map[string]string{
		"base64":              base64.StdEncoding.EncodeToString([]byte(secret)),
		"base64 url":          base64.URLEncoding.EncodeToString([]byte(secret)),
		"base64 raw":          base64.RawStdEncoding.EncodeToString([]byte(secret)),
		"query escape":        url.QueryEscape(secret),
		"path escape":         url.PathEscape(secret),
		"json (html escaped)": string(js[1 : len(js)-1]),
		"json":                strings.NewReplacer(`"`, `\"`).Replace(secret),
	} {
		t.Run(name, func(t *testing.T) {
			got := r.String("x=" + in + ";")
			if got != "x=***;" {
				t.Fatalf("String(%q) = %q, want x=***;", in, got)
			}
		})
	}
	// Inside a longer base64 text, the characters that hold only the
	// secret's bits are masked, whatever comes before it.
	for k := range 3 {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			prefix := strings.Repeat("A", k)
			all := enc.EncodeToString([]byte("user:" + prefix + secret + ":more"))
			got := r.String(all)
			if !strings.Contains(got, redact.Mask) {
				t.Errorf("base64 of the secret after %d bytes: %q not masked", 5+k, got)
			}
			// What is left is too little to rebuild it.
			if leak := strings.ReplaceAll(got, redact.Mask, ""); len(all)-len(leak) < 4*len(secret)/3-2 {
				t.Errorf("base64 of the secret after %d bytes: %q masks too little of %q", 5+k, got, all)
			}
		}
	}
}
