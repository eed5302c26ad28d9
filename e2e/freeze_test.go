package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// An agent frozen (SIGSTOP) for a few seconds, well inside its jobs'
// lease, keeps them: the running plugin does not give up on it, and the
// job completes once the agent runs again. Under the egress proxy (the
// default) and the machine's network alike (issue 34: the fault
// harness's seed 2 lost its job this way).
func TestBriefFreezeKeepsRunningJob(t *testing.T) {
	skipShort(t)
	for _, network := range []string{"proxy", "host"} {
		t.Run(network, func(t *testing.T) {
			// A lease well beyond the freeze: the agent keeps its lease.
			ims := cluster.StartIMS(t, cluster.Options{LeaseDuration: 10 * time.Second, HeartbeatInterval: 500 * time.Millisecond, SweepInterval: 50 * time.Millisecond})
			c := ims.Admin()
			_, token := cluster.NewInstall(t, c, "shop", "acme")
			agent := cluster.StartAgent(t, ims.URL(), token, filepath.Join(t.TempDir(), "agent"), "--sandbox-network", network)
			waitConnected(t, ims, "acme")

			// The step sleeps 6.x s (the x unique to this test): the freeze
			// below starts once it runs and ends well before it does.
			markerSeq++
			mark := fmt.Sprintf("6.%d%03d", os.Getpid(), markerSeq)
			job := enqueue(t, c, "acme", `echo start; sleep `+mark+`; echo done`, 120)
			waitPIDs(t, mark, 1)

			pid := agent.Cmd.Process.Pid
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2500 * time.Millisecond) // the fault itself: the agent stays frozen this long
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}

			lines, end := follow(t, c, job.Id)
			if end.State != imsv1.JobState_JOB_STATE_SUCCEEDED || end.Attempt != 1 {
				t.Fatalf("job ended %v at attempt %d (%s); want succeeded at attempt 1\n%q", end.State, end.Attempt, end.Error, cluster.Texts(lines))
			}
		})
	}
}
