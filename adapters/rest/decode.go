package rest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/mountd/mountd/core"
)

// MaxBodyBytes is the API's limit on request bodies.
const MaxBodyBytes = 1 << 20

// decodeJSON reads one JSON value into dst, strictly: unknown fields, wrong
// types, trailing data and malformed JSON are validation errors naming the
// field where possible; an oversized body is PAYLOAD_TOO_LARGE.
func decodeJSON(r *http.Request, dst any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return core.Errorf(core.CodePayloadTooLarge, "the request body is larger than %d bytes", tooLarge.Limit)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return core.Errorf(core.CodeRequestTimeout, "the request body did not arrive in time")
		}
		return core.Errorf(core.CodeValidation, "the request body could not be read")
	}
	return decodeJSONBytes(body, dst)
}

func decodeJSONBytes(body []byte, dst any) error {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return core.Errorf(core.CodeValidation, "the request body must hold exactly one JSON value")
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		return core.Errorf(core.CodeValidation, "the request body must hold exactly one JSON value")
	}
	return nil
}

func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF):
		return core.Errorf(core.CodeValidation, "the request body is empty")
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return core.Errorf(core.CodeValidation, "the request body is not valid JSON")
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return core.Errorf(core.CodeValidation, "the request body must be a JSON %s", expectedKind(typeErr))
		}
		return &core.Error{Code: core.CodeValidation, Message: "the request is invalid",
			Fields: []core.FieldError{{Field: field, Message: fmt.Sprintf("must be %s", expectedKind(typeErr))}}}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &core.Error{Code: core.CodeValidation, Message: "the request is invalid",
			Fields: []core.FieldError{{Field: name, Message: "is not a known field"}}}
	}
	return core.Errorf(core.CodeValidation, "the request body is not valid JSON")
}

func expectedKind(e *json.UnmarshalTypeError) string {
	switch e.Type.Kind().String() {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int64", "int32", "float64":
		return "a number"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return "of type " + e.Type.String()
}
