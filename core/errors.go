// Package core is the domain of mountd: its entities, the rules that govern
// them, coded errors and the ports through which adapters plug in.
package core

import (
	"errors"
	"fmt"
	"time"
)

// Code is a machine-readable error code of the API (docs/api.md). Transports map
// each code to their own form (HTTP status, GraphQL extensions.code).
type Code string

// The API's error codes.
const (
	CodeValidation            Code = "VALIDATION_FAILED"
	CodeUnauthenticated       Code = "UNAUTHENTICATED"
	CodeInsufficientScope     Code = "INSUFFICIENT_SCOPE"
	CodeForbidden             Code = "FORBIDDEN"
	CodeNotFound              Code = "NOT_FOUND"
	CodeMountNotFound         Code = "MOUNT_NOT_FOUND"
	CodeNfcTagNotFound        Code = "NFC_TAG_NOT_FOUND"
	CodeFirmwareNotFound      Code = "FIRMWARE_NOT_FOUND"
	CodeMountAlreadyOwned     Code = "MOUNT_ALREADY_OWNED"
	CodeAssociationNotPending Code = "ASSOCIATION_NOT_PENDING"
	CodeMountNotAssociated    Code = "MOUNT_NOT_ASSOCIATED"
	CodeAssociationExpired    Code = "ASSOCIATION_EXPIRED"
	CodeConflict              Code = "CONFLICT"
	CodePayloadTooLarge       Code = "PAYLOAD_TOO_LARGE"
	CodeRateLimited           Code = "RATE_LIMITED"
	CodeRequestTimeout        Code = "REQUEST_TIMEOUT"
	CodeMethodNotAllowed      Code = "METHOD_NOT_ALLOWED"
	CodeUnsupportedMedia      Code = "UNSUPPORTED_MEDIA_TYPE"
	CodeInternal              Code = "INTERNAL"
	CodeUnavailable           Code = "UNAVAILABLE"
	CodeCursorExpired         Code = "CURSOR_EXPIRED"
	CodeWebhookNotFound       Code = "WEBHOOK_NOT_FOUND"
	CodeCommandNotFound       Code = "COMMAND_NOT_FOUND"
	CodeSignatureRequired     Code = "SIGNATURE_REQUIRED"
	CodeInvalidSignature      Code = "INVALID_SIGNATURE"
	CodeAlarmRuleNotFound     Code = "ALARM_RULE_NOT_FOUND"
	CodeAlarmNotFound         Code = "ALARM_NOT_FOUND"
	CodeJobNotFound           Code = "JOB_NOT_FOUND"
	CodeRolloutNotFound       Code = "ROLLOUT_NOT_FOUND"
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
