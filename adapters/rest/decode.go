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

// decodeStateEntry decodes one entry of a report, as decodeJSONBytes would.
// Nearly every entry is a flat object of the three known keys with plain
// ASCII strings; those are read here without a decoder (a report of 50
// entries spent more in creating decoders than in anything else it does
// in mountd). Anything else (other keys or types, escapes, non-ASCII,
// a key twice) goes to decodeJSONBytes, which gives the same result and
// the same errors as before.
func decodeStateEntry(raw []byte, e *stateEntryJSON) error {
	if flatStateEntry(raw, e) {
		return nil
	}
	*e = stateEntryJSON{}
	return decodeJSONBytes(raw, e)
}

// flatStateEntry fills e from raw when raw is {"key":"string",...} with
// only code, value and occurredAt, each at most once, and strings of
// printable ASCII without escapes; it reports whether it did.
func flatStateEntry(raw []byte, e *stateEntryJSON) bool {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return skipSpace(raw, i+1) == len(raw)
	}
	for {
		key, j, ok := plainString(raw, i)
		if !ok {
			return false
		}
		i = skipSpace(raw, j)
		if i >= len(raw) || raw[i] != ':' {
			return false
		}
		val, j, ok := plainString(raw, skipSpace(raw, i+1))
		if !ok {
			return false
		}
		var dst **string
		switch string(key) {
		case "code":
			dst = &e.Code
		case "value":
			dst = &e.Value
		case "occurredAt":
			dst = &e.OccurredAt
		default:
			return false
		}
		if *dst != nil {
			return false
		}
		s := string(val)
		*dst = &s
		i = skipSpace(raw, j)
		if i >= len(raw) {
			return false
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case '}':
			return skipSpace(raw, i+1) == len(raw)
		default:
			return false
		}
	}
}

// plainString reads a JSON string of printable ASCII without escapes at
// raw[i]; it returns its contents and the index after it.
func plainString(raw []byte, i int) ([]byte, int, bool) {
	if i >= len(raw) || raw[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(raw); j++ {
		switch c := raw[j]; {
		case c == '"':
			return raw[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}
