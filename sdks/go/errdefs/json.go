package errdefs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// DescribeJSON says in wire terms what is wrong with a JSON document that
// failed to decode with err: the field and the JSON type wanted ("egress:
// want an array, got an object"), the offset of a syntax error, or that
// the body ended early. Go type names never appear.
func DescribeJSON(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "the body"
		}
		return fmt.Sprintf("%s: want %s, got %s", field, jsonKind(te.Type.Kind().String(), te.Type.String()), article(te.Value))
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %s", se.Offset, se.Error())
	case errors.Is(err, io.EOF):
		return "the body is empty; a JSON document is required"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON document ends early"
	}
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return "unknown field " + rest
	}
	return strings.TrimPrefix(msg, "json: ")
}

// jsonKind names the JSON type a Go kind decodes from.
func jsonKind(kind, typ string) string {
	switch kind {
	case "slice", "array":
		if typ == "[]uint8" {
			return "a string"
		}
		return "an array"
	case "map", "struct":
		return "an object"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	}
	return "another type"
}

// article turns the JSON value kind json reports ("object", "number 1.5")
// into a phrase.
func article(v string) string {
	switch {
	case v == "":
		return "something else"
	case strings.HasPrefix(v, "a") || strings.HasPrefix(v, "o"):
		return "an " + v
	}
	return "a " + v
}
