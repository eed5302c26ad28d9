// Package imageschema holds the JSON Schema of the built-in image type's
// config, apart from the plugin: imsd and the byoc CLI check component
// configs against it without linking oras-go or the plugin runtime.
package imageschema

// Config is the JSON Schema of the image config, as the image plugin
// declares it in Describe. What a "source" string may say is checked by
// the plugin's Validate on the agent (a digest, never a tag only).
const Config = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["source"],
  "additionalProperties": false,
  "properties": {
    "source": {
      "type": "string",
      "minLength": 1,
      "description": "the artifact to deploy, by digest: REPOSITORY@sha256:HEX in the vendor registry (a build), or HOST[:PORT]/REPOSITORY@sha256:HEX, http(s)://HOST/REPOSITORY@sha256:HEX, oci:DIR@sha256:HEX; a tag may stand before the digest but is never resolved"
    },
    "repository": {
      "type": "string",
      "minLength": 1,
      "description": "the repository in the install registry; default: the source's"
    },
    "referrers": {
      "type": "boolean",
      "default": true,
      "description": "copy the OCI 1.1 referrers (signatures, SBOMs) of the artifact too"
    }
  }
}`
