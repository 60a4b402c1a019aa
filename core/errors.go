// Package core is the domain of mountd: its entities, the rules that govern
// them, coded errors and the ports through which adapters plug in.
package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/mountd/mountd/protocol"
)

// Code is a machine-readable error code of the API (docs/api.md). Transports map
// each code to their own form (HTTP status, GraphQL extensions.code). Clients
// read the same codes, so they live in protocol.
type Code = protocol.ErrorCode

// The API's error codes.
const (
	CodeValidation            = protocol.CodeValidation
	CodeUnauthenticated       = protocol.CodeUnauthenticated
	CodeInsufficientScope     = protocol.CodeInsufficientScope
	CodeForbidden             = protocol.CodeForbidden
	CodeNotFound              = protocol.CodeNotFound
	CodeMountNotFound         = protocol.CodeMountNotFound
	CodeNfcTagNotFound        = protocol.CodeNfcTagNotFound
	CodeFirmwareNotFound      = protocol.CodeFirmwareNotFound
	CodeMountAlreadyOwned     = protocol.CodeMountAlreadyOwned
	CodeAssociationNotPending = protocol.CodeAssociationNotPending
	CodeMountNotAssociated    = protocol.CodeMountNotAssociated
	CodeAssociationExpired    = protocol.CodeAssociationExpired
	CodeConflict              = protocol.CodeConflict
	CodePayloadTooLarge       = protocol.CodePayloadTooLarge
	CodeRateLimited           = protocol.CodeRateLimited
	CodeRequestTimeout        = protocol.CodeRequestTimeout
	CodeMethodNotAllowed      = protocol.CodeMethodNotAllowed
	CodeUnsupportedMedia      = protocol.CodeUnsupportedMedia
	CodeInternal              = protocol.CodeInternal
	CodeUnavailable           = protocol.CodeUnavailable
	CodeCursorExpired         = protocol.CodeCursorExpired
	CodeWebhookNotFound       = protocol.CodeWebhookNotFound
	CodeCommandNotFound       = protocol.CodeCommandNotFound
	CodeSignatureRequired     = protocol.CodeSignatureRequired
	CodeInvalidSignature      = protocol.CodeInvalidSignature
	CodeAlarmRuleNotFound     = protocol.CodeAlarmRuleNotFound
	CodeAlarmNotFound         = protocol.CodeAlarmNotFound
	CodeJobNotFound           = protocol.CodeJobNotFound
	CodeRolloutNotFound       = protocol.CodeRolloutNotFound
)

// FieldError names one invalid input field and says what is wrong with it.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error is the one coded error type of mountd. Its Message is safe to show to
// clients; anything that is not an *Error is an internal fault.
type Error struct {
	Code    Code
	Message string
	Fields  []FieldError
	// RetryAfter, when set, is how long the client should wait (429, 503).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if len(e.Fields) == 0 {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("%s: %s (%d invalid fields)", e.Code, e.Message, len(e.Fields))
}

// Errorf builds a coded error with a client-safe message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err, or CodeInternal when err carries none.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorMessage returns the client-safe message of err; uncoded errors say
// only "internal error" so that internals never reach a client.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// Validation collects field errors so that one response names every bad field.
type Validation struct {
	Fields []FieldError
}

// Add records a problem with field.
func (v *Validation) Add(field, format string, args ...any) {
	v.Fields = append(v.Fields, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// Err returns a VALIDATION_FAILED error naming every recorded field, or nil.
func (v *Validation) Err() error {
	if len(v.Fields) == 0 {
		return nil
	}
	return &Error{Code: CodeValidation, Message: "the request is invalid", Fields: v.Fields}
}
