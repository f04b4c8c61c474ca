// Package hybox is the Go SDK of hybox, a sandbox runtime for AI agents that
// speaks the OpenSandbox protocol.
//
// A [Client] talks to one lifecycle server; [Client.Create] and
// [Client.Connect] return a [Sandbox] handle through which commands, code
// contexts, files, terminals, the egress policy and the credential vault of
// that sandbox are used. The wire types are those of package
// github.com/hybox-dev/hybox/sdks/go/api, generated from the protocol
// document; this package adds transport, streaming, retries and typed
// errors on top of them.
//
// Every call that blocks takes a context first; cancelling it stops the
// call and, for an execution in progress, interrupts it on the server.
// Errors returned for a server's answer are *[APIError] values that match
// the sentinels of this package with [errors.Is] ([ErrNotFound],
// [ErrConflict], [ErrUnauthorized], [ErrRateLimited], [ErrTimeout],
// [ErrInvalid], [ErrUnavailable], [ErrNotSupported]).
//
// A program's exit code is data: [Execution.ExitCode] holds it, and a
// non-zero exit is an error only when the caller asks ([Execution.Err]).
package hybox
