package execd

import "github.com/hybox-dev/hybox/sdks/go/api"

// Event is one object of a command or code stream (text/event-stream, one
// JSON object followed by a blank line).
type Event = api.Event

// Event types.
const (
	EventInit              = api.EventTypeInit
	EventStdout            = api.EventTypeStdout
	EventStderr            = api.EventTypeStderr
	EventResult            = api.EventTypeResult
	EventExecutionCount    = api.EventTypeExecutionCount
	EventStatus            = api.EventTypeStatus
	EventPing              = api.EventTypePing
	EventExecutionComplete = api.EventTypeExecutionComplete
	EventError             = api.EventTypeError
)

// FileInfo describes one file in the files API. Mode is the octal digits
// written as a decimal integer (755 means 0o755).
type FileInfo = api.FileInfo

// Wire error codes execd answers with (the ErrorCode schema).
const (
	CodeInvalidRequestBody  = api.ErrorCodeINVALIDREQUESTBODY
	CodeMissingQuery        = api.ErrorCodeMISSINGQUERY
	CodeRuntimeError        = api.ErrorCodeRUNTIMEERROR
	CodeFileNotFound        = api.ErrorCodeFILENOTFOUND
	CodeContextNotFound     = api.ErrorCodeCONTEXTNOTFOUND
	CodeNotSupported        = api.ErrorCodeNOTSUPPORTED
	CodeInvalidPath         = api.ErrorCodeINVALIDPATH
	CodePayloadTooLarge     = api.ErrorCodePAYLOADTOOLARGE
	CodeBusy                = api.ErrorCodeCONTEXTBUSY
	CodeOverloaded          = api.ErrorCodeTOOMANYEXECUTIONS
	CodeUnknownLanguage     = api.ErrorCodeUNKNOWNLANGUAGE
	CodeNotFound            = api.ErrorCodeNOTFOUND
	CodeUnauthorized        = api.ErrorCodeUNAUTHORIZED
	CodeFileExists          = api.ErrorCodeFILEEXISTS
	CodeInternal            = api.ErrorCodeINTERNALERROR
	CodeTimeout             = api.ErrorCodeTIMEOUT
	CodeInvalidFileMetadata = api.ErrorCodeINVALIDFILEMETADATA
	CodeInvalidRange        = api.ErrorCodeINVALIDRANGE
	CodeSandboxPaused       = api.ErrorCodeSANDBOXPAUSED
	CodeMethodNotAllowed    = api.ErrorCodeMETHODNOTALLOWED
)
