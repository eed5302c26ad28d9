package pluginhost

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// checkOwner refuses a file owned by anyone but root or the agent's user:
// its owner could change it after it was pinned.
func checkOwner(what string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := int(st.Uid); uid != 0 && uid != os.Getuid() {
		return fmt.Errorf("%s is owned by uid %d, neither root nor the agent's user (uid %d); refusing to run plugins from it", what, uid, os.Getuid())
	}
	return nil
}
