// Package tfschema holds the JSON Schema of the built-in terraform type's
// config, apart from the plugin: imsd and the byoc CLI check component
// configs against it without linking terraform-exec or oras-go.
package tfschema

// Config is the JSON Schema of the terraform config, as the terraform
// plugin declares it in Describe. Exactly one of module and module_dir is
// required; the plugin's Validate says so (a oneOf here would report both
// branches' failures at once).
const Config = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "module": {
      "type": "string",
      "minLength": 1,
      "description": "the module artifact by digest: REPO@sha256:DIGEST in the install registry, or oci:DIR@sha256:DIGEST (a tag is refused: it could move)"
    },
    "module_dir": {
      "type": "string",
      "minLength": 1,
      "description": "for development: a module directory on the agent's machine, instead of module"
    },
    "vars": {
      "type": "object",
      "description": "the module's input variables (any JSON value each)"
    },
    "parallelism": {"type": "integer", "minimum": 1, "maximum": 256, "description": "terraform -parallelism"},
    "backend": {
      "type": "object",
      "additionalProperties": false,
      "description": "where the state lives; default: local state in the component's state dir on the agent",
      "properties": {
        "s3": {
          "type": "object",
          "additionalProperties": false,
          "required": ["bucket", "key", "region"],
          "properties": {
            "bucket": {"type": "string", "minLength": 1},
            "key": {"type": "string", "minLength": 1},
            "region": {"type": "string", "minLength": 1},
            "endpoint": {"type": "string", "pattern": "^https?://", "description": "an S3-compatible endpoint instead of AWS's"},
            "use_path_style": {"type": "boolean"},
            "use_lockfile": {"type": "boolean", "default": true, "description": "lock the state with a lock file next to it in the bucket"},
            "dynamodb_table": {"type": "string", "minLength": 1, "description": "lock the state in this DynamoDB table instead"},
            "encrypt": {"type": "boolean"},
            "skip_aws_checks": {"type": "boolean", "description": "skip the credential, region and account checks that only AWS itself answers (S3-compatible stores)"}
          }
        }
      }
    }
  }
}`
