package helm

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/yaml"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

// objectKey names a Kubernetes object: its API group (not version: an
// object moved from one version to another is the same object), kind,
// namespace ("" when cluster-scoped) and name.
type objectKey struct {
	Group, Kind, Namespace, Name string
}

// String is the object's address in a plan: Kind/namespace/name, or
// Kind/name when cluster-scoped (the group is left out: policies match
// addresses by kind, as the maintenance example's RBAC rule does).
func (k objectKey) String() string {
	if k.Namespace == "" {
		return k.Kind + "/" + k.Name
	}
	return k.Kind + "/" + k.Namespace + "/" + k.Name
}

// object is one manifest object, decoded.
type object struct {
	key objectKey
	obj map[string]any
}

// clusterScoped lists the kinds this plugin knows to be cluster-scoped,
// by group/kind: a plan names them without a namespace. (Drift asks the
// cluster's REST mapping instead; a plan must work before objects exist.)
var clusterScoped = map[string]bool{
	"/Namespace": true, "/Node": true, "/PersistentVolume": true,
	"rbac.authorization.k8s.io/ClusterRole": true, "rbac.authorization.k8s.io/ClusterRoleBinding": true,
	"apiextensions.k8s.io/CustomResourceDefinition":                 true,
	"admissionregistration.k8s.io/ValidatingAdmissionPolicy":        true,
	"admissionregistration.k8s.io/ValidatingAdmissionPolicyBinding": true,
	"admissionregistration.k8s.io/MutatingAdmissionPolicy":          true,
	"admissionregistration.k8s.io/MutatingAdmissionPolicyBinding":   true,
	"admissionregistration.k8s.io/ValidatingWebhookConfiguration":   true,
	"admissionregistration.k8s.io/MutatingWebhookConfiguration":     true,
	"storage.k8s.io/StorageClass":                                   true, "storage.k8s.io/CSIDriver": true,
	"scheduling.k8s.io/PriorityClass": true, "networking.k8s.io/IngressClass": true,
	"node.k8s.io/RuntimeClass": true, "apiregistration.k8s.io/APIService": true,
	"kyverno.io/ClusterPolicy": true, "kyverno.io/ClusterCleanupPolicy": true,
	"policies.kyverno.io/ValidatingPolicy": true,
}

// parseManifests decodes a release's manifest (YAML documents) into
// objects, in a stable order; namespaced objects without a namespace get
// ns. Empty documents are skipped.
func parseManifests(manifest, ns string) ([]object, error) {
	docs := releaseutil.SplitManifests(manifest)
	names := make([]string, 0, len(docs))
	for name := range docs {
		names = append(names, name)
	}
	// SplitManifests names them manifest-0, manifest-1, ...: keep that order.
	sort.Slice(names, func(i, j int) bool { return manifestIndex(names[i]) < manifestIndex(names[j]) })
	var out []object
	for _, name := range names {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(docs[name]), &m); err != nil {
			return nil, fmt.Errorf("manifest document %d: %w", manifestIndex(name)+1, err)
		}
		if len(m) == 0 {
			continue
		}
		m = jsonRoundTrip(m)
		apiVersion, _ := m["apiVersion"].(string)
		kind, _ := m["kind"].(string)
		meta, _ := m["metadata"].(map[string]any)
		objName, _ := meta["name"].(string)
		if kind == "" || objName == "" {
			return nil, fmt.Errorf("manifest document %d: not a Kubernetes object (kind %q, metadata.name %q)", manifestIndex(name)+1, kind, objName)
		}
		group := ""
		if i := strings.LastIndex(apiVersion, "/"); i >= 0 {
			group = apiVersion[:i]
		}
		objNS, _ := meta["namespace"].(string)
		if clusterScoped[group+"/"+kind] {
			objNS = ""
		} else if objNS == "" {
			objNS = ns
		}
		out = append(out, object{key: objectKey{Group: group, Kind: kind, Namespace: objNS, Name: objName}, obj: m})
	}
	return out, nil
}

func manifestIndex(name string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(name, "manifest-"))
	return n
}

// jsonRoundTrip makes m JSON-like (float64 numbers, []any, map[string]any)
// so that values from YAML, the API server and the config compare equal.
func jsonRoundTrip(m map[string]any) map[string]any {
	b, err := json.Marshal(m)
	if err != nil {
		return m
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return m
	}
	return out
}

// diffManifests is the plan: one change per object that differs between
// the deployed manifest (old; "" when nothing is deployed) and the new
// one. Objects are ordered as in the new manifest, deletions last.
func diffManifests(oldManifest, newManifest, ns string) ([]sdk.PlannedChange, error) {
	oldObjs, err := parseManifests(oldManifest, ns)
	if err != nil {
		return nil, fmt.Errorf("deployed manifest: %w", err)
	}
	newObjs, err := parseManifests(newManifest, ns)
	if err != nil {
		return nil, fmt.Errorf("new manifest: %w", err)
	}
	old := map[objectKey]map[string]any{}
	for _, o := range oldObjs {
		old[o.key] = o.obj
	}
	var changes []sdk.PlannedChange
	seen := map[objectKey]bool{}
	for _, o := range newObjs {
		seen[o.key] = true
		before, ok := old[o.key]
		switch {
		case !ok:
			changes = append(changes, change(o.key, sdk.ActionCreate, nil, o.obj, "new "+o.key.Kind))
		case !reflect.DeepEqual(before, o.obj):
			changes = append(changes, change(o.key, sdk.ActionUpdate, before, o.obj, changedSummary(before, o.obj)))
		}
	}
	for _, o := range oldObjs {
		if !seen[o.key] {
			changes = append(changes, change(o.key, sdk.ActionDelete, o.obj, nil, "no longer in the chart"))
		}
	}
	return changes, nil
}

// change builds a planned change, masking a Secret's values.
func change(key objectKey, action string, before, after map[string]any, summary string) sdk.PlannedChange {
	c := sdk.PlannedChange{Address: key.String(), Action: action, Summary: summary, Sensitive: secretPaths(key, before, after)}
	if before != nil {
		c.Before = before
	}
	if after != nil {
		c.After = after
	}
	return c
}

// secretPaths lists the value paths of a Secret (data.KEY, stringData.KEY)
// in either version, to be masked; none for other kinds. The summary of
// a Secret's change names its keys, never its values.
func secretPaths(key objectKey, objs ...map[string]any) []string {
	if key.Group != "" || key.Kind != "Secret" {
		return nil
	}
	var paths []string
	for _, o := range objs {
		for _, field := range []string{"data", "stringData"} {
			m, _ := o[field].(map[string]any)
			for k := range m {
				p := field + "." + k
				if strings.Contains(k, ".") {
					// A key with a dot cannot be named by a path:
					// mask the whole map.
					p = field
				}
				if !slices.Contains(paths, p) {
					paths = append(paths, p)
				}
			}
		}
	}
	sort.Strings(paths)
	return paths
}

// changedSummary names the leaf paths that differ, at most five.
func changedSummary(before, after map[string]any) string {
	var paths []string
	diffPaths("", before, after, &paths)
	sort.Strings(paths)
	if len(paths) == 0 {
		return "changed"
	}
	s := "changed: " + strings.Join(paths[:min(5, len(paths))], ", ")
	if len(paths) > 5 {
		s += fmt.Sprintf(" and %d more", len(paths)-5)
	}
	return s
}

// diffPaths appends the paths under prefix where a and b differ: map keys
// are followed, anything else is compared whole.
func diffPaths(prefix string, a, b any, out *[]string) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		for k := range keys {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			diffPaths(p, am[k], bm[k], out)
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, prefix)
	}
}

// driftOf compares each object of the deployed release with its live
// version. Only what the manifest sets is compared (the API server adds
// defaults, status and metadata of its own): a field set in the manifest
// and changed or removed live is drift, and so is a missing object.
func driftOf(deployed []object, live []liveObject) []sdk.PlannedChange {
	byKey := map[objectKey]liveObject{}
	for _, l := range live {
		byKey[l.key] = l
	}
	var changes []sdk.PlannedChange
	for _, o := range deployed {
		l, ok := byKey[o.key]
		if !ok {
			// Looked up by a key without the namespace the REST
			// mapping gave it (cluster-scoped kinds this plugin does
			// not know): try the other form.
			for lk, lo := range byKey {
				if lk.Group == o.key.Group && lk.Kind == o.key.Kind && lk.Name == o.key.Name && (lk.Namespace == "" || o.key.Namespace == "") {
					l, ok = lo, true
				}
			}
		}
		if !ok || l.live == nil {
			changes = append(changes, change(o.key, sdk.ActionCreate, nil, o.obj, "missing from the cluster"))
			continue
		}
		want := normalizeSecret(o.key, o.obj)
		var paths []string
		subsetDiff("", want, l.live, &paths)
		if len(paths) == 0 {
			continue
		}
		sort.Strings(paths)
		summary := "changed outside the release: " + strings.Join(paths[:min(5, len(paths))], ", ")
		if len(paths) > 5 {
			summary += fmt.Sprintf(" and %d more", len(paths)-5)
		}
		// Before is the live object, After what the release says.
		before, _ := pick(l.live, want).(map[string]any)
		changes = append(changes, change(o.key, sdk.ActionUpdate, before, want, summary))
	}
	return changes
}

// normalizeSecret turns a Secret's stringData into data (base64), as the
// API server stores it.
func normalizeSecret(key objectKey, obj map[string]any) map[string]any {
	sd, ok := obj["stringData"].(map[string]any)
	if key.Group != "" || key.Kind != "Secret" || !ok {
		return obj
	}
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	data := map[string]any{}
	if d, ok := obj["data"].(map[string]any); ok {
		for k, v := range d {
			data[k] = v
		}
	}
	for k, v := range sd {
		s, _ := v.(string)
		data[k] = base64.StdEncoding.EncodeToString([]byte(s))
	}
	delete(out, "stringData")
	out["data"] = data
	return out
}

// subsetDiff appends the paths where want sets a value that got does not
// have: maps are compared key by key (keys only in got are ignored),
// lists element by element and must have the same length, scalars must
// be equal. A nil in want sets nothing; an empty map or list in want
// matches a missing one in got.
func subsetDiff(prefix string, want, got any, out *[]string) {
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch w := want.(type) {
	case nil:
		return
	case map[string]any:
		g, _ := got.(map[string]any)
		if g == nil && len(w) > 0 {
			if _, isMap := got.(map[string]any); !isMap && got != nil {
				*out = append(*out, prefix)
				return
			}
		}
		for k, v := range w {
			subsetDiff(join(k), v, g[k], out)
		}
	case []any:
		g, _ := got.([]any)
		if len(g) != len(w) {
			if len(w) == 0 && got == nil {
				return
			}
			*out = append(*out, prefix)
			return
		}
		for i := range w {
			subsetDiff(prefix+"["+strconv.Itoa(i)+"]", w[i], g[i], out)
		}
	default:
		if !reflect.DeepEqual(want, got) {
			*out = append(*out, prefix)
		}
	}
}

// pick returns the parts of got at the paths want sets (what drift shows
// as the live value), keeping got's values.
func pick(got, want any) any {
	wm, ok := want.(map[string]any)
	if !ok {
		return got
	}
	gm, ok := got.(map[string]any)
	if !ok {
		return got
	}
	out := map[string]any{}
	for k, wv := range wm {
		if gv, ok := gm[k]; ok {
			out[k] = pick(gv, wv)
		}
	}
	return out
}

// summarize is a plan's Changes: counts, then one line per change.
func summarize(changes []sdk.PlannedChange) string {
	counts := map[string]int{}
	for _, c := range changes {
		counts[c.Action]++
	}
	if len(changes) == 0 {
		return "no changes"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d to create, %d to update, %d to delete", counts[sdk.ActionCreate], counts[sdk.ActionUpdate], counts[sdk.ActionDelete])
	for _, c := range changes {
		b.WriteString("\n  " + c.String())
	}
	return b.String()
}
