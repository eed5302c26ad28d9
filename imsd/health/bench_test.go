package health

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
)

// BenchmarkSweep10k is one health sweep over 10,000 connected, healthy
// agents on SQLite (no change to record): what every replica spends each
// interval (5s by default).
func BenchmarkSweep10k(b *testing.B) {
	ctx := b.Context()
	st, err := store.Open(ctx, filepath.Join(b.TempDir(), "imsd.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateApp(ctx, store.App{ID: "app-1", Name: "shop", CreatedAt: t0}); err != nil {
		b.Fatal(err)
	}
	const n = 10000
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			id := fmt.Sprintf("%05d", i)
			tok := store.EnrollmentToken{Hash: "h" + id, ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}
			if err := st.CreateInstall(ctx, store.Install{ID: "inst-" + id, AppID: "app-1", Name: "i" + id, CreatedAt: t0}, tok); err != nil {
				b.Error(err)
				return
			}
			if _, err := st.Enroll(ctx, "h"+id, store.Agent{ID: "ag-" + id, PublicKey: []byte("k")}, t0); err != nil {
				b.Error(err)
				return
			}
			if err := st.AgentConnected(ctx, "ag-"+id, "v1", t0); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	clk := &clock{now: t0.Add(10 * time.Second)}
	m := New(st, Config{OfflineAfter: 2 * time.Minute, Grace: time.Second, Now: clk.Now})
	if err := m.Sweep(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if err := m.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
