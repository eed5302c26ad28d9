package bundlefile

import (
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// directOpen opens the file behind f again (the same inode, through
// /proc/self/fd: not its name, which may point elsewhere by now) for
// direct I/O; nil when the system or the file system refuses.
func directOpen(f *os.File) *os.File {
	if os.Getenv("BYOC_BUNDLE_NO_DIRECT_IO") != "" {
		return nil
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), f.Name())
}

// preadDirect reads len(buf) bytes at off (both aligned) once: fewer
// only at the end of the file.
func preadDirect(f *os.File, buf []byte, off int64) (int, error) {
	for {
		n, err := unix.Pread(int(f.Fd()), buf, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, &os.PathError{Op: "read", Path: f.Name(), Err: err}
		}
		return n, nil
	}
}

func isInvalid(err error) bool { return errors.Is(err, unix.EINVAL) }
