package helm

import (
	"context"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/kube"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
)

// fakeCluster is a cluster made of Helm's fake kube client and an
// in-memory release store shared by every job, as a real cluster's
// Secrets are. Live objects (for drift) are the deployed manifest's,
// changed by edit.
type fakeCluster struct {
	t        testing.TB
	releases *storage.Storage
	kube     *blockingKube

	mu   sync.Mutex
	edit func(key objectKey, obj map[string]any) map[string]any // nil result: deleted
	// kubeconfigs records the KUBECONFIG each job connected with.
	kubeconfigs []string
}

func newFakeCluster(t testing.TB) *fakeCluster {
	mem := driver.NewMemory()
	mem.SetNamespace("default")
	return &fakeCluster{
		t:        t,
		releases: storage.Init(mem),
		kube:     &blockingKube{FailingKubeClient: &kubefake.FailingKubeClient{PrintingKubeClient: kubefake.PrintingKubeClient{Out: io.Discard}}},
	}
}

// plugin returns a helm plugin connected to the fake cluster.
func (f *fakeCluster) plugin() *Plugin {
	return &Plugin{connect: f.connect}
}

func (f *fakeCluster) connect(ctx context.Context, kubeconfig, namespace string, log func(string, ...any)) (*cluster, error) {
	f.mu.Lock()
	f.kubeconfigs = append(f.kubeconfigs, kubeconfig)
	f.mu.Unlock()
	cfg := &action.Configuration{
		Releases:     f.releases,
		KubeClient:   &cancelKube{kubeClient: f.kube, ctx: ctx},
		Capabilities: chartutil.DefaultCapabilities,
		Log:          log,
	}
	return &cluster{cfg: cfg, live: f.live}, nil
}

func (f *fakeCluster) setEdit(edit func(key objectKey, obj map[string]any) map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.edit = edit
}

func (f *fakeCluster) live(_ context.Context, manifest string) ([]liveObject, error) {
	objs, err := parseManifests(manifest, "default")
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	edit := f.edit
	f.mu.Unlock()
	var out []liveObject
	for _, o := range objs {
		live := normalizeSecret(o.key, jsonRoundTrip(o.obj))
		// What the API server adds: the comparison must ignore it.
		meta := live["metadata"].(map[string]any)
		meta["uid"] = "0b5e-" + o.key.Name
		meta["resourceVersion"] = "42"
		if edit != nil {
			live = edit(o.key, live)
		}
		out = append(out, liveObject{key: o.key, live: live})
	}
	return out, nil
}

// blockingKube is Helm's fake kube client whose waits can fail or block
// until released.
type blockingKube struct {
	*kubefake.FailingKubeClient

	mu       sync.Mutex
	block    chan struct{} // non-nil: Wait blocks until it is closed
	waiting  chan struct{} // closed when a blocked Wait starts
	waitErr  error
	failN    int // waits left to fail with waitErr; <0: all
	waits    int
	creates  int
	finished chan struct{} // closed when a blocked Wait returns
}

func (k *blockingKube) blockWaits() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.block, k.waiting, k.finished = make(chan struct{}), make(chan struct{}), make(chan struct{})
}

// failWaits makes the next n waits fail with err (n < 0: every wait).
func (k *blockingKube) failWaits(err error, n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.waitErr, k.failN = err, n
}

func (k *blockingKube) Create(r kube.ResourceList) (*kube.Result, error) {
	k.mu.Lock()
	k.creates++
	k.mu.Unlock()
	return k.FailingKubeClient.Create(r)
}

func (k *blockingKube) Wait(r kube.ResourceList, d time.Duration) error {
	k.mu.Lock()
	k.waits++
	block, waiting, finished, err := k.block, k.waiting, k.finished, k.waitErr
	switch {
	case k.failN > 0:
		k.failN--
	case k.failN == 0:
		err = nil
	}
	k.mu.Unlock()
	if block != nil {
		close(waiting)
		<-block
		close(finished)
	}
	if err != nil {
		return err
	}
	return k.FailingKubeClient.Wait(r, d)
}

func (k *blockingKube) WaitWithJobs(r kube.ResourceList, d time.Duration) error { return k.Wait(r, d) }

// waitGoroutineGone waits until no goroutine of this process is in fn (a
// function as runtime.Stack prints it), polling its stacks, and fails
// after 10 s: the signal that an abandoned goroutine (Helm's operation
// goroutine, left running when its context ended) has done all it was
// going to do.
func waitGoroutineGone(t *testing.T, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.Stack(buf, true)
		if n == len(buf) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if !strings.Contains(string(buf[:n]), fn) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a goroutine is still in %s after 10s:\n%s", fn, buf[:n])
		}
		time.Sleep(5 * time.Millisecond) // the poll interval
	}
}
