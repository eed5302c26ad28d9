// Package pluginhost starts component plugins for the agent: one
// subprocess per job, built-in and external types through the same loader
// and the same protocol.
//
// A built-in type is the agent binary re-executing itself. A bundled type
// is served by the companion binary installed beside the agent
// (byoc-plugins, package plugins/bundle): a built-in type too heavy to link
// into the agent's own long-lived process. It is part of the agent's own
// install, so it is not pinned, but it is checked like an external plugin
// (a regular file that only root or the agent's user can change, in such a
// directory) and executed through the descriptor that was checked. An
// external type is a binary named byoc-plugin-<type> in one of the
// configured directories, run only if its SHA-256 matches the pin for that
// type and neither it nor its directory is writable by group or others.
//
// Every plugin runs in its own process group with an explicit environment
// (never the agent's own, which may hold cloud credentials), in the job's
// work directory, and dies with the agent. [Instance.Kill] kills the whole
// group, including anything the plugin's scripts left running.
//
// With a [Sandbox] (agentd always has one unless the customer says
// --insecure-no-sandbox), every plugin and all it starts run in their own
// user, mount, PID, IPC and UTS namespaces, built by bubblewrap or by the
// agent's own namespace init, where only the system directories
// (read-only), the work dir, the plugin's socket dir and the paths
// StartOptions name exist: the agent's state, identity and controls, the
// secrets file and other plugins' sockets are absent. The binary still
// runs from the descriptor that was checked.
//
// The package relies on Linux process groups, parent-death signals and
// /proc.
package pluginhost

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/byoc-dev/byoc/agentd/egress"
	"github.com/byoc-dev/byoc/plugins/action/sandbox"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// sandboxed reports whether plugins run in a sandbox.
func (l *Loader) sandboxed() bool {
	return l.Sandbox != nil && l.Sandbox.Isolation != IsolationNone
}

// BinaryPrefix starts the file name of every external plugin.
const BinaryPrefix = "byoc-plugin-"

// BaseEnv is the environment every plugin starts with, before
// StartOptions.Env; HOME and TMPDIR are set to the work directory.
var baseEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}

const (
	// defaultStartTimeout bounds the go-plugin handshake when ctx has no
	// earlier deadline.
	defaultStartTimeout = time.Minute
	// killGrace is how long Kill waits after SIGTERM before SIGKILL.
	killGrace = 2 * time.Second
	// exitWait is how long a failed call waits to learn whether the plugin
	// process died, to report that instead of a transport error.
	exitWait = 2 * time.Second
)

// typeName is what a component type may be called; it becomes part of a
// file name, so it must not hold a path.
var typeName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// Loader starts plugins of built-in and external component types.
type Loader struct {
	// SelfExe is the agent binary, re-executed to serve built-in types.
	SelfExe string
	// SelfArgs returns the arguments that make SelfExe serve built-in type
	// typ, such as ["plugin", typ]. Nil means exactly that.
	SelfArgs func(typ string) []string
	// Builtins names the built-in types.
	Builtins []string
	// Bundled names the types served by the companion binary BundledExe,
	// run as "BundledExe TYPE".
	Bundled []string
	// BundledExe is the companion binary's path (agentd: byoc-plugins in
	// the directory of its own executable, or --bundled-plugins).
	BundledExe string
	// BundledHint says how to install or point at the companion; it ends
	// the error for a missing one.
	BundledHint string
	// Dirs are searched in order for external plugins.
	Dirs []string
	// Pins maps an external type to the hex SHA-256 of its binary
	// (agentd --plugin-pin).
	Pins map[string]string
	// Reattach names plugins served in debug mode outside the agent, by
	// type (sdk.ReattachEnv): a job of such a type calls that process
	// instead of starting one, unpinned and unsandboxed, and leaves it
	// running. For development only.
	Reattach map[string]sdk.ReattachInfo
	// PinWatcher, if set, serves the customer's pin file (agentd plugin
	// pin): read again whenever it changes, its pin for a type wins over
	// Pins'.
	PinWatcher *PinWatcher
	// Fetch, if set, installs the release a pin names (Pin.OCI) when its
	// binary is not installed yet (agentd plugin pin TYPE --release),
	// verified, and returns the pin completed with the installed binary
	// (Pin.Installed) and its checksum; it writes that pin to the file.
	Fetch func(ctx context.Context, typ string, pin Pin) (Pin, error)
	// Logger receives go-plugin's messages and the plugins' stderr at debug
	// level. Nil discards them.
	Logger *slog.Logger
	// Sandbox isolates every plugin (ProbeSandbox): each runs, with all
	// it starts, where only the system directories, its work dir, its
	// socket dir and StartOptions' Writable and ReadOnly paths exist. Nil
	// or IsolationNone runs plugins with the agent's own view of the
	// file system; agentd always sets it, and sets IsolationNone only
	// when the customer says --insecure-no-sandbox.
	Sandbox *Sandbox
	// Egress is a sandboxed plugin's network: by default (nil) a network
	// namespace of its own whose only way out is an egress proxy the
	// agent serves, refusing loopback, link-local and the cloud's
	// credential endpoints.
	Egress *Egress
	// OwnRelay says the agent's own plugin binaries (built-in and
	// bundled types) run the sandbox's egress relay themselves when
	// sandbox.RelayEnv asks (sandbox.StartRelayFromEnv), which under
	// bubblewrap saves starting the agent's binary as a relay before
	// each of them; a third-party plugin always gets that relay.
	OwnRelay bool

	// sums caches the checksum of each verified binary by file identity.
	sumsMu sync.Mutex
	sums   map[fileID]string
}

// fileID identifies one version of a file's content: writing to a file
// changes its size or mtime and always its ctime, which no one but the
// kernel sets. Only root or the agent's user could write a plugin that
// passes verify, and they could replace the agent itself.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

// StartOptions says where and how a plugin runs.
type StartOptions struct {
	// WorkDir is the job's work directory: the plugin's working directory,
	// HOME and TMPDIR. Required.
	WorkDir string
	// Env is added to the plugin's minimal base environment; nothing of the
	// agent's own environment is passed on.
	Env map[string]string
	// Writable are host directories the plugin may write besides WorkDir
	// (its component's state directory, say) and ReadOnly host files or
	// directories it may read, when the Loader has a Sandbox; nothing
	// else of the agent's files exists for it.
	Writable, ReadOnly []string
	// Hidden are host paths kept from the plugin even where they lie in
	// a directory it sees (the agent's state directory or secrets file
	// under /etc, say): a directory shows empty, a file empty.
	Hidden []string
	// Output, if set, receives each line the plugin process prints
	// outside the protocol, from its start until Kill returns: source
	// "stdout" or "stderr". That is what plugin code writes to os.Stdout
	// or os.Stderr while serving, and the process's own stderr: a panic
	// with its stacks, the log package's output, anything printed before
	// Serve. Every line also goes to the Loader's logger at debug level.
	// It is called from go-plugin's goroutines, never after Kill returns.
	Output func(source, text string)
	// DelegateCgroup, when set (to a label for the cgroup's name: the
	// job's ID), gives a sandboxed plugin a cgroup of its own to manage
	// (cgroup delegation), at /sys/fs/cgroup inside its sandbox: the
	// action type puts each step in a sub-cgroup with the step's CPU,
	// memory and process limits. Kill removes it with everything below.
	// When no cgroup can be delegated here the plugin is told why
	// (sandbox.CgroupEnv) and its steps run without limits, saying so.
	DelegateCgroup string
	// OnEgressDenied, when set, is told of the first refused connection
	// to each distinct destination (NetworkProxy), from the proxy's
	// goroutines; Instance.EgressRefused sums them all up.
	OnEgressDenied func(egress.Denial)
	// Lease, when set, says how long the agent's lease on the job the
	// plugin works for has left (negative once it ran out). The plugin
	// is told its end through a file in its socket directory
	// (sdk.HostLeaseEnv), kept up to date until Kill: a plugin of the
	// SDK then waits for an agent that stopped answering (frozen) until
	// the lease ends, and stops its operations then, instead of after
	// the SDK's keepalive of two seconds.
	Lease func() time.Duration
}

// Start launches a plugin for type typ and completes the handshake.
// The caller must Kill the returned Instance.
func (l *Loader) Start(ctx context.Context, typ string, opt StartOptions) (*Instance, error) {
	if opt.WorkDir == "" {
		return nil, fmt.Errorf("start plugin %s: work dir is required", typ)
	}
	if r, ok := l.Reattach[typ]; ok {
		return l.reattach(ctx, typ, r, opt)
	}
	cmd, exe, external, err := l.command(ctx, typ)
	if err != nil {
		return nil, fmt.Errorf("start plugin %s: %w", typ, err)
	}
	if exe != nil {
		// The parent's copy of the verified binary is not needed once the
		// child has it (or failed to start).
		defer exe.Close()
	}
	startTimeout := defaultStartTimeout
	if d, ok := ctx.Deadline(); ok {
		startTimeout = min(startTimeout, time.Until(d))
	}
	if err := ctx.Err(); err != nil || startTimeout <= 0 {
		return nil, fmt.Errorf("start plugin %s: %w", typ, context.DeadlineExceeded)
	}
	// The plugin's gRPC socket lives in a short private directory: a socket
	// path under a deep work directory can exceed the 108-byte limit. Its
	// name carries this process's tag, so that SweepSocketDirs can tell the
	// leftovers of a killed agent from the directories of a live one.
	sockDir, err := newSocketDir()
	if err != nil {
		return nil, fmt.Errorf("start plugin %s: socket dir: %w", typ, err)
	}
	var lease *leaseKeeper
	if opt.Lease != nil {
		if lease, err = startLease(sockDir, opt.Lease); err != nil {
			os.RemoveAll(sockDir)
			return nil, fmt.Errorf("start plugin %s: %w", typ, err)
		}
	}
	var cg *sandbox.Delegated
	cgroupEnv := ""
	if l.sandboxed() && opt.DelegateCgroup != "" {
		if cg, err = sandbox.DelegateCgroup("", opt.DelegateCgroup); err != nil {
			cgroupEnv = "not delegated: " + err.Error()
		} else {
			cgroupEnv = cg.Version
		}
	}
	var px *proxyRun
	relayEnv := ""
	if l.sandboxed() {
		m := pluginMounts(opt.WorkDir, sockDir, opt)
		m.Network = l.network() == NetworkHost
		if cg != nil {
			cg.Apply(&m)
		}
		if l.network() == NetworkProxy {
			px, m.Egress, err = l.startProxy(sockDir, opt.OnEgressDenied, lease)
		}
		if err == nil && m.Egress != nil && l.OwnRelay && !external && l.Sandbox.Isolation == IsolationBubblewrap {
			var b []byte
			b, err = json.Marshal(m.Egress)
			relayEnv, m.Egress = string(b), nil
		}
		if err == nil {
			cmd, err = l.Sandbox.command(exe, m, cmd.Args[1:])
		}
		if err == nil {
			// The child has its own copies once started; exe is closed
			// above.
			defer func() {
				for _, f := range cmd.ExtraFiles[1:] {
					f.Close()
				}
			}()
		}
		if err != nil {
			px.stop()
			lease.end()
			os.RemoveAll(sockDir)
			if cg != nil {
				_ = cg.Remove()
			}
			return nil, fmt.Errorf("start plugin %s: %w", typ, err)
		}
	}
	cmd.Dir = opt.WorkDir
	if env := l.EgressEnv(); env != nil {
		// Unless the caller put them there already (agentd's runner
		// does, for the operations too).
		opt.Env = maps.Clone(opt.Env)
		if opt.Env == nil {
			opt.Env = map[string]string{}
		}
		for k, v := range env {
			if _, ok := opt.Env[k]; !ok {
				opt.Env[k] = v
			}
		}
	}
	cmd.Env = append(pluginEnv(opt), plugin.EnvUnixSocketDir+"="+sockDir)
	if l.sandboxed() {
		cmd.Env = append(cmd.Env, sandbox.NestedEnv+"="+string(l.Sandbox.Isolation))
	}
	if cgroupEnv != "" {
		cmd.Env = append(cmd.Env, sandbox.CgroupEnv+"="+cgroupEnv)
	}
	if relayEnv != "" {
		cmd.Env = append(cmd.Env, sandbox.RelayEnv+"="+relayEnv)
	}
	if lease != nil {
		cmd.Env = append(cmd.Env, sdk.HostLeaseEnv+"="+lease.path)
	}
	cmd.SysProcAttr = pluginProcAttr(cmd.SysProcAttr)
	if cg != nil {
		// In v2 the plugin starts in its delegated cgroup's leaf: the
		// kernel puts it there at clone, before it runs anything.
		leaf, err := cg.LeafFD()
		if err != nil {
			lease.end()
			os.RemoveAll(sockDir)
			_ = cg.Remove()
			return nil, fmt.Errorf("start plugin %s: %w", typ, err)
		}
		if leaf != nil {
			defer leaf.Close()
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(leaf.Fd())
		}
	}
	logger := l.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	logger = logger.With("plugin", typ)
	out := newOutput(typ, logger, opt.Output)
	stdout, stderr, rawErr := out.writer("stdout", true), out.writer("stderr", true), out.writer("stderr", false)
	sock := &pluginSocket{dir: sockDir}
	cfg := &plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake,
		Plugins:          sdk.PluginMap(nil),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		// Third-party plugins talk over mutual TLS; a built-in is this very
		// binary and a bundled one part of the same install, so the
		// certificate exchange would only cost launch time.
		AutoMTLS:     external,
		SkipHostEnv:  true,
		StartTimeout: startTimeout,
		Logger:       newHCLog(logger, "plugin."+typ),
		Stderr:       rawErr,
		SyncStdout:   stdout,
		SyncStderr:   stderr,
		// Only the socket the handshake named and dial checked
		// (pluginSocket): this dialer replaces go-plugin's.
		GRPCDialOptions: []grpc.DialOption{grpc.WithContextDialer(sock.dial),
			// go-plugin takes messages of up to 2 GiB; these options come
			// after its own, so this bound is the one in force.
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxPluginMessageBytes))},
	}
	client := plugin.NewClient(cfg)
	if cgroupEnv != "" && cg == nil {
		logger.Warn("no cgroup for the plugin's step limits", "why", strings.TrimPrefix(cgroupEnv, "not delegated: "))
	}
	inst := &Instance{typ: typ, client: client, cmd: cmd, logger: logger, sockDir: sockDir, sock: sock, sandbox: l.Sandbox, cgroup: cg, proxy: px, lease: lease,
		out: out, writers: []*lineWriter{stdout, stderr, rawErr}}

	rpc, err := dial(client, cfg, sock)
	if err != nil {
		err = strayStdout(incompatible(typ, err))
	}
	if err == nil {
		// The first call agrees on the protocol's minor version and learns
		// what the plugin can do.
		inst.desc, err = rpc.Negotiate(ctx)
		if err == nil && inst.desc.Type != typ {
			err = fmt.Errorf("plugin says it serves type %q, not %q", inst.desc.Type, typ)
		}
	}
	if cmd.Process != nil {
		// Start has returned, so reading cmd.Process no longer races.
		inst.pgid = cmd.Process.Pid
	}
	if err != nil {
		inst.Kill()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("start plugin %s: %w", typ, ctx.Err())
		}
		return nil, fmt.Errorf("start plugin %s: %w", typ, err)
	}
	inst.rpc = rpc
	return inst, nil
}

// MaxPluginMessageBytes bounds a message the agent takes from a plugin
// (a log event, a result): the plugin's code is the vendor's, and the
// agent holds a whole message in memory before it can look at it. A
// result the agent sends on to imsd is bounded more tightly still
// (agent.MaxResultBytes); this leaves room to say how large it was.
const MaxPluginMessageBytes = 32 << 20

// unrecognized finds the line go-plugin read instead of its handshake.
var unrecognized = regexp.MustCompile(`Unrecognized remote plugin message: ([^\n]*)`)

// strayStdout replaces go-plugin's advice for a plugin whose first line
// on stdout was not the handshake ("check architecture, libraries,
// permissions", which is rarely the cause) with the usual cause: plugin
// code printed to stdout before Serve.
func strayStdout(err error) error {
	m := unrecognized.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	if strings.TrimSpace(m[1]) == "" {
		return fmt.Errorf("the plugin printed nothing on stdout before exiting, where go-plugin expects its handshake: " +
			"check that it calls sdk.Serve; its stderr is in the job log")
	}
	return fmt.Errorf("the plugin printed %q on stdout before serving, where go-plugin expects its handshake line: "+
		"a plugin must not print to stdout before sdk.Serve (print to stderr, or log with the operation's Logger)", m[1])
}

// handshakeVersion finds the plugin's major version in go-plugin's refusal.
var handshakeVersion = regexp.MustCompile(`incompatible API version with plugin\. Plugin version: (\d+)`)

// incompatible turns go-plugin's refusal of another major version into an
// *sdk.IncompatibleError, which names both versions in byoc's terms.
func incompatible(typ string, err error) error {
	m := handshakeVersion.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	major, _ := strconv.Atoi(m[1])
	return &sdk.IncompatibleError{Type: typ, Plugin: sdk.ProtocolVersion{Major: major}, PluginMinorUnknown: true, Host: sdk.Protocol}
}

func dial(client *plugin.Client, cfg *plugin.ClientConfig, sock *pluginSocket) (*sdk.Client, error) {
	addr, err := client.Start()
	if err != nil {
		return nil, err
	}
	if err := sock.check(addr); err != nil {
		// go-plugin's Kill connects to the address the plugin named, to
		// shut it down gently: through sock.dial, which refuses. A
		// blocking dial makes that refusal end the connection at once
		// (not retried in the background for the process's life).
		//lint:ignore SA1019 go-plugin dials with grpc.Dial, which honours it
		cfg.GRPCDialOptions = append(cfg.GRPCDialOptions, grpc.WithBlock())
		return nil, err
	}
	proto, err := client.Client()
	if err != nil {
		return nil, err
	}
	raw, err := proto.Dispense(sdk.PluginName)
	if err != nil {
		return nil, err
	}
	c, ok := raw.(*sdk.Client)
	if !ok {
		return nil, fmt.Errorf("plugin dispensed %T, want *sdk.Client", raw)
	}
	return c, nil
}

// pluginEnv is the whole environment of a plugin process.
func pluginEnv(opt StartOptions) []string {
	env := append([]string(nil), baseEnv...)
	env = append(env, "HOME="+opt.WorkDir, "TMPDIR="+opt.WorkDir)
	keys := make([]string, 0, len(opt.Env))
	for k := range opt.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+opt.Env[k])
	}
	return env
}

// command builds the command that serves typ. For a bundled or external
// type it also returns the opened binary: the command executes that open
// file, so the bytes that run are the bytes that were checked, even if the
// file is replaced in between. external reports a third-party plugin.
func (l *Loader) command(ctx context.Context, typ string) (cmd *exec.Cmd, exe *os.File, external bool, err error) {
	if !typeName.MatchString(typ) {
		return nil, nil, false, fmt.Errorf("invalid component type %q", typ)
	}
	if slices.Contains(l.Builtins, typ) {
		if l.SelfExe == "" {
			return nil, nil, false, errors.New("built-in plugins need the agent's own path (SelfExe)")
		}
		args := []string{"plugin", typ}
		if l.SelfArgs != nil {
			args = l.SelfArgs(typ)
		}
		if l.sandboxed() {
			// Inside the sandbox the agent's binary is executed through
			// its descriptor: its path need not exist there.
			f, err := os.Open(l.SelfExe)
			if err != nil {
				return nil, nil, false, fmt.Errorf("open the agent's own binary: %w", err)
			}
			return fdCommand(f, l.SelfExe, args...), f, false, nil
		}
		return exec.Command(l.SelfExe, args...), nil, false, nil
	}
	if slices.Contains(l.Bundled, typ) {
		f, err := l.openBundled(typ)
		if err != nil {
			return nil, nil, false, err
		}
		return fdCommand(f, l.BundledExe, typ), f, false, nil
	}
	dir, path, err := l.installed(ctx, typ)
	if err == nil && path == "" {
		dir, path, err = l.find(typ)
	}
	if err != nil {
		return nil, nil, false, err
	}
	f, err := l.verify(typ, dir, path)
	if err != nil {
		return nil, nil, false, err
	}
	return fdCommand(f, path), f, true, nil
}

// fdCommand runs the open binary f with argv path, args...
// ExtraFiles[0] is descriptor 3 in the child; executing /proc/self/fd/3
// is how fexecve works.
func fdCommand(f *os.File, path string, args ...string) *exec.Cmd {
	return &exec.Cmd{Path: "/proc/self/fd/3", Args: append([]string{path}, args...), ExtraFiles: []*os.File{f}}
}

// openBundled opens the companion binary for bundled type typ and checks
// it as verify checks an external plugin, except for the pin: it belongs
// to the agent's own install, as the agent binary does.
func (l *Loader) openBundled(typ string) (*os.File, error) {
	return l.openCompanion("the " + typ + " type is")
}

// CheckBundled checks the companion binary as Start does before it runs
// a bundled type (agentd preflight). It returns nil when no type is
// bundled.
func (l *Loader) CheckBundled() error {
	switch len(l.Bundled) {
	case 0:
		return nil
	case 1:
		return closeOK(l.openCompanion("the " + l.Bundled[0] + " type is"))
	}
	return closeOK(l.openCompanion("the " + strings.Join(l.Bundled, ", ") + " types are"))
}

func closeOK(f *os.File, err error) error {
	if err != nil {
		return err
	}
	return f.Close()
}

// openCompanion opens and checks BundledExe; what starts its errors.
func (l *Loader) openCompanion(what string) (*os.File, error) {
	path := l.BundledExe
	name := filepath.Base(path)
	if path == "" {
		return nil, fmt.Errorf("%s bundled in the agent's companion binary, whose path is not set", what)
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		msg := fmt.Sprintf("%s bundled in %s, which was not found at %s", what, name, path)
		if l.BundledHint != "" {
			msg += "; " + l.BundledHint
		}
		return nil, errors.New(msg)
	} else if err != nil {
		return nil, fmt.Errorf("%s bundled in %s: %w", what, name, err)
	}
	if err := checkDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("%s bundled in %s: %w", what, path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s bundled in %s: %w", what, name, err)
	}
	if err := checkBinary(path, f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s bundled in %s: %w", what, name, err)
	}
	return f, nil
}

// installed returns the binary "agentd plugin install" installed for
// typ, as its pin names it, fetching the release the pin names first if
// it is not installed (Fetch); path is empty when typ's pin names
// neither.
func (l *Loader) installed(ctx context.Context, typ string) (dir, path string, err error) {
	p, ok, err := l.filePin(typ)
	if err != nil {
		return "", "", fmt.Errorf("plugin %s: %w", typ, err)
	}
	if !ok || (p.Installed == "" && p.OCI == "") {
		return "", "", nil
	}
	if p.Installed != "" {
		if _, err := os.Lstat(p.Installed); err == nil {
			return filepath.Dir(p.Installed), p.Installed, nil
		} else if p.OCI == "" || l.Fetch == nil {
			return "", "", fmt.Errorf("plugin %s %s: its installed binary %s: %w; install it again: agentd plugin install %s",
				typ, p.Version, p.Installed, err, cmp.Or(p.Source, p.OCI))
		}
	}
	if l.Fetch == nil {
		return "", "", fmt.Errorf("plugin %s: its pinned release %s is not installed, and this agent fetches none: agentd plugin install %s", typ, p.OCI, p.OCI)
	}
	np, err := l.Fetch(ctx, typ, p)
	if errors.Is(err, ErrRefused) && l.PinWatcher != nil {
		f := Refusal{OCI: p.OCI, Version: p.Version, Reason: strings.TrimPrefix(err.Error(), ErrRefused.Error()+": "), At: time.Now().UTC(),
			PinSHA256: p.SHA256, PinnedAt: p.PinnedAt}
		if re := (*RefusedError)(nil); errors.As(err, &re) && re.Version != "" {
			f.Version = re.Version
		}
		if rerr := l.PinWatcher.Refuse(typ, f); rerr != nil && l.Logger != nil {
			l.Logger.Error("cannot keep the refusal of a plugin release", "type", typ, "release", p.OCI, "err", rerr)
		}
	}
	if err != nil {
		return "", "", fmt.Errorf("plugin %s: install its pinned release %s: %w", typ, p.OCI, err)
	}
	if l.PinWatcher != nil {
		if aerr := l.PinWatcher.Accept(typ, np); aerr != nil && l.Logger != nil {
			l.Logger.Error("cannot forget the refusal of a plugin release", "type", typ, "release", np.OCI, "err", aerr)
		}
	}
	return filepath.Dir(np.Installed), np.Installed, nil
}

// find locates the binary of external type typ in the plugin dirs.
func (l *Loader) find(typ string) (dir, path string, err error) {
	for _, dir := range l.Dirs {
		path := filepath.Join(dir, BinaryPrefix+typ)
		if _, err := os.Lstat(path); err == nil {
			return dir, path, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", "", fmt.Errorf("look for plugin: %w", err)
		}
	}
	where := "no plugin dirs are configured (agentd --plugin-dir)"
	if len(l.Dirs) > 0 {
		where = "plugin dirs searched: " + strings.Join(l.Dirs, ", ")
	}
	known := "no types are available"
	if k := l.KnownTypes(); len(k) > 0 {
		known = "known types: " + strings.Join(k, ", ")
	}
	return "", "", fmt.Errorf("unknown component type %q: it is not built in and no plugin file %s was found (%s); %s",
		typ, BinaryPrefix+typ, where, known)
}

// verify opens an external plugin binary and checks its permissions and
// its pin.
func (l *Loader) verify(typ, dir, path string) (*os.File, error) {
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	want, pinned, err := l.pin(typ)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", typ, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open plugin: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	if err := checkBinary(path, f); err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat plugin: %w", err)
	}
	got, err := l.checksum(f, fi)
	if err != nil {
		return nil, err
	}
	if !pinned {
		return nil, fmt.Errorf("plugin %s is not pinned: %s has sha256 %s; check it is the binary you mean to run, then pin it: %s",
			typ, path, got, l.pinHint(typ, got))
	}
	if want != got {
		return nil, fmt.Errorf("plugin %s: checksum mismatch: pinned %s, found %s (%s); if you replaced the binary on purpose, check it and re-pin it: %s",
			typ, want, got, path, l.pinHint(typ, got))
	}
	ok = true
	return f, nil
}

// checkBinary checks the open plugin binary f at path: a regular,
// executable file that only root or the agent's user can change.
func checkBinary(path string, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat plugin: %w", err)
	}
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("plugin %s is not a regular file", path)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("plugin %s is writable by group or others (mode %v); refusing to run it", path, fi.Mode().Perm())
	case fi.Mode().Perm()&0o100 == 0:
		return fmt.Errorf("plugin %s is not executable", path)
	}
	return checkOwner(path, fi)
}

// KnownTypes lists the built-in and bundled types and the external
// plugins present in the plugin dirs, sorted and without duplicates.
func (l *Loader) KnownTypes() []string {
	types := append(slices.Clone(l.Builtins), l.Bundled...)
	if l.PinWatcher != nil {
		if pf, err := l.PinWatcher.File(); err == nil {
			for t, p := range pf.Pins {
				if p.Installed != "" {
					types = append(types, t)
				}
			}
		}
	}
	for _, dir := range l.Dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if name, ok := strings.CutPrefix(e.Name(), BinaryPrefix); ok && typeName.MatchString(name) {
				types = append(types, name)
			}
		}
	}
	slices.Sort(types)
	return slices.Compact(types)
}

// checkDir refuses a plugin directory that someone other than root or the
// agent's user could change: one writable by group or others, owned by
// another user, or with such a parent (which could swap the whole
// directory). A world-writable parent with the sticky bit, such as /tmp,
// is allowed: others cannot rename what they do not own in it.
func checkDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("plugin dir: %w", err)
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return fmt.Errorf("plugin dir: %w", err)
	}
	di, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("plugin dir: %w", err)
	}
	if !di.IsDir() {
		return fmt.Errorf("plugin dir %s is not a directory", dir)
	}
	if di.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("plugin dir %s is writable by group or others (mode %v); refusing to run plugins from it", dir, di.Mode().Perm())
	}
	if err := checkOwner("plugin dir "+dir, di); err != nil {
		return err
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		pi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("plugin dir parent: %w", err)
		}
		if pi.Mode().Perm()&0o002 != 0 && pi.Mode()&fs.ModeSticky == 0 {
			return fmt.Errorf("plugin dir %s is inside %s, which is writable by others without the sticky bit (mode %v); refusing to run plugins from it", dir, p, pi.Mode())
		}
		if err := checkOwner("plugin dir parent "+p, pi); err != nil {
			return err
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// checksum returns the hex SHA-256 of the open file f. Hashing a plugin
// binary of tens of megabytes costs more than the rest of a launch, so
// the sum is kept for as long as the file's identity is unchanged.
func (l *Loader) checksum(f *os.File, fi fs.FileInfo) (string, error) {
	id, ok := identity(fi)
	if ok {
		l.sumsMu.Lock()
		sum, hit := l.sums[id]
		l.sumsMu.Unlock()
		if hit {
			return sum, nil
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash plugin: %w", err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	// The file may have changed while it was read; keep the sum only if
	// its identity is the same afterwards.
	if after, err := f.Stat(); ok && err == nil {
		if id2, ok2 := identity(after); ok2 && id2 == id {
			l.sumsMu.Lock()
			if l.sums == nil {
				l.sums = map[fileID]string{}
			}
			l.sums[id] = sum
			l.sumsMu.Unlock()
		}
	}
	return sum, nil
}
