package pluginhost_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// rogue is a plugin that lies in its handshake, as the vendor's code
// can: it names ROGUE_ANNOUNCE ("{dir}" standing for its socket
// directory) as where it serves, after putting a symlink to
// ROGUE_SYMLINK in that directory (rogue.sock) when asked to. It
// serves nothing and waits to be killed.
func rogue() {
	dir := os.Getenv(plugin.EnvUnixSocketDir)
	if target := os.Getenv("ROGUE_SYMLINK"); target != "" {
		if err := os.Symlink(target, filepath.Join(dir, "rogue.sock")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	announce := strings.ReplaceAll(os.Getenv("ROGUE_ANNOUNCE"), "{dir}", dir)
	fmt.Printf("%d|%d|%s|grpc\n", plugin.CoreProtocolVersion, sdk.Handshake.ProtocolVersion, announce)
	time.Sleep(time.Minute)
	os.Exit(0)
}

// A plugin names in its handshake where the agent connects to it, and
// the agent connects from its own network and file system, not the
// sandbox's. A plugin naming a TCP address would have the agent carry
// the job's request (its environment: credentials, secrets) past the
// sandbox's network and the customer's egress rules; one naming a
// socket of the machine, or a symlink to one in its socket directory,
// would have the agent talk to it. The agent starts none of them,
// saying why, and never connects.
func TestPluginHandshakeCannotLeadTheAgentElsewhere(t *testing.T) {
	outside := t.TempDir()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	sock, err := net.Listen("unix", filepath.Join(outside, "machine.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	var reached atomic.Int32
	for _, ln := range []net.Listener{tcp, sock} {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				reached.Add(1)
				c.Close()
			}
		}()
	}
	l := newLoader(t)
	l.Builtins = append(l.Builtins, "rogue")
	for _, tc := range []struct {
		name     string
		announce string
		symlink  string
		want     string
	}{
		{"tcp", "tcp|" + tcp.Addr().String(), "", "names tcp address " + tcp.Addr().String() + ": a plugin serves on a unix socket in the directory the agent gives it"},
		{"a socket of the machine", "unix|" + sock.Addr().String(), "", "names socket " + sock.Addr().String() + ", outside the directory the agent gives it"},
		{"out of its directory", "unix|{dir}/../../../../.." + sock.Addr().String(), "", "outside the directory the agent gives it"},
		{"a symlink in its directory", "unix|{dir}/rogue.sock", sock.Addr().String(), "which is a symlink, not a socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			inst, err := l.Start(ctx, "rogue", pluginhost.StartOptions{WorkDir: t.TempDir(),
				Env: map[string]string{"ROGUE_ANNOUNCE": tc.announce, "ROGUE_SYMLINK": tc.symlink}})
			if err == nil {
				inst.Kill()
				t.Fatal("the plugin started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
			time.Sleep(100 * time.Millisecond)
			if n := reached.Load(); n != 0 {
				t.Fatalf("the agent connected where the plugin said (%d connections)", n)
			}
		})
	}
}

// A plugin's message (a log event, a result) is the vendor's code's to
// size, and go-plugin lets one be 2 GiB: the agent would hold it all in
// memory before it could refuse it. The agent takes at most
// MaxPluginMessageBytes; a larger one fails the operation, and one
// under it still arrives whole.
func TestPluginMessagesBounded(t *testing.T) {
	inst, err := startTestkit(t, nil, &outputLines{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	over := pluginhost.MaxPluginMessageBytes>>20 + 8
	_, err = inst.Run(ctx, sdk.OpApply, &sdk.RunRequest{Job: sdk.JobContext{JobID: "j", WorkDir: t.TempDir()},
		Config: map[string]any{"mode": "big", "mb": float64(over)}}, nil)
	if err == nil || !strings.Contains(err.Error(), "received message larger than max") {
		t.Fatalf("a %d MiB result: %v, want it refused", over, err)
	}
	under := pluginhost.MaxPluginMessageBytes>>20 - 4
	res, err := inst.Run(ctx, sdk.OpApply, &sdk.RunRequest{Job: sdk.JobContext{JobID: "j2", WorkDir: t.TempDir()},
		Config: map[string]any{"mode": "big", "mb": float64(under)}}, nil)
	if err != nil || len(res.Outputs["big"]) != under<<20 {
		t.Fatalf("a %d MiB result: %v", under, err)
	}
}
