package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

// BenchmarkClaimFinish measures a job's whole trip through the store, one
// job at a time: enqueue, claim, ack, finish.
func BenchmarkClaimFinish(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		benchClaimFinish(b, filepath.Join(b.TempDir(), "bench.db"))
	})
	b.Run("postgres", func(b *testing.B) {
		benchClaimFinish(b, pgtest.Start(b))
	})
}

func benchClaimFinish(b *testing.B, dsn string) {
	ctx := context.Background()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(s.CreateApp(ctx, store.App{ID: "app", Name: "app", CreatedAt: t0}))
	must(s.CreateInstall(ctx, store.Install{ID: "inst", AppID: "app", Name: "inst", CreatedAt: t0},
		store.EnrollmentToken{Hash: "h", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}))
	_, err = s.Enroll(ctx, "h", store.Agent{ID: "ag", PublicKey: []byte("k")}, t0)
	must(err)

	i := 0
	for b.Loop() {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		id := fmt.Sprintf("job-%d", i)
		i++
		must(s.EnqueueJob(ctx, store.Job{ID: id, InstallID: "inst", ComponentType: "t", Operation: "apply",
			MaxAttempts: 3, Timeout: time.Minute, CreatedAt: now}))
		jobs, err := s.ClaimJobs(ctx, "inst", store.Writer{AgentID: "ag"}, 1, now.Add(time.Minute), now)
		must(err)
		if len(jobs) != 1 {
			b.Fatalf("claimed %d jobs", len(jobs))
		}
		w := store.Writer{AgentID: "ag", FencingToken: jobs[0].FencingToken}
		err = s.AckJob(ctx, id, w, now.Add(time.Minute), now)
		must(err)
		_, err = s.FinishJob(ctx, id, w, store.Result{State: store.JobSucceeded}, now)
		must(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkClaimFinishParallel is BenchmarkClaimFinish from many goroutines
// at once, each with its own install and agent, as a busy imsd serves many
// agents: it shows what concurrent writers cost and share.
func BenchmarkClaimFinishParallel(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		benchClaimFinishParallel(b, filepath.Join(b.TempDir(), "bench.db"))
	})
	b.Run("postgres", func(b *testing.B) {
		benchClaimFinishParallel(b, pgtest.Start(b))
	})
}

func benchClaimFinishParallel(b *testing.B, dsn string) {
	ctx := context.Background()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.CreateApp(ctx, store.App{ID: "app", Name: "app", CreatedAt: t0}); err != nil {
		b.Fatal(err)
	}
	var workers atomic.Int64
	b.SetParallelism(16) // goroutines per GOMAXPROCS
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		k := workers.Add(1)
		inst, agent, hash := fmt.Sprintf("inst-%d", k), fmt.Sprintf("ag-%d", k), fmt.Sprintf("h-%d", k)
		if err := s.CreateInstall(ctx, store.Install{ID: inst, AppID: "app", Name: inst, CreatedAt: t0},
			store.EnrollmentToken{Hash: hash, ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}); err != nil {
			b.Error(err)
			return
		}
		if _, err := s.Enroll(ctx, hash, store.Agent{ID: agent, PublicKey: []byte("k")}, t0); err != nil {
			b.Error(err)
			return
		}
		for i := 0; pb.Next(); i++ {
			now := t0.Add(time.Duration(i) * time.Millisecond)
			id := fmt.Sprintf("job-%d-%d", k, i)
			if err := s.EnqueueJob(ctx, store.Job{ID: id, InstallID: inst, ComponentType: "t", Operation: "apply",
				MaxAttempts: 3, Timeout: time.Minute, CreatedAt: now}); err != nil {
				b.Error(err)
				return
			}
			jobs, err := s.ClaimJobs(ctx, inst, store.Writer{AgentID: agent}, 1, now.Add(time.Minute), now)
			if err != nil || len(jobs) != 1 {
				b.Errorf("claimed %d jobs: %v", len(jobs), err)
				return
			}
			w := store.Writer{AgentID: agent, FencingToken: jobs[0].FencingToken}
			if err := s.AckJob(ctx, id, w, now.Add(time.Minute), now); err != nil {
				b.Error(err)
				return
			}
			if _, err := s.FinishJob(ctx, id, w, store.Result{State: store.JobSucceeded}, now); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkAppendLogs measures a job's log batches (100 lines of 80
// bytes, as an agent sends a busy job's output) under the cap, which
// counts them on the job's row in the same transaction.
func BenchmarkAppendLogs(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		benchAppendLogs(b, filepath.Join(b.TempDir(), "bench.db"))
	})
	b.Run("postgres", func(b *testing.B) {
		benchAppendLogs(b, pgtest.Start(b))
	})
}

func benchAppendLogs(b *testing.B, dsn string) {
	ctx := context.Background()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.SetLogLimits(store.LogLimits{Lines: 1 << 40, Bytes: 1 << 50})
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(s.CreateApp(ctx, store.App{ID: "app", Name: "app", CreatedAt: t0}))
	must(s.CreateInstall(ctx, store.Install{ID: "inst", AppID: "app", Name: "inst", CreatedAt: t0},
		store.EnrollmentToken{Hash: "h", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}))
	_, err = s.Enroll(ctx, "h", store.Agent{ID: "ag", PublicKey: []byte("k")}, t0)
	must(err)
	must(s.EnqueueJob(ctx, store.Job{ID: "job", InstallID: "inst", ComponentType: "t", Operation: "apply",
		MaxAttempts: 3, Timeout: time.Hour, CreatedAt: t0}))
	jobs, err := s.ClaimJobs(ctx, "inst", store.Writer{AgentID: "ag"}, 1, t0.Add(time.Hour), t0)
	must(err)
	w := store.Writer{AgentID: "ag", FencingToken: jobs[0].FencingToken}
	const per = 100
	text := fmt.Sprintf("%080d", 0)
	seq := int64(0)
	batch := make([]store.LogLine, per)
	for b.Loop() {
		for i := range batch {
			seq++
			batch[i] = store.LogLine{Seq: seq, Time: t0, Stream: 1, Text: text}
		}
		must(s.AppendLogs(ctx, "job", w, batch))
	}
	b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "lines/s")
}
