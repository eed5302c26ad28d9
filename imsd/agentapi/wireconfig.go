package agentapi

// A job's config on the wire: encoded once into the assignment's bytes,
// cached, and its digest.

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// configStruct decodes a job's stored config, a JSON object, and returns
// it with its digest (agentproto.ConfigDigest, over the decoded values:
// the agent computes the same from the Struct it receives). encoding/json
// and structpb.NewStruct do it in about half the CPU of protojson, which
// showed in profiles of a busy imsd. The stored config was encoded by imsd
// itself, so protojson's stricter checks (such as duplicate keys) have
// nothing left to catch.
func configStruct(b []byte) (*structpb.Struct, [32]byte, error) {
	var m map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, [32]byte{}, fmt.Errorf("job config: %w", err)
		}
	}
	digest, err := agentproto.ConfigDigest(m)
	if err != nil {
		return nil, [32]byte{}, err
	}
	st, err := structpb.NewStruct(m)
	return st, digest, err
}

// configFieldNumber is JobAssignment.config's field number.
var configFieldNumber = (&agentv1.JobAssignment{}).ProtoReflect().Descriptor().Fields().ByName("config").Number()

// configField returns a job's stored config encoded as JobAssignment's
// config field, tag and all: what assignment attaches to the message as
// raw bytes, so that sending it copies them instead of walking a Struct
// (marshalling the config was most of an assignment's cost, and its deep
// recursion grew each sending goroutine's stack). Protobuf readers take
// fields in any order, so the agent decodes it as the Struct it is.
func configField(b []byte) ([]byte, [32]byte, error) {
	if last := lastConfig.Load(); last != nil && last.json == string(b) {
		return last.field, last.digest, nil
	}
	field, digest, err := configFieldUncached(b)
	if err == nil && len(b) <= maxCachedConfig {
		lastConfig.Store(&encodedConfig{json: string(b), field: field, digest: digest})
	}
	return field, digest, err
}

// configFieldUncached is configField without its cache.
func configFieldUncached(b []byte) ([]byte, [32]byte, error) {
	cfg, digest, err := configStruct(b)
	if err != nil {
		return nil, digest, err
	}
	enc, err := proto.Marshal(cfg)
	if err != nil {
		return nil, digest, fmt.Errorf("job config: %w", err)
	}
	field := protowire.AppendTag(nil, configFieldNumber, protowire.BytesType)
	field = protowire.AppendBytes(field, enc)
	return field, digest, nil
}

// lastConfig is the config last encoded for an assignment (why:
// docs/performance-connections.md, "Assignment configs as field bytes"): a run across
// a fleet hands the same config to every install's agent. The bytes are
// only ever read once encoded, so assignments share them.
var lastConfig atomic.Pointer[encodedConfig]

// maxCachedConfig bounds the config lastConfig keeps.
const maxCachedConfig = 16 << 10

type encodedConfig struct {
	json   string
	field  []byte
	digest [32]byte
}

// decodeConfig turns an assignment's raw config field back into its
// Struct, for a stream whose codec is not binary protobuf: JSON encoders
// drop unknown fields.
func decodeConfig(m *agentv1.ConnectResponse) error {
	a := m.GetAssignment()
	if a == nil || a.Config != nil {
		return nil
	}
	raw := a.ProtoReflect().GetUnknown()
	if len(raw) == 0 {
		return nil
	}
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(raw, a); err != nil {
		return fmt.Errorf("job config: %w", err)
	}
	a.ProtoReflect().SetUnknown(nil)
	return nil
}

// sensitiveEnvKey is workflow.SensitiveEnvKey (agentapi does not import
// the workflow engine).
const sensitiveEnvKey = "sensitive_env"

// withSensitive returns job id's stored config b with the values of its
// sensitive debug arguments put in, when it names any (sensitiveEnvKey):
// each into the step's environment, and all under the "sensitive" key
// for the agent to redact from everything the job sends back; the marker
// key removed. get returns the values imsd holds in memory; a job whose
// values are not held (a restart of imsd, or another replica queued it)
// is unsendable. The config is then not cached (configField's cache).
func withSensitive(id string, b []byte, get func(string) (map[string]string, bool)) ([]byte, bool, error) {
	if !json.Valid(b) || !bytesContains(b, `"`+sensitiveEnvKey+`"`) {
		return b, false, nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, false, fmt.Errorf("job config: %w", err)
	}
	names, ok := m[sensitiveEnvKey].([]any)
	if !ok {
		return b, false, nil
	}
	var vals map[string]string
	if get != nil {
		vals, ok = get(id)
	}
	if !ok {
		return nil, false, fmt.Errorf("the values of its sensitive arguments are held only in the memory of the imsd that queued it, and this one has none (imsd restarted, or another replica queued it): run the debug command again")
	}
	delete(m, sensitiveEnvKey)
	steps, _ := m["steps"].([]any)
	if len(steps) != 1 {
		return nil, false, fmt.Errorf("job config: a config with sensitive arguments has one step")
	}
	step, _ := steps[0].(map[string]any)
	env, _ := step["env"].(map[string]any)
	if env == nil {
		return nil, false, fmt.Errorf("job config: steps[0].env: missing")
	}
	list, _ := m["sensitive"].([]any)
	for _, n := range names {
		name, _ := n.(string)
		v, ok := vals[name]
		if !ok {
			return nil, false, fmt.Errorf("job config: sensitive argument %s: no value held", name)
		}
		env[name] = v
		list = append(list, v)
	}
	m["sensitive"] = list
	out, err := json.Marshal(m)
	return out, true, err
}

func bytesContains(b []byte, s string) bool { return strings.Contains(string(b), s) }
