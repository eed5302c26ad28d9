package e2e

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// EnqueueJobs answers with the config each job was sent with, over every
// protocol and codec, stores it as sent, and hands it to the agent as
// sent, whether the batch repeats one config or mixes several.
func TestEnqueueJobsKeepsEachConfig(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	_, tok := cluster.NewInstall(t, ims.Admin(), "shop", "alpha")
	cluster.NewInstall(t, ims.Admin(), "shop", "beta")
	a := cluster.EnrollRaw(t, ims.URL(), tok)
	a.Connect(t, 100)

	mk := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	same := map[string]any{"steps": []any{map[string]any{"name": "a", "script": "echo a"}}, "n": 1.0, "z": true, "m": map[string]any{"b": "2", "a": "1"}}
	configs := []*structpb.Struct{mk(same), mk(same), mk(map[string]any{"other": "x"}), nil, mk(same), {}}
	for name, opts := range map[string][]connect.ClientOption{
		"connect-proto": nil,
		"connect-json":  {connect.WithProtoJSON()},
		"grpc":          {connect.WithGRPC()},
		"grpc-web":      {connect.WithGRPCWeb()},
	} {
		t.Run(name, func(t *testing.T) {
			opts = append(opts, connect.WithInterceptors(cluster.Bearer(ims.AdminToken)))
			c := imsv1connect.NewOperatorServiceClient(agent.DefaultHTTPClient(), ims.URL(), opts...)
			req := &imsv1.EnqueueJobsRequest{}
			for i, cfg := range configs {
				install := "alpha"
				if i%2 == 1 {
					install = "beta"
				}
				req.Jobs = append(req.Jobs, &imsv1.EnqueueJobRequest{Install: install, ComponentType: "action", Operation: "apply", Config: cfg})
			}
			r, err := c.EnqueueJobs(context.Background(), connect.NewRequest(req))
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Msg.Jobs) != len(configs) {
				t.Fatalf("%d jobs answered, want %d", len(r.Msg.Jobs), len(configs))
			}
			want := func(i int) *structpb.Struct {
				if configs[i] == nil {
					return &structpb.Struct{}
				}
				return configs[i]
			}
			assigned := map[string]int{}
			for i, j := range r.Msg.Jobs {
				if !proto.Equal(j.Config, want(i)) {
					t.Errorf("jobs[%d]: answered config %v, want %v", i, j.Config, want(i))
				}
				if len(j.ProtoReflect().GetUnknown()) != 0 {
					t.Errorf("jobs[%d]: the answer has unknown fields", i)
				}
				got, err := c.GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: j.Id}))
				if err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(got.Msg.Job.Config, want(i)) {
					t.Errorf("jobs[%d]: stored config %v, want %v", i, got.Msg.Job.Config, want(i))
				}
				if i%2 == 0 {
					assigned[j.Id] = i
				}
			}
			// alpha's agent gets its jobs with their configs.
			for n := len(assigned); n > 0; n-- {
				as := a.Assignment(t)
				i, ok := assigned[as.JobId]
				if !ok {
					t.Fatalf("agent got job %s, not one of alpha's", as.JobId)
				}
				if !proto.Equal(as.Config, want(i)) {
					t.Errorf("jobs[%d]: the agent got config %v, want %v", i, as.Config, want(i))
				}
				delete(assigned, as.JobId)
			}
		})
	}
}
