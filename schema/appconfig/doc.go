// Package appconfig is the app config format: the TOML files of an app
// (app, inputs, components, actions, policies, installs) read with the line
// of every key, decoded into Go types whose struct tags also generate the
// committed JSON Schemas, validated with every problem collected and named
// by file, line and key, and the pieces built on them: {{ }} references and
// their rendering, the component graph, cron schedules and revision diffs.
//
// It imports nothing from imsd, agentd or the CLI, so that the CLI and imsd
// run the same checks; the agent does not import it (the secret references
// it fills in are rpc/agentproto's).
package appconfig
