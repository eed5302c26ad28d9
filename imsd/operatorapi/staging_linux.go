package operatorapi

import (
	"os"

	"golang.org/x/sys/unix"
)

// stagingFile returns a file no other process can open by name: created
// with O_TMPFILE (it never has one), so a killed imsd leaves nothing
// behind; where the file system does not support that, a named file
// removed at once.
func stagingFile() (*os.File, func(), error) {
	dir := os.TempDir()
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return unlinkedFile()
	}
	f := os.NewFile(uintptr(fd), dir+"/(staged results upload)")
	return f, func() { f.Close() }, nil
}
