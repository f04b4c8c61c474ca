// Package api holds the wire types of hybox's protocol: the lifecycle API,
// the execd API of each sandbox and its egress API (policy and credential
// vault). Every type in api.gen.go is generated from the protocol document
// (sdks/openapi.yaml) by oapi-codegen; none is written by hand. The server,
// the in-sandbox daemon and the Go SDK all use these types, so the wire is
// written once.
//
// The package imports only the standard library.
package api

//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config oapi-codegen.yaml ../../openapi.yaml
