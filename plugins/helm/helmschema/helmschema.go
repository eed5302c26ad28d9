// Package helmschema holds the JSON Schema of the built-in helm type's
// config, apart from the plugin: imsd and the byoc CLI check component
// configs against it without linking Helm or client-go.
package helmschema

// Config is the JSON Schema of the helm config, as the helm plugin
// declares it in Describe. Exactly one chart source is set: chart (an OCI
// artifact in the install registry or an OCI layout), chart_dir (a local directory, for development), manifests (raw
// YAML, wrapped in a generated chart) or manifests_base64 (the same,
// base64-encoded: how imsd sends the app's cluster policies).
const Config = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["release"],
  "additionalProperties": false,
  "oneOf": [
    {"required": ["chart"]},
    {"required": ["chart_dir"]},
    {"required": ["manifests"]},
    {"required": ["manifests_base64"]}
  ],
  "properties": {
    "release": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 53, "description": "the Helm release's name"},
    "namespace": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63, "default": "default"},
    "create_namespace": {"type": "boolean", "default": false},
    "chart": {"type": "string", "minLength": 1, "description": "the chart as an OCI artifact, by digest: REPO@sha256:HEX in the install registry, or oci:LAYOUT-DIR@sha256:HEX (an OCI image layout on the agent)"},
    "chart_dir": {"type": "string", "minLength": 1, "description": "a chart directory on the agent's machine (development)"},
    "manifests": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}, "description": "raw Kubernetes manifests (YAML), installed as a release of their own"},
    "manifests_base64": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}, "description": "raw manifests, each base64-encoded: how imsd sends the app's cluster policies, whose text may hold {{ }} meant for the cluster"},
    "values": {"type": "object", "description": "the chart's values"},
    "wait": {"type": "boolean", "default": true, "description": "wait until the release's objects are ready"},
    "timeout": {"type": "string", "default": "5m", "description": "how long to wait for readiness, as a Go duration"},
    "rollback_on_failure": {"type": "boolean", "default": true, "description": "roll an upgrade that fails back to the last deployed revision"},
    "history_max": {"type": "integer", "minimum": 1, "default": 10, "description": "revisions kept in the release history"}
  }
}`
