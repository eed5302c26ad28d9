package sdk_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

// freezer forwards bytes between a client and a server until frozen; then
// it keeps both connections open and forwards nothing, as a SIGSTOPped
// host would.
type freezer struct {
	mu     sync.Mutex
	frozen bool
}

func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		f.mu.Lock()
		frozen := f.frozen
		f.mu.Unlock()
		if frozen {
			// Swallow: the frozen host reads nothing and answers nothing.
			if err != nil {
				return
			}
			continue
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestKeepaliveStopsWorkForAFrozenHost: a plugin served by NewGRPCServer
// cancels an operation in flight soon after its host stops answering,
// though the host never closed the connection.
func TestKeepaliveStopsWorkForAFrozenHost(t *testing.T) {
	started := make(chan struct{})
	stopped := make(chan time.Time, 1)
	impl := fake{apply: func(ctx context.Context, _ *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
		close(started)
		<-ctx.Done()
		stopped <- time.Now()
		return nil, ctx.Err()
	}}
	srv := sdk.NewGRPCServer(nil)
	if err := (&sdk.GRPCPlugin{Impl: impl}).GRPCServer(nil, srv); err != nil {
		t.Fatal(err)
	}
	client, f := serveBehindFreezer(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { _, _ = client.Run(ctx, sdk.OpApply, &sdk.RunRequest{}, nil) }()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("apply never started")
	}
	// Working normally, the plugin keeps going past several keepalives.
	time.Sleep(3 * (sdk.KeepaliveTime + sdk.KeepaliveTimeout))
	select {
	case <-stopped:
		t.Fatal("the plugin stopped its work while its host was answering")
	default:
	}
	f.mu.Lock()
	f.frozen = true
	f.mu.Unlock()
	frozeAt := time.Now()
	select {
	case at := <-stopped:
		if d := at.Sub(frozeAt); d > 4*(sdk.KeepaliveTime+sdk.KeepaliveTimeout) {
			t.Fatalf("the plugin stopped %s after its host froze", d)
		}
		t.Logf("stopped %s after the host froze", at.Sub(frozeAt).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatal("the plugin kept working for a frozen host")
	}
}

// serveBehindFreezer serves srv on loopback and returns a client that
// reaches it through a freezer.
func serveBehindFreezer(t *testing.T, srv *grpc.Server) (*sdk.Client, *freezer) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	f := &freezer{}
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	var conns []net.Conn
	var connsMu sync.Mutex
	t.Cleanup(func() {
		connsMu.Lock()
		defer connsMu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := proxy.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				c.Close()
				return
			}
			connsMu.Lock()
			conns = append(conns, c, s)
			connsMu.Unlock()
			go f.pipe(s, c)
			go f.pipe(c, s)
		}
	}()
	conn, err := grpc.NewClient("passthrough:///"+proxy.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sdk.NewClient(conn), f
}

// writeLease replaces the lease file at path with a deadline d from now,
// as agentd does (a new file renamed over it).
func writeLease(t *testing.T, path string, d time.Duration) time.Time {
	t.Helper()
	at := time.Now().Add(d)
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(at.UnixMilli(), 10)+"\n"), 0o600); err != nil {
		t.Error(err) // also called from the renewing goroutine
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Error(err)
	}
	return at
}

// TestHostLeaseOutlastsAFreeze: a plugin whose host keeps a lease file
// (sdk.HostLeaseEnv) keeps working for a host frozen well past the
// keepalive, as long as the lease lasts, and stops its work with
// sdk.ErrHostLeaseLost once the lease has run out (issue 34: an agent
// frozen two seconds lost its jobs to the keepalive).
func TestHostLeaseOutlastsAFreeze(t *testing.T) {
	const lease = 1500 * time.Millisecond
	path := filepath.Join(t.TempDir(), "lease")
	writeLease(t, path, lease)
	started := make(chan struct{})
	type stop struct {
		at    time.Time
		cause error
	}
	stopped := make(chan stop, 1)
	impl := fake{apply: func(ctx context.Context, _ *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
		close(started)
		<-ctx.Done()
		stopped <- stop{time.Now(), context.Cause(ctx)}
		return nil, ctx.Err()
	}}
	srv, stopWatch, err := sdk.ServeForTest(impl, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopWatch)
	client, f := serveBehindFreezer(t, srv)

	// The lease is renewed, as imsd would while the agent's heartbeats
	// got through, until renewing is closed.
	renewing, renewed := make(chan struct{}), make(chan time.Time)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		last := time.Now().Add(lease)
		for {
			select {
			case <-renewing:
				renewed <- last
				return
			case <-tick.C:
				last = writeLease(t, path, lease)
			}
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { _, _ = client.Run(ctx, sdk.OpApply, &sdk.RunRequest{}, nil) }()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("apply never started")
	}
	f.mu.Lock()
	f.frozen = true
	f.mu.Unlock()
	// Frozen twice as long as the keepalive would have waited.
	time.Sleep(2 * (sdk.KeepaliveTime + sdk.KeepaliveTimeout))
	select {
	case s := <-stopped:
		t.Fatalf("the plugin stopped its work (%v) for a host frozen inside its lease", s.cause)
	default:
	}
	close(renewing)
	deadline := <-renewed
	select {
	case s := <-stopped:
		if !errors.Is(s.cause, sdk.ErrHostLeaseLost) {
			t.Fatalf("the operation's cause is %v, want sdk.ErrHostLeaseLost", s.cause)
		}
		// A running agent stops the job itself at the lease's end; the
		// plugin waits sdk.HostLeaseSlack more. The file holds
		// milliseconds; the watch polls a tenth of a second.
		if late := s.at.Sub(deadline); late < sdk.HostLeaseSlack-time.Millisecond || late > sdk.HostLeaseSlack+time.Second {
			t.Fatalf("the plugin stopped %s after its host's lease ended; want %s and a poll", late, sdk.HostLeaseSlack)
		}
		t.Logf("stopped %s after the lease ended", s.at.Sub(deadline).Round(time.Millisecond))
	case <-time.After(lease + 10*time.Second):
		t.Fatal("the plugin kept working past its frozen host's lease")
	}
}
