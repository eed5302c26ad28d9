package pgtest

import (
	"bytes"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Backends sums the CPU time of the PostgreSQL backends serving one
// database (their command line names it: "postgres: user db host ..."),
// sampled every 100 ms from /proc while a benchmark runs, so that
// backends that end before the run does still count with what they had
// used at their last sample. Linux only; elsewhere it reads 0.
type Backends struct {
	stopc chan struct{}
	done  chan time.Duration
}

// WatchBackends starts sampling the backends of dsn's database.
func WatchBackends(dsn string) *Backends {
	db := ""
	if u, err := url.Parse(dsn); err == nil {
		db = strings.TrimPrefix(u.Path, "/")
	}
	w := &Backends{stopc: make(chan struct{}), done: make(chan time.Duration, 1)}
	first := map[string]int64{} // pid: ticks when first seen, for backends older than the watch
	last := map[string]int64{}  // pid: ticks at the last sample
	// pid: a backend of db or not, read once from its command line (every
	// 100 ms for every process was a cost of the benchmark's own process
	// that the figures it measures shared the CPU with).
	backend := map[string]bool{}
	sample := func(initial bool) {
		ds, _ := os.ReadDir("/proc")
		for _, d := range ds {
			pid := d.Name()
			if pid[0] < '0' || pid[0] > '9' {
				continue
			}
			is, known := backend[pid]
			if !known {
				cmd, err := os.ReadFile("/proc/" + pid + "/cmdline")
				if err != nil {
					continue
				}
				is = bytes.HasPrefix(cmd, []byte("postgres: ")) && bytes.Contains(cmd, []byte(" "+db+" "))
				backend[pid] = is
			}
			if !is {
				continue
			}
			stat, err := os.ReadFile("/proc/" + pid + "/stat")
			if err != nil {
				continue
			}
			// The fields after the command's closing parenthesis: utime
			// and stime are the 12th and 13th, in clock ticks (100 Hz).
			f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
			if len(f) < 13 {
				continue
			}
			ut, _ := strconv.ParseInt(f[11], 10, 64)
			st, _ := strconv.ParseInt(f[12], 10, 64)
			if _, ok := first[pid]; !ok {
				if initial {
					first[pid] = ut + st
				} else {
					first[pid] = 0
				}
			}
			last[pid] = ut + st
		}
	}
	sample(true)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				sample(false)
			case <-w.stopc:
				sample(false)
				var sum int64
				for pid, t := range last {
					sum += t - first[pid]
				}
				w.done <- time.Duration(sum) * 10 * time.Millisecond
				return
			}
		}
	}()
	return w
}

// Stop ends the sampling and returns the CPU time the database's
// backends used since WatchBackends.
func (w *Backends) Stop() time.Duration {
	close(w.stopc)
	return <-w.done
}
