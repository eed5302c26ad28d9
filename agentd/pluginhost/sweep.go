package pluginhost

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/byoc-dev/byoc/internal/procowner"
)

// socketDirPrefix starts the name of every plugin socket directory, which
// goes on with the creating agent's procowner tag: byoc-plugin-PID.START-N.
const socketDirPrefix = "byoc-plugin-"

// newSocketDir makes a plugin socket directory in the temp dir, named
// after this process.
func newSocketDir() (string, error) {
	me, err := procowner.Self()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", socketDirPrefix+me.String()+"-")
	if err != nil {
		return "", err
	}
	// go-plugin binds DIR/pluginNNNNNNNNNN: a unix socket path holds at
	// most 107 bytes, and a longer one fails in bind with a bare
	// "invalid argument".
	if len(dir)+len("/plugin")+10 > maxSocketPath {
		os.Remove(dir)
		return "", fmt.Errorf("the temp dir %s is too long for a plugin's unix socket (at most %d bytes with the socket's name): give agentd a shorter TMPDIR", os.TempDir(), maxSocketPath)
	}
	return dir, nil
}

// maxSocketPath is the longest unix socket path Linux binds (sun_path
// is 108 bytes with its terminating NUL).
const maxSocketPath = 107

// SweepSocketDirs removes the plugin socket directories that agents which
// no longer run left in dir (the temp dir when empty): go-plugin's sockets
// of plugins whose agent was killed before it could clean up. Only
// directories that are named after an agent process that is gone and are
// owned by this process's user are removed; those of any running agent,
// this one included, and anything else in dir are left alone. It returns
// the directories it removed, and the first error met (it goes on past
// it).
func SweepSocketDirs(dir string) (removed []string, err error) {
	if dir == "" {
		dir = os.TempDir()
	}
	entries, rerr := os.ReadDir(dir)
	if rerr != nil {
		return nil, fmt.Errorf("sweep plugin socket dirs: %w", rerr)
	}
	for _, e := range entries {
		name := e.Name()
		owner, _, ok := procowner.Parse(strings.TrimPrefix(name, socketDirPrefix))
		if !strings.HasPrefix(name, socketDirPrefix) || !ok || owner.Alive() {
			continue
		}
		path := filepath.Join(dir, name)
		// Lstat: a symlink named like a socket dir is not followed.
		fi, serr := os.Lstat(path)
		if serr != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		if rerr := os.RemoveAll(path); rerr != nil {
			if err == nil {
				err = fmt.Errorf("sweep plugin socket dir: %w", rerr)
			}
			continue
		}
		removed = append(removed, path)
	}
	return removed, err
}
