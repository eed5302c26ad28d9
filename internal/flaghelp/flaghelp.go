// Package flaghelp parses a standard library flag.FlagSet the way byoc's
// own command line does: asking for help (-h, --help) is not a mistake.
package flaghelp

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// Parse parses args into fs. Asked for help (-h, -help, --help) it prints
// fs's usage on stdout and returns code 0 with done; a bad flag is
// reported, with the usage, on fs.Output() and returns code 2 with done.
// fs.Usage, when set, must print to fs.Output().
func Parse(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, done bool) {
	usage, out := fs.Usage, fs.Output()
	if usage == nil {
		usage = func() {
			fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
			fs.PrintDefaults()
		}
	}
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		usage()
		fs.SetOutput(out)
		return 0, true
	default:
		usage()
		return 2, true
	}
}
