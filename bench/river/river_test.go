// Package river compares byoc's PostgreSQL dispatch with River, a job
// queue for Go on PostgreSQL, on one throwaway PostgreSQL server: rounds
// of River and of byoc's DispatchThroughput benchmark alternate, and each
// pair prints both rates and their ratio. It is a module of its own so
// that River never enters byoc's go.mod (make bench-river;
// docs/performance-postgres.md).
package river

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// River's settings: its fastest (docs/performance-postgres.md says the same).
const (
	riverWorkers    = 100                 // MaxWorkers of the default queue
	riverCooldown   = time.Millisecond    // FetchCooldown, River's minimum
	riverPoll       = time.Millisecond    // FetchPollInterval, River's minimum
	riverInserters  = 4                   // goroutines calling InsertMany
	riverInsertSize = 100                 // jobs per InsertMany call
	riverPoolConns  = int32(riverWorkers) // pgxpool MaxConns
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.done.Add(1)
	return nil
}

// envInt is the integer in environment variable name, else def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkRiverVsByoc runs BYOC_RIVER_ROUNDS (3) rounds, each River then
// byoc, of BYOC_BENCH_JOBS (50,000) no-op jobs each, and prints each
// round's rates, CPU per job and the ratio byoc/River.
func BenchmarkRiverVsByoc(b *testing.B) {
	rounds := envInt("BYOC_RIVER_ROUNDS", 3)
	jobs := envInt("BYOC_BENCH_JOBS", 50000)
	bench := buildByocBench(b)
	var ratios, cpuRatios, vendorRatios, pgRatios []float64
	for range b.N {
		for round := 1; round <= rounds; round++ {
			dsn := pgtest.Start(b)
			rr, rcpu, rpg := runRiver(b, dsn, jobs)
			dsn = pgtest.Start(b)
			br, bims, bgen, bpg, line := runByoc(b, bench, dsn, jobs)
			b1 := bims + bgen
			// byoc's CPU per job: imsd and the load generator (its 1,000
			// agents and its enqueuers, as River's process holds its
			// workers and inserters) plus PostgreSQL; River's: its
			// process plus PostgreSQL. Their quotient is the ratio of
			// throughputs the two would reach on the same CPU, which the
			// jobs/s of a shared machine only approximate.
			cpuRatio := (rcpu + rpg) / (b1 + bpg)
			// The vendor's side only: imsd and PostgreSQL, against all of
			// River's (its workers run on the vendor's machines; byoc's
			// agents, the load generator here, on the customers').
			vendorRatio := (rcpu + rpg) / (bims + bpg)
			// PostgreSQL's alone: the shared part neither scales out.
			// River adds worker processes, byoc imsd replicas (and its
			// agents run in the customers' accounts), so on one database
			// with enough of either each tops out where PostgreSQL's
			// CPU runs out: this quotient is the ratio of those ceilings.
			pgRatio := rpg / bpg
			ratios = append(ratios, br/rr)
			cpuRatios = append(cpuRatios, cpuRatio)
			vendorRatios = append(vendorRatios, vendorRatio)
			pgRatios = append(pgRatios, pgRatio)
			fmt.Printf("round %d: River %.0f jobs/s, CPU per job %.0f µs in its process (inserts and workers) + %.0f µs in PostgreSQL; byoc %.0f jobs/s, CPU per job %.0f µs in imsd + %.0f µs in the load generator (the agents) + %.0f µs in PostgreSQL; byoc/River: jobs/s %.3f, by CPU per job %.3f, by the vendor's CPU per job (imsd and PostgreSQL) %.3f, by PostgreSQL's CPU per job (the ceiling on one database, the processes scaled out) %.3f [load average %s]\n",
				round, rr, rcpu, rpg, br, bims, bgen, bpg, br/rr, cpuRatio, vendorRatio, pgRatio, loadAverage())
			fmt.Printf("  byoc: %s\n", line)
		}
	}
	slices.Sort(ratios)
	slices.Sort(cpuRatios)
	slices.Sort(vendorRatios)
	slices.Sort(pgRatios)
	b.ReportMetric(ratios[len(ratios)/2], "byoc/river")
	b.ReportMetric(cpuRatios[len(cpuRatios)/2], "byoc/river-by-cpu")
	b.ReportMetric(vendorRatios[len(vendorRatios)/2], "byoc/river-by-vendor-cpu")
	b.ReportMetric(pgRatios[len(pgRatios)/2], "byoc/river-by-postgres-cpu")
	fmt.Printf("byoc/River over %d rounds: jobs/s min %.3f, median %.3f, max %.3f; by CPU per job (all processes and PostgreSQL) min %.3f, median %.3f, max %.3f; by the vendor's CPU per job (imsd and PostgreSQL against all of River's) min %.3f, median %.3f, max %.3f; by PostgreSQL's CPU per job (the ceiling of each on one database, its own processes scaled out) min %.3f, median %.3f, max %.3f (River v0.51.1: %d workers, FetchCooldown %s, FetchPollInterval %s, InsertMany of %d from %d goroutines; byoc: DispatchThroughput/postgres/batch, 1,000 agents, EnqueueJobs of 100 from 4 goroutines) [%s]\n",
		len(ratios), ratios[0], ratios[len(ratios)/2], ratios[len(ratios)-1], cpuRatios[0], cpuRatios[len(cpuRatios)/2], cpuRatios[len(cpuRatios)-1],
		vendorRatios[0], vendorRatios[len(vendorRatios)/2], vendorRatios[len(vendorRatios)-1],
		pgRatios[0], pgRatios[len(pgRatios)/2], pgRatios[len(pgRatios)-1],
		riverWorkers, riverCooldown, riverPoll, riverInsertSize, riverInserters, machine())
}

// runRiver inserts and works jobs no-op jobs with River on a fresh
// database and returns jobs/s, enqueue to every job completed in the
// database, and the CPU per job of this process and of the database's
// PostgreSQL backends, in µs.
func runRiver(b *testing.B, dsn string, jobs int) (rate, cpuPerJob, pgPerJob float64) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = riverPoolConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{done: &done})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     riverCooldown,
		FetchPollInterval: riverPoll,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverWorkers}},
		Workers:           workers,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := client.Stop(sctx); err != nil {
			b.Errorf("stop River: %v", err)
		}
	}()
	pg := pgtest.WatchBackends(dsn)
	start, cpu0 := time.Now(), selfCPU()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range riverInserters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				first := int(next.Add(riverInsertSize)) - riverInsertSize
				if first >= jobs {
					return
				}
				params := make([]river.InsertManyParams, 0, riverInsertSize)
				for i := first; i < min(first+riverInsertSize, jobs); i++ {
					params = append(params, river.InsertManyParams{Args: noopArgs{}})
				}
				if _, err := client.InsertMany(ctx, params); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// Done when every job is completed in the database, as byoc's run
	// ends when every result is stored.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var n int
		if done.Load() >= int64(jobs) {
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&n); err != nil {
				b.Fatal(err)
			}
			if n >= jobs {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("River: %d of %d jobs worked, %d completed", done.Load(), jobs, n)
		}
		time.Sleep(2 * time.Millisecond) // polling the database for the end, as byoc's run does
	}
	elapsed, cpu := time.Since(start), selfCPU()-cpu0
	pgCPU := pg.Stop()
	return float64(jobs) / elapsed.Seconds(), float64(cpu.Microseconds()) / float64(jobs), float64(pgCPU.Microseconds()) / float64(jobs)
}

// buildByocBench compiles byoc's bench package once.
func buildByocBench(b *testing.B) string {
	out := filepath.Join(b.TempDir(), "bench.test")
	cmd := exec.Command("go", "test", "-c", "-o", out, ".")
	cmd.Dir = byocBenchDir(b)
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build byoc's bench: %v\n%s", err, msg)
	}
	return out
}

func byocBenchDir(b *testing.B) string {
	dir, err := filepath.Abs("..")
	if err != nil {
		b.Fatal(err)
	}
	return dir
}

var byocLine = regexp.MustCompile(`dispatch throughput postgres, batch enqueue: .*: ([0-9.]+) jobs/s, .*CPU per job: imsd ([0-9.]+) µs, load generator ([0-9.]+) µs, PostgreSQL ([0-9.]+) µs`)

// runByoc runs byoc's DispatchThroughput/postgres/batch on dsn and returns
// its jobs/s, the CPU per job of imsd, of the load generator and of the
// PostgreSQL backends (as the benchmark measured them over its timed
// run, without the fleet's set-up), and the line it printed.
func runByoc(b *testing.B, bench, dsn string, jobs int) (rate, imsPerJob, genPerJob, pgPerJob float64, line string) {
	cmd := exec.Command(bench, "-test.run", "^$", "-test.bench", "DispatchThroughput/postgres", "-test.benchtime", "1x", "-test.timeout", "20m")
	cmd.Dir = byocBenchDir(b)
	cmd.Env = append(os.Environ(), "BYOC_BENCH_POSTGRES_URL="+dsn, "BYOC_BENCH_ENQUEUE=batch", "BYOC_BENCH_JOBS="+strconv.Itoa(jobs))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		b.Fatalf("byoc's DispatchThroughput: %v\n%s", err, out.Bytes())
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if m := byocLine.FindStringSubmatch(sc.Text()); m != nil {
			rate, _ = strconv.ParseFloat(m[1], 64)
			ims, _ := strconv.ParseFloat(m[2], 64)
			gen, _ := strconv.ParseFloat(m[3], 64)
			pg, _ := strconv.ParseFloat(m[4], 64)
			return rate, ims, gen, pg, sc.Text()
		}
	}
	b.Fatalf("byoc's DispatchThroughput printed no figure:\n%s", out.Bytes())
	return 0, 0, 0, 0, ""
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil || len(b) < 14 {
		return "?"
	}
	f := bytes.Fields(b)
	return string(bytes.Join(f[:3], []byte(" ")))
}

func machine() string {
	return fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
}
