package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// pluginSocket is where a started plugin serves, as the agent connects to
// it. go-plugin dials whatever address the plugin's handshake line names:
// a TCP address anywhere, or any unix socket on this machine. The
// plugin's own code (the vendor's) writes that line, and the agent dials
// from its own network and file system, not the sandbox's: an announced
// `tcp|attacker.example:443` would carry the job's request (its
// environment, credentials and secrets) past the sandbox's network and
// the customer's egress rules, and an announced socket of the machine's
// (or a symlink in the socket directory to one) would have the agent talk
// to it. So the agent connects only to a unix socket that is itself a
// socket, not a symlink, directly in the plugin's own socket directory,
// and through a descriptor of that socket taken when it was checked, so
// nothing swapped in later is reached.
type pluginSocket struct {
	// dir is the plugin's socket directory (the agent's, made for it).
	dir string

	mu sync.Mutex
	// fd is an O_PATH descriptor of the checked socket; nil until check.
	fd *os.File
}

// check verifies addr, the address the plugin's handshake named, and
// keeps a descriptor of the socket for dial.
func (s *pluginSocket) check(addr net.Addr) error {
	if addr == nil {
		return errors.New("the plugin named no address in its handshake")
	}
	if addr.Network() != "unix" {
		return fmt.Errorf("the plugin's handshake names %s address %s: a plugin serves on a unix socket in the directory the agent gives it (%s), and the agent connects to nothing else",
			addr.Network(), addr.String(), s.dir)
	}
	path := addr.String()
	if filepath.Dir(filepath.Clean(path)) != filepath.Clean(s.dir) {
		return fmt.Errorf("the plugin's handshake names socket %s, outside the directory the agent gives it (%s): the agent connects to nothing else", path, s.dir)
	}
	dir, err := unix.Open(s.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the plugin's socket directory %s: %w", s.dir, err)
	}
	defer unix.Close(dir)
	fd, err := unix.Openat(dir, filepath.Base(path), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the plugin's socket %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("the plugin's socket %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return fmt.Errorf("the plugin's handshake names %s, which is a %s, not a socket: the agent connects to nothing else", path, fileKind(st.Mode))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd != nil {
		s.fd.Close()
	}
	s.fd = os.NewFile(uintptr(fd), path)
	return nil
}

// fileKind names a file type (from stat's mode) for people.
func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	default:
		return "special file"
	}
}

// dial connects to the checked socket, through its descriptor: the
// kernel resolves /proc/self/fd/N to that very socket, whatever the
// directory holds by now. It is go-plugin's dialer (grpc's), so the
// address grpc passes is ignored.
func (s *pluginSocket) dial(ctx context.Context, _ string) (net.Conn, error) {
	s.mu.Lock()
	fd := s.fd
	s.mu.Unlock()
	if fd == nil {
		return nil, errUnchecked
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(int(fd.Fd())))
	if err != nil {
		return nil, fmt.Errorf("connect to the plugin's socket %s: %w", fd.Name(), err)
	}
	return c, nil
}

// errUnchecked is dial's refusal before (or without) a checked socket.
// It is not temporary, so that a dial that blocks gives up on it at once.
var errUnchecked = permanent{errors.New("the plugin's socket was not checked: the agent connects to nothing else")}

// permanent is an error grpc does not retry (Temporary reports false).
type permanent struct{ error }

func (permanent) Temporary() bool { return false }

// close drops the descriptor.
func (s *pluginSocket) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd != nil {
		s.fd.Close()
		s.fd = nil
	}
}
