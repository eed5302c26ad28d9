package ledger_test

import (
	"bufio"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// whatLeavesDoc is the customer's list of every field that leaves their
// account; its table rows begin "| `Message.field` |".
const whatLeavesDoc = "../../docs/customer/what-leaves-your-account.md"

var rowRe = regexp.MustCompile("^\\| `([A-Za-z0-9]+\\.[a-z0-9_]+)` \\|")

// leavingFields walks every field of every message the agent can send to
// imsd: the input of each AgentService method (ConnectRequest for the
// stream, whose oneof holds the hello, heartbeats, acks, logs and
// results), recursively. Fields of google.protobuf types (Timestamp,
// Value, Struct) are listed as the field that holds them.
func leavingFields() map[string]string {
	out := map[string]string{}
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor, via string)
	walk = func(md protoreflect.MessageDescriptor, via string) {
		if seen[md.FullName()] || strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
			return
		}
		seen[md.FullName()] = true
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			f := fields.Get(i)
			key := string(md.Name()) + "." + string(f.Name())
			out[key] = via
			switch {
			case f.IsMap():
				if v := f.MapValue(); v.Message() != nil {
					walk(v.Message(), key)
				}
			case f.Message() != nil:
				walk(f.Message(), key)
			}
		}
	}
	svc := agentv1.File_byoc_agent_v1_agent_proto.Services().ByName("AgentService")
	methods := svc.Methods()
	for i := 0; i < methods.Len(); i++ {
		m := methods.Get(i)
		walk(m.Input(), "AgentService."+string(m.Name()))
	}
	return out
}

func listedFields(t *testing.T) map[string]int {
	t.Helper()
	f, err := os.Open(whatLeavesDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if m := rowRe.FindStringSubmatch(sc.Text()); m != nil {
			if prev, dup := out[m[1]]; dup {
				t.Errorf("%s:%d: %s is listed twice (also line %d)", whatLeavesDoc, line, m[1], prev)
			}
			out[m[1]] = line
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWhatLeavesIsListed fails when a field the agent can send to imsd is
// not in the customer's list of what leaves their account, or when the
// list names a field that no longer exists.
func TestWhatLeavesIsListed(t *testing.T) {
	fields := leavingFields()
	listed := listedFields(t)
	if len(listed) == 0 {
		t.Fatalf("%s: no table rows of the form | `Message.field` | ...", whatLeavesDoc)
	}
	var missing, stale []string
	for k, via := range fields {
		if _, ok := listed[k]; !ok {
			missing = append(missing, k+" (sent by "+via+")")
		}
	}
	for k, line := range listed {
		if _, ok := fields[k]; !ok {
			stale = append(stale, k+" (line "+strconv.Itoa(line)+")")
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	for _, m := range missing {
		t.Errorf("%s leaves the customer's account but is not on the list: add a row \"| `%s` | what it is | customer data? |\" to the table of its message in docs/customer/what-leaves-your-account.md, saying what it carries and whether it can hold the customer's data",
			m, strings.Fields(m)[0])
	}
	for _, s := range stale {
		t.Errorf("%s: %s is listed but no message the agent sends has it any more: remove its row", whatLeavesDoc, s)
	}
}
