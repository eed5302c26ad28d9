package flaghelp

import (
	"bytes"
	"flag"
	"fmt"
	"strings"
	"testing"
)

// -h and --help print the usage on stdout and exit 0; a bad flag prints
// its error and the usage on the flag set's output and exits 2.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		args             []string
		code             int
		done             bool
		wantOut, wantErr string
	}{
		{[]string{"-h"}, 0, true, "usage: x", ""},
		{[]string{"--help"}, 0, true, "usage: x", ""},
		{[]string{"--bogus"}, 2, true, "", "flag provided but not defined: -bogus\nusage: x"},
		{[]string{"--n", "3", "word"}, 0, false, "", ""},
	} {
		var out, errOut bytes.Buffer
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(&errOut)
		fs.Usage = func() { fmt.Fprint(fs.Output(), "usage: x\n") }
		fs.Int("n", 0, "")
		code, done := Parse(fs, c.args, &out)
		if code != c.code || done != c.done {
			t.Errorf("%v: code %d done %v, want %d %v", c.args, code, done, c.code, c.done)
		}
		if !strings.Contains(out.String(), c.wantOut) || (c.wantOut == "" && out.Len() > 0) {
			t.Errorf("%v: stdout %q, want %q", c.args, out.String(), c.wantOut)
		}
		if !strings.Contains(errOut.String(), c.wantErr) || (c.wantErr == "" && errOut.Len() > 0) {
			t.Errorf("%v: stderr %q, want %q", c.args, errOut.String(), c.wantErr)
		}
	}
	// Without a Usage of its own, the default one (the flags) is printed.
	var out bytes.Buffer
	fs := flag.NewFlagSet("y", flag.ContinueOnError)
	fs.Int("n", 0, "how many")
	if code, done := Parse(fs, []string{"--help"}, &out); code != 0 || !done || !strings.Contains(out.String(), "how many") {
		t.Errorf("default usage: %d %v %q", code, done, out.String())
	}
}
