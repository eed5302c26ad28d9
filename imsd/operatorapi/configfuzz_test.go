package operatorapi

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// genStruct builds a Struct from fuzz bytes, as a client may send one:
// deep chains, wide objects, long lists and keys, NaN and infinities,
// strings that are not UTF-8, Values with no kind set.
type genStruct struct {
	b     []byte
	nodes int
}

func (g *genStruct) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

func (g *genStruct) str() string {
	n := min(int(g.byte()), len(g.b))
	s := string(g.b[:n])
	g.b = g.b[n:]
	return s
}

func (g *genStruct) value(depth int) *structpb.Value {
	g.nodes++
	if g.nodes > 20_000 || depth > 300 {
		return structpb.NewNullValue()
	}
	switch g.byte() % 11 {
	case 0:
		return structpb.NewNullValue()
	case 1:
		return structpb.NewBoolValue(g.byte()%2 == 0)
	case 2:
		var buf [8]byte
		for i := range buf {
			buf[i] = g.byte()
		}
		return structpb.NewNumberValue(math.Float64frombits(binary.BigEndian.Uint64(buf[:])))
	case 3:
		return structpb.NewStringValue(g.str())
	case 4:
		l := &structpb.ListValue{}
		for range g.byte() % 8 {
			l.Values = append(l.Values, g.value(depth+1))
		}
		return structpb.NewListValue(l)
	case 5:
		return structpb.NewStructValue(g.object(depth, int(g.byte()%8)))
	case 6: // a chain
		top := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		cur := top
		for range int(g.byte()) * 2 {
			next := &structpb.Struct{Fields: map[string]*structpb.Value{}}
			cur.Fields[g.str()] = structpb.NewStructValue(next)
			cur = next
		}
		return structpb.NewStructValue(top)
	case 7: // wide
		m := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for i := range int(g.byte()) * 60 {
			m.Fields["k"+strconv.Itoa(i)] = structpb.NewNumberValue(float64(i))
		}
		return structpb.NewStructValue(m)
	case 8: // a long list
		l := &structpb.ListValue{Values: make([]*structpb.Value, int(g.byte())*500)}
		for i := range l.Values {
			l.Values[i] = structpb.NewNullValue()
		}
		return structpb.NewListValue(l)
	case 9: // a long key
		return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{strings.Repeat("k", int(g.byte())*8): g.value(depth + 1)}})
	default:
		return &structpb.Value{} // no kind
	}
}

func (g *genStruct) object(depth, n int) *structpb.Struct {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for range n {
		s.Fields[g.str()] = g.value(depth + 1)
	}
	return s
}

var fuzzSeeds = [][]byte{
	{},
	{2, 1, 'a', 3, 2, 'h', 'i', 1, 'b', 6, 60, 1, 'x'},
	{1, 1, 'w', 7, 170},
	{1, 1, 'n', 2, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1},
	{1, 1, 's', 3, 2, 0xff, 0xfe},
	{1, 1, 'l', 8, 201},
	{1, 0, 9, 129, 0},
	{1, 1, 'z', 10},
	{1, 1, 'd', 6, 255, 0},
}

// FuzzEnqueueConfig: a config enqueue takes (configJSON, what EnqueueJob
// and EnqueueJobs store) is one every agent takes (its digest computes
// from the stored JSON, as imsd's wire side and the agent decode it), and
// one whose job every client can list; one it refuses is refused as
// invalid_argument naming a path under "config".
func FuzzEnqueueConfig(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		g := &genStruct{b: b}
		cfg := g.object(0, int(g.byte()%6))
		stored, err := configJSON(cfg)
		if err != nil {
			var e *errs.Error
			if !errors.As(err, &e) {
				t.Fatalf("the limits passed a config protojson cannot encode: %v", err)
			}
			if e.Code != errs.Invalid || !strings.HasPrefix(e.Field, "config") {
				t.Fatalf("refused without naming a path under config: %v", err)
			}
			return
		}
		var m map[string]any
		if err := json.Unmarshal(stored, &m); err != nil {
			t.Fatalf("stored config is not JSON: %v", err)
		}
		if _, err := agentproto.ConfigDigest(m); err != nil {
			t.Fatalf("enqueue took a config the agent refuses: %v", err)
		}
		checkShown(t, store.Job{ID: "job_1", InstallID: "ins_1", State: store.JobQueued, Config: stored, CreatedAt: time.Unix(1, 0)})
	})
}

// checkShown: a job as lists and gets show it encodes in binary and JSON
// and decodes with protobuf's default limits, as every client does.
func checkShown(t *testing.T, j store.Job) {
	t.Helper()
	p, _ := shownJob(j)
	bin, err := proto.Marshal(&imsv1.ListJobsResponse{Jobs: []*imsv1.Job{p}})
	if err != nil {
		t.Fatalf("a listed job does not encode: %v", err)
	}
	if err := proto.Unmarshal(bin, &imsv1.ListJobsResponse{}); err != nil {
		t.Fatalf("a listed job does not decode: %v", err)
	}
	js, err := protojson.Marshal(p)
	if err != nil {
		t.Fatalf("a listed job does not encode as JSON: %v", err)
	}
	if err := protojson.Unmarshal(js, &imsv1.Job{}); err != nil {
		t.Fatalf("a listed job does not decode from JSON: %v", err)
	}
}

// FuzzShownJob: whatever a job's stored row holds (any config bytes, any
// bytes in its text fields), lists and gets show it in a form every
// client decodes.
func FuzzShownJob(f *testing.F) {
	f.Add([]byte(`{"a":1}`), "job_1", "op", "")
	f.Add([]byte(strings.Repeat(`{"a":`, 5000)+"{}"+strings.Repeat("}", 5000)), "job_2", "op", "")
	f.Add([]byte(strings.Repeat(`[`, 200)+strings.Repeat("]", 200)), "job_3", "op", "boom")
	f.Add([]byte(`{"s":"\ud800","t":"a\\"}`), "job_\xff", "op \xfe", "err \xff")
	f.Add([]byte(`{"sensitive":["x"],"env":{"A":"x"}}`), "job_4", "op", "")
	f.Add([]byte(`not json`), "job_5", "", "")
	f.Fuzz(func(t *testing.T, config []byte, id, by, jerr string) {
		checkShown(t, store.Job{ID: id, InstallID: "ins_1", State: store.JobFailed, Config: config, CreatedBy: by, Error: jerr,
			Outputs: map[string]string{by: jerr}, CreatedAt: time.Unix(1, 0)})
	})
}
