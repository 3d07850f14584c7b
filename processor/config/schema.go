package config

import _ "embed" // for the schema

// schemaJSON is a string, not a []byte, so no caller can change it.
//
//go:embed schema.json
var schemaJSON string

// Schema returns the JSON Schema (draft 2020-12) of the configuration file,
// published for editors. The loader checks more than the schema can
// (references between bindings, guards and path parameters); a test keeps
// the two in agreement on every structural rule.
func Schema() []byte { return []byte(schemaJSON) }
