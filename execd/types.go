package execd

// Event is one object of a command or code stream (text/event-stream, one
// JSON object followed by a blank line).
type Event struct {
	Type           string            `json:"type"`
	Text           string            `json:"text,omitempty"`
	ExecutionCount int               `json:"execution_count,omitempty"`
	ExecutionTime  int64             `json:"execution_time,omitempty"`
	Timestamp      int64             `json:"timestamp"`
	Results        map[string]string `json:"results,omitempty"`
	Error          *ExecError        `json:"error,omitempty"`
}

// Event types.
const (
	EventInit              = "init"
	EventStdout            = "stdout"
	EventStderr            = "stderr"
	EventResult            = "result"
	EventExecutionCount    = "execution_count"
	EventStatus            = "status"
	EventPing              = "ping"
	EventExecutionComplete = "execution_complete"
	EventError             = "error"
)

// FileInfo describes one file in the files API. Mode is the octal digits
// written as a decimal integer (755 means 0o755).
type FileInfo struct {
	Path       string `json:"path"`
	Type       string `json:"type"` // file, directory, symlink, other
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modified_at"`
	CreatedAt  string `json:"created_at"`
	Owner      string `json:"owner"`
	Group      string `json:"group"`
	Mode       int    `json:"mode"`
}

// Wire error codes.
const (
	CodeInvalidRequestBody = "INVALID_REQUEST_BODY"
	CodeMissingQuery       = "MISSING_QUERY"
	CodeRuntimeError       = "RUNTIME_ERROR"
	CodeFileNotFound       = "FILE_NOT_FOUND"
	CodeContextNotFound    = "CONTEXT_NOT_FOUND"
	CodeNotSupported       = "NOT_SUPPORTED"
	CodeInvalidPath        = "INVALID_PATH"
	CodePayloadTooLarge    = "PAYLOAD_TOO_LARGE"
	CodeBusy               = "CONTEXT_BUSY"
	CodeOverloaded         = "TOO_MANY_EXECUTIONS"
	CodeUnknownLanguage    = "UNKNOWN_LANGUAGE"
	CodeNotFound           = "NOT_FOUND"
	CodeMethodNotAllowed   = "METHOD_NOT_ALLOWED"
	CodeUnauthorized       = "UNAUTHORIZED"
	CodeFileExists         = "FILE_EXISTS"
	CodeInternal           = "INTERNAL_ERROR"
)

// ErrorBody is every error response: {"code","message"}.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
