package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/internal/plugindist"
)

const pinsUsage = `usage: agentd plugin [--state-dir DIR] pin|unpin|list ...

The customer's plugin pins, kept in DIR/plugin-pins.json: an external
plugin (byoc-plugin-TYPE in --plugin-dir) runs only when its SHA-256 is
the one pinned for its type. A running agentd reads the file again before
it starts the next plugin (no restart) and records every change in its
journal (plugin.pinned, plugin.unpinned; agentd audit). A pin here wins
over a --plugin-pin flag for the same type.

  list                       print the pins
  pin TYPE SHA256            pin TYPE to a checksum
  pin TYPE --file PATH       pin TYPE to the checksum of the binary at PATH
                             (check it is the binary you mean to run)
  pin TYPE --release REF     pin TYPE to a plugin release by digest
                             (oci://HOST/REPOSITORY@sha256:HEX): the first
                             job that needs TYPE reads REPOSITORY@sha256:HEX
                             from the install registry, checks it as install
                             does, installs it and completes the pin
  unpin TYPE                 remove TYPE's pin: its plugin no longer runs
  install REF                install a plugin release (byoc plugin publish)
                             from the vendor registry: REF is
                             oci://HOST/REPOSITORY@sha256:HEX. It is copied
                             into the install registry (--install-registry,
                             default oci:DIR/registry) by digest with its
                             signature, read back from there, its signature
                             checked against imsd's keys (the ones pinned at
                             enrolment) and every blob against its digest;
                             then its binary for this machine (--platform)
                             is installed under DIR/plugins and pinned. An
                             upgrade is an install of the new digest: the
                             running agent uses it for the next job. A
                             refused release is recorded in the agent's
                             journal (supply_chain.refused; agentd audit).

Without a word after "plugin" that is one of these, "agentd plugin TYPE"
serves a built-in type (the agent runs that itself).
`

// pinsCommands are the words after "agentd plugin" that manage pins.
var pinsCommands = []string{"pin", "unpin", "list", "install"}

// isPinsCmd reports whether "agentd plugin ARGS" manages pins: its first
// word that is no flag or flag value is one of pinsCommands, or it asks
// for help.
func isPinsCmd(args []string) bool {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-h" || a == "-help" || a == "--help":
			return true
		case slices.Contains([]string{"state-dir", "file", "install-registry", "platform", "release"}, strings.TrimLeft(a, "-")):
			i++
		case len(a) > 0 && a[0] == '-':
		default:
			return slices.Contains(pinsCommands, a)
		}
	}
	return false
}

// pinsCmd runs "agentd plugin pin|unpin|list ...".
func pinsCmd(args []string, stdout, stderr io.Writer, now time.Time) int {
	fs := flag.NewFlagSet("agentd plugin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), pinsUsage) }
	stateDir := fs.String("state-dir", os.Getenv("BYOC_STATE_DIR"), "the agent's state `directory`; also $BYOC_STATE_DIR")
	file := fs.String("file", "", "pin to the SHA-256 of the binary at `PATH`")
	release := fs.String("release", "", "pin to the plugin release `REF` (oci://HOST/REPOSITORY@sha256:HEX)")
	registry := fs.String("install-registry", os.Getenv("BYOC_INSTALL_REGISTRY"), "install: the install registry `location`; default oci:STATE/registry")
	platform := fs.String("platform", runtime.GOOS+"/"+runtime.GOARCH, "install: the binary's `OS/ARCH`")
	words, code := parseWords(fs, args, stdout)
	if words == nil {
		return code
	}
	cmd, rest := words[0], words[1:]
	dir, code := stateDirArg("agentd plugin", *stateDir, stderr)
	if code != 0 {
		return code
	}
	path := filepath.Join(dir, pluginhost.PinFileName)
	if cmd == "install" {
		if len(rest) != 1 {
			fmt.Fprintf(stderr, "agentd plugin install: want REF (oci://HOST/REPOSITORY@sha256:HEX)\n")
			return 2
		}
		return installCmd(context.Background(), dir, *registry, *platform, rest[0], stdout, stderr, now)
	}
	if cmd == "pin" || cmd == "unpin" {
		unlock, err := pluginhost.LockPins(path)
		if err != nil {
			fmt.Fprintf(stderr, "agentd plugin %s: %v\n", cmd, err)
			return 1
		}
		defer unlock()
	}
	pf, err := pluginhost.ReadPins(path)
	if err != nil && cmd != "pin" && cmd != "unpin" {
		fmt.Fprintf(stderr, "agentd plugin %s: %v\n", cmd, err)
		return 1
	}
	if err != nil {
		// A broken file is replaced by a good one, keeping nothing of it:
		// say so rather than refuse the way out.
		fmt.Fprintf(stderr, "agentd plugin %s: %v; writing a new file\n", cmd, err)
		pf = pluginhost.PinFile{Pins: map[string]pluginhost.Pin{}}
	}
	switch cmd {
	case "list":
		if len(rest) != 0 {
			fmt.Fprintf(stderr, "agentd plugin list: unexpected argument %q\n", rest[0])
			return 2
		}
		if len(pf.Pins) == 0 {
			fmt.Fprintf(stdout, "no plugin pins in %s\n", path)
			return 0
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TYPE\tSHA256\tPINNED AT\tBY\tSOURCE")
		for _, t := range slices.Sorted(maps.Keys(pf.Pins)) {
			p := pf.Pins[t]
			at := ""
			if !p.PinnedAt.IsZero() {
				at = p.PinnedAt.UTC().Format(time.RFC3339)
			}
			sum := p.SHA256
			if sum == "" {
				sum = "(release: the next job installs it)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t, sum, at, p.PinnedBy, cmp.Or(p.Source, p.OCI))
		}
		tw.Flush()
		return 0
	case "pin":
		var typ, sum, source string
		switch {
		case len(rest) == 1 && *release != "" && *file == "":
			typ = rest[0]
			ref, err := plugindist.ParseRef(*release)
			if err != nil {
				fmt.Fprintf(stderr, "agentd plugin pin: --release: %v\n", err)
				return 2
			}
			if err := pluginhost.CheckPin(typ, strings.Repeat("0", 64)); err != nil {
				fmt.Fprintf(stderr, "agentd plugin pin: %v\n", err)
				return 2
			}
			old := pf.Pins[typ]
			pf.Pins[typ] = pluginhost.Pin{OCI: ref.String(), PinnedAt: now.UTC(), PinnedBy: whoami()}
			if err := pluginhost.WritePins(path, pf); err != nil {
				fmt.Fprintf(stderr, "agentd plugin pin: %v\n", err)
				return 1
			}
			fmt.Fprintf(stdout, "pinned %s to release %s", typ, ref)
			if old.OCI != "" || old.SHA256 != "" {
				fmt.Fprintf(stdout, " (was %s)", cmp.Or(old.OCI, old.SHA256))
			}
			fmt.Fprintf(stdout, "; the next job of type %s installs it from the install registry\n", typ)
			return 0
		case len(rest) == 2 && *file == "" && *release == "":
			typ, sum = rest[0], rest[1]
		case len(rest) == 1 && *file != "" && *release == "":
			typ = rest[0]
			if source, err = filepath.Abs(*file); err == nil {
				sum, err = fileSHA256(source)
			}
			if err != nil {
				fmt.Fprintf(stderr, "agentd plugin pin: --file: %v\n", err)
				return 1
			}
		default:
			fmt.Fprintf(stderr, "agentd plugin pin: want TYPE SHA256, TYPE --file PATH, or TYPE --release REF\n")
			return 2
		}
		if err := pluginhost.CheckPin(typ, sum); err != nil {
			fmt.Fprintf(stderr, "agentd plugin pin: %v\n", err)
			return 2
		}
		old := pf.Pins[typ]
		pf.Pins[typ] = pluginhost.Pin{SHA256: sum, PinnedAt: now.UTC(), PinnedBy: whoami(), Source: source}
		if err := pluginhost.WritePins(path, pf); err != nil {
			fmt.Fprintf(stderr, "agentd plugin pin: %v\n", err)
			return 1
		}
		if old.SHA256 != "" && old.SHA256 != sum {
			fmt.Fprintf(stdout, "re-pinned %s: %s (was %s)\n", typ, sum, old.SHA256)
		} else {
			fmt.Fprintf(stdout, "pinned %s: %s\n", typ, sum)
		}
		return 0
	case "unpin":
		if len(rest) != 1 {
			fmt.Fprintf(stderr, "agentd plugin unpin: want TYPE\n")
			return 2
		}
		if _, ok := pf.Pins[rest[0]]; !ok {
			fmt.Fprintf(stderr, "agentd plugin unpin: %s is not pinned in %s\n", rest[0], path)
			return 1
		}
		delete(pf.Pins, rest[0])
		if err := pluginhost.WritePins(path, pf); err != nil {
			fmt.Fprintf(stderr, "agentd plugin unpin: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "unpinned %s\n", rest[0])
		return 0
	}
	fmt.Fprintf(stderr, "agentd plugin: unknown command %q\n\n%s", cmd, pinsUsage)
	return 2
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
