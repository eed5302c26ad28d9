package helm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// kubeClient is what Helm's actions use of a kube client: Interface and
// the extensions they look for by type assertion. Both *kube.Client and
// Helm's fake clients implement all of it.
type kubeClient interface {
	kube.Interface
	kube.InterfaceExt
	kube.InterfaceThreeWayMerge
	kube.InterfaceDeletionPropagation
	kube.InterfaceResources
}

// cluster is what one job uses of the Kubernetes cluster.
type cluster struct {
	cfg *action.Configuration
	// live reads the live state of a release's objects, for drift.
	live liveReader
}

// liveReader returns the live object of each manifest object (nil when it
// does not exist), as JSON-like maps.
type liveReader func(ctx context.Context, manifest string) ([]liveObject, error)

type liveObject struct {
	key  objectKey
	live map[string]any // nil: not found
}

// connectFunc builds a job's cluster for the release's namespace. log
// receives Helm's debug lines.
type connectFunc func(ctx context.Context, kubeconfig, namespace string, log func(string, ...any)) (*cluster, error)

// connect connects to the cluster of kubeconfig (empty: in-cluster
// config) with Helm's Secrets driver, so the release history lives in the
// cluster (Secrets in the release's namespace), owned by the customer.
//
// Cancel reaches every request to the release's objects: each HTTP
// request of the job's kube client carries a context that ends with ctx,
// and a request made after ctx ended fails at once. Helm's own waits poll
// on a context of their own, so the kube client is wrapped (cancelKube)
// to make waits end with ctx. The release history's client is not tied
// to ctx (it has a timeout of its own): a cancelled operation still
// records its revision as failed.
func connect(ctx context.Context, kubeconfig, namespace string, log func(string, ...any)) (*cluster, error) {
	if err := haveConfig(kubeconfig); err != nil {
		return nil, err
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	flags.WrapConfigFn = func(c *rest.Config) *rest.Config {
		c = rest.CopyConfig(c)
		c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &ctxTransport{ctx: ctx, next: rt} })
		return c
	}
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", log); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	plain := genericclioptions.NewConfigFlags(false)
	plain.KubeConfig = &kubeconfig
	plain.Namespace = &namespace
	restCfg, err := plain.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	restCfg = rest.CopyConfig(restCfg)
	restCfg.Timeout = historyTimeout
	historyClient, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	secrets := driver.NewSecrets(historyClient.CoreV1().Secrets(namespace))
	secrets.Log = log
	cfg.Releases = storage.Init(secrets)
	kc, ok := cfg.KubeClient.(*kube.Client)
	if !ok {
		return nil, fmt.Errorf("kubernetes client: unexpected type %T", cfg.KubeClient)
	}
	cs, err := kc.Factory.KubernetesClientSet()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	checker := kube.NewReadyChecker(cs, log, kube.PausedAsReady(true))
	jobChecker := kube.NewReadyChecker(cs, log, kube.PausedAsReady(true), kube.CheckJobs(true))
	cfg.KubeClient = &cancelKube{kubeClient: kc, ctx: ctx,
		ready: checker.IsReady, readyJobs: jobChecker.IsReady}
	live := func(ctx context.Context, manifest string) ([]liveObject, error) {
		return readLive(ctx, kc, manifest)
	}
	return &cluster{cfg: cfg, live: live}, nil
}

// ErrNoKubeconfig is the error of a job, or a check, with no kubeconfig
// outside a cluster.
var ErrNoKubeconfig = errors.New("no kubeconfig: start agentd with --kubeconfig FILE (or set KUBECONFIG in agentd's environment) to name the cluster helm components deploy to; only an agent running in a Kubernetes pod can do without one")

// haveConfig fails, naming the flag, when there is neither a kubeconfig
// nor an in-cluster config. Without this check client-go falls back to
// http://localhost:8080 and the job fails with "dial tcp 127.0.0.1:8080:
// connect: connection refused", which names nothing to fix.
func haveConfig(kubeconfig string) error {
	if kubeconfig != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return nil
	}
	return ErrNoKubeconfig
}

// ServerVersion connects to the cluster of kubeconfig (empty: the
// in-cluster config) as a job would and returns its API server's version
// (GET /version): agentd preflight's Kubernetes check, through
// byoc-plugins --check-kubernetes.
func ServerVersion(ctx context.Context, kubeconfig string) (string, error) {
	if err := haveConfig(kubeconfig); err != nil {
		return "", err
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	restCfg, err := flags.ToRESTConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	restCfg = rest.CopyConfig(restCfg)
	restCfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return "", fmt.Errorf("kubernetes client: %w", err)
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return "", fmt.Errorf("%s/version: %w", restCfg.Host, err)
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", fmt.Errorf("%s/version: %w", restCfg.Host, err)
	}
	return fmt.Sprintf("%s, Kubernetes %s", restCfg.Host, v.GitVersion), nil
}

// historyTimeout bounds each request for the release history.
const historyTimeout = 30 * time.Second

// ctxTransport ties every request to the job's context.
type ctxTransport struct {
	ctx  context.Context
	next http.RoundTripper
}

func (t *ctxTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s %s: job cancelled: %w", req.Method, req.URL.Path, err)
	}
	ctx, cancel := context.WithCancel(req.Context())
	stop := context.AfterFunc(t.ctx, cancel)
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	// The body is read after RoundTrip returns: cancel when it is closed.
	resp.Body = &cancelBody{ReadCloser: resp.Body, done: func() { stop(); cancel() }}
	return resp, nil
}

type cancelBody struct {
	io.ReadCloser
	done func()
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.done()
	return err
}

// cancelKube makes a kube client's waits and writes end with the job's
// context: Helm's actions run their work on a goroutine that a cancelled
// RunWithContext leaves behind, and its waits poll with a context of their
// own. A write after ctx ended fails, and a wait returns ctx's error as
// soon as it ends, so the abandoned goroutine stops at its next step and
// never records a release as deployed after the job was cancelled.
type cancelKube struct {
	kubeClient
	ctx context.Context
	// ready and readyJobs check one object's readiness; nil runs the
	// wrapped client's own wait (Helm's fake clients) on a goroutine.
	ready, readyJobs func(context.Context, *resource.Info) (bool, error)
	// interval is the readiness poll interval (default 2 s, Helm's).
	interval time.Duration
}

func (k *cancelKube) cancelled(op string) error {
	if err := k.ctx.Err(); err != nil {
		return fmt.Errorf("%s: job cancelled: %w", op, err)
	}
	return nil
}

func (k *cancelKube) Create(r kube.ResourceList) (*kube.Result, error) {
	if err := k.cancelled("create"); err != nil {
		return nil, err
	}
	return k.kubeClient.Create(r)
}

func (k *cancelKube) Update(orig, target kube.ResourceList, force bool) (*kube.Result, error) {
	if err := k.cancelled("update"); err != nil {
		return nil, err
	}
	return k.kubeClient.Update(orig, target, force)
}

func (k *cancelKube) UpdateThreeWayMerge(orig, target kube.ResourceList, force bool) (*kube.Result, error) {
	if err := k.cancelled("update"); err != nil {
		return nil, err
	}
	return k.kubeClient.UpdateThreeWayMerge(orig, target, force)
}

func (k *cancelKube) Delete(r kube.ResourceList) (*kube.Result, []error) {
	if err := k.cancelled("delete"); err != nil {
		return nil, []error{err}
	}
	return k.kubeClient.Delete(r)
}

func (k *cancelKube) DeleteWithPropagationPolicy(r kube.ResourceList, p metav1.DeletionPropagation) (*kube.Result, []error) {
	if err := k.cancelled("delete"); err != nil {
		return nil, []error{err}
	}
	return k.kubeClient.DeleteWithPropagationPolicy(r, p)
}

func (k *cancelKube) Wait(r kube.ResourceList, timeout time.Duration) error {
	return k.wait(r, timeout, k.ready, func() error { return k.kubeClient.Wait(r, timeout) })
}

func (k *cancelKube) WaitWithJobs(r kube.ResourceList, timeout time.Duration) error {
	return k.wait(r, timeout, k.readyJobs, func() error { return k.kubeClient.WaitWithJobs(r, timeout) })
}

func (k *cancelKube) WaitForDelete(r kube.ResourceList, timeout time.Duration) error {
	if k.ready == nil {
		return k.inner(func() error { return k.kubeClient.WaitForDelete(r, timeout) })
	}
	return k.poll(timeout, "deleted", func(context.Context) (bool, error) {
		for _, info := range r {
			if err := info.Get(); err == nil || !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
}

func (k *cancelKube) WatchUntilReady(r kube.ResourceList, timeout time.Duration) error {
	return k.inner(func() error { return k.kubeClient.WatchUntilReady(r, timeout) })
}

func (k *cancelKube) WaitAndGetCompletedPodPhase(name string, timeout time.Duration) (v1.PodPhase, error) {
	var phase v1.PodPhase
	err := k.inner(func() error {
		var err error
		phase, err = k.kubeClient.WaitAndGetCompletedPodPhase(name, timeout)
		return err
	})
	return phase, err
}

// wait polls each object's readiness until all are ready, the timeout
// passes or the job's context ends.
func (k *cancelKube) wait(r kube.ResourceList, timeout time.Duration, ready func(context.Context, *resource.Info) (bool, error), fallback func() error) error {
	if ready == nil {
		return k.inner(fallback)
	}
	return k.poll(timeout, "ready", func(ctx context.Context) (bool, error) {
		for _, info := range r {
			ok, err := ready(ctx, info)
			if err != nil {
				// Helm retries errors too (a 5xx, a conflict); a
				// cancelled job ends the poll through its context.
				return false, nil
			}
			if !ok {
				return false, nil
			}
		}
		return true, nil
	})
}

// errWaitTimeout is returned when objects are not ready in time.
var errWaitTimeout = errors.New("timed out waiting for the condition")

func (k *cancelKube) poll(timeout time.Duration, what string, cond wait.ConditionWithContextFunc) error {
	if err := k.cancelled("wait"); err != nil {
		return err
	}
	interval := k.interval
	if interval == 0 {
		interval = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(k.ctx, timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, interval, true, cond)
	if err == nil {
		return nil
	}
	if k.ctx.Err() != nil {
		return k.cancelled("wait")
	}
	return fmt.Errorf("objects not %s after %s: %w", what, timeout, errWaitTimeout)
}

// inner runs a wait of the wrapped client on a goroutine and returns when
// it does or when the job's context ends, whichever is first.
func (k *cancelKube) inner(f func() error) error {
	if err := k.cancelled("wait"); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-k.ctx.Done():
		return k.cancelled("wait")
	}
}

// readLive reads the live object of every object in manifest.
func readLive(ctx context.Context, kc *kube.Client, manifest string) ([]liveObject, error) {
	infos, err := kc.Build(strings.NewReader(manifest), false)
	if err != nil {
		return nil, fmt.Errorf("read the release's objects: %w", err)
	}
	var out []liveObject
	for _, info := range infos {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		key := objectKey{Group: info.Mapping.GroupVersionKind.Group, Kind: info.Mapping.GroupVersionKind.Kind,
			Namespace: info.Namespace, Name: info.Name}
		helper := resource.NewHelper(info.Client, info.Mapping)
		obj, err := helper.Get(info.Namespace, info.Name)
		if apierrors.IsNotFound(err) {
			out = append(out, liveObject{key: key})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", key, err)
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", key, err)
		}
		out = append(out, liveObject{key: key, live: jsonRoundTrip(m)})
	}
	return out, nil
}
