// Package actionschema holds the JSON Schema of the built-in action type's
// config, apart from the plugin: imsd and the byoc CLI check component
// configs against it without linking the plugin runtime.
package actionschema

// Config is the JSON Schema of the action config, as the action plugin
// declares it in Describe.
const Config = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["steps"],
  "additionalProperties": false,
  "properties": {
    "steps": {"$ref": "#/$defs/steps", "minItems": 1},
    "destroy_steps": {"$ref": "#/$defs/steps"},
    "shell": {"type": "string", "default": "/bin/sh"},
    "env": {"$ref": "#/$defs/env"},
    "sandbox": {
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "network": {"type": "boolean", "default": false, "description": "let steps use the host's network"},
        "memory_mb": {"type": "integer", "minimum": 16, "default": 512},
        "cpus": {"type": "number", "exclusiveMinimum": 0, "default": 1},
        "pids": {"type": "integer", "minimum": 8, "default": 512}
      }
    }
  },
  "$defs": {
    "env": {
      "type": "object",
      "description": "environment variables of the steps, added to the job's",
      "additionalProperties": {"type": "string"}
    },
    "steps": {
      "type": "array",
      "items": {
        "type": "object",
        "required": ["script"],
        "additionalProperties": false,
        "properties": {
          "name": {"type": "string"},
          "script": {"type": "string", "minLength": 1},
          "env": {"$ref": "#/$defs/env"},
          "timeout": {"type": "string", "description": "Go duration such as 30s or 10m; the job's time limit otherwise"}
        }
      }
    }
  }
}`
