package sdk_test

import (
	"context"
	"net"
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
	client := sdk.NewClient(conn)
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
