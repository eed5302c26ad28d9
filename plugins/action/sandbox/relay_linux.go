package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Relay is a sandbox's only way out of its network namespace of its own
// (Mounts.Egress): inside, a listener on 127.0.0.1:Port passes every
// connection it accepts, byte for byte, to the Unix socket Socket, where
// the agent's egress proxy (outside the sandbox) decides where it may
// go. Socket's directory must be one the sandbox shows (a Writable
// path). Forwards are loopback addresses (127.0.0.1:PORT) that the relay
// also listens on inside, each connection tunnelled to the same address
// outside through the proxy (an HTTP CONNECT): the endpoints the agent
// itself was configured with that lie on the host's loopback, which
// clients never send through a proxy.
type Relay struct {
	Socket   string   `json:"socket"`
	Port     int      `json:"port"`
	Forwards []string `json:"forwards,omitempty"`
}

// relayTimeout bounds the relay's handshake with the proxy for a
// forwarded connection.
const relayTimeout = 30 * time.Second

// RelayCommand returns the argv that runs argv behind r inside a
// sandbox whose network namespace someone else built (bubblewrap): exe,
// the binary serving InitArg, is executed through descriptor exeFD; it
// starts r's listeners, then argv as its child (which inherits
// descriptors 3 … 3+files-1), passes signals on and exits with argv's
// status.
func RelayCommand(exeFD int, r Relay, argv []string, files int) ([]string, error) {
	spec, err := jsonSpec(initSpec{Relay: &r, RelayOnly: true, Argv: argv, Files: files})
	if err != nil {
		return nil, err
	}
	return []string{"/proc/self/fd/" + strconv.Itoa(exeFD), InitArg, spec}, nil
}

// RelayEnv carries a Relay (JSON) to a plugin binary of the agent's own
// (agentd, byoc-plugins) that runs it itself: under bubblewrap, that
// saves starting one more process per plugin. The relay is no security
// boundary (the plugin may use the socket directly), so the plugin
// process may serve it.
const RelayEnv = "BYOC_EGRESS_RELAY"

// StartRelayFromEnv starts the relay RelayEnv describes, if any, and
// removes the variable so that nothing the plugin starts sees it.
func StartRelayFromEnv() error {
	v, ok := os.LookupEnv(RelayEnv)
	if !ok {
		return nil
	}
	os.Unsetenv(RelayEnv)
	var r Relay
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return fmt.Errorf("%s: %w", RelayEnv, err)
	}
	return startRelay(r)
}

// loopbackUp brings up the loopback interface of a new network
// namespace (bubblewrap does the same for its own).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring up loopback: %w", err)
	}
	return nil
}

// startRelay listens as r says and serves until the process ends.
func startRelay(r Relay) error {
	ln, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)))
	if err != nil {
		return fmt.Errorf("egress relay: %w", err)
	}
	go serveRelay(ln, r.Socket, "")
	for _, f := range r.Forwards {
		fl, err := net.Listen("tcp4", f)
		if err != nil {
			return fmt.Errorf("egress relay: forward %s: %w", f, err)
		}
		go serveRelay(fl, r.Socket, f)
	}
	return nil
}

// serveRelay passes each connection ln accepts to the proxy at sock;
// with target set, through a CONNECT to target.
func serveRelay(ln net.Listener, sock, target string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
				time.Sleep(50 * time.Millisecond) // out of descriptors: let some close
				continue
			}
			return
		}
		go relayConn(c, sock, target)
	}
}

func relayConn(c net.Conn, sock, target string) {
	defer c.Close()
	u, err := net.DialTimeout("unix", sock, relayTimeout)
	if err != nil {
		return
	}
	defer u.Close()
	var from io.Reader = u
	if target != "" {
		_ = u.SetDeadline(time.Now().Add(relayTimeout))
		if _, err := fmt.Fprintf(u, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
			return
		}
		br := bufio.NewReader(u)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK {
			return
		}
		_ = u.SetDeadline(time.Time{})
		from = br
	}
	splice(c, u, from)
}

// splice copies both ways between a client c and upstream u (read
// through from) until both directions end, passing on half-closes.
func splice(c, u net.Conn, from io.Reader) {
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(u, c)
		closeWrite(u)
	})
	_, _ = io.Copy(c, from)
	closeWrite(c)
	wg.Wait()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// relayChild starts argv as the relay's child, with the relay's own
// user and namespaces.
func relayChild(spec initSpec) (*os.Process, error) {
	attr := &os.ProcAttr{Env: os.Environ(), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}}
	for i := range spec.Files {
		attr.Files = append(attr.Files, os.NewFile(uintptr(3+i), fmt.Sprintf("fd%d", 3+i)))
	}
	attr.Sys = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return os.StartProcess(spec.Argv[0], spec.Argv, attr)
}
