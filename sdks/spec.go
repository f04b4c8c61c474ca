// Package sdks holds hybox's protocol document, the one place the wire is
// written (openapi.yaml, OpenAPI 3.1), and the SDKs generated from it:
// sdks/go (its own Go module), sdks/python and sdks/js.
package sdks

import (
	_ "embed"
)

// OpenAPI is the protocol document as YAML. Callers must not modify it.
//
//go:embed openapi.yaml
var OpenAPI []byte
