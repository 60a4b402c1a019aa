// Package model holds the GraphQL models; graph/convert.go maps core types
// to them.
package model

import (
	"io"
	"strconv"
	"time"

	"github.com/mountd/mountd/core"
)

// DateTime is an instant in the REST text format.
type DateTime time.Time

// MarshalGQL writes UTC with milliseconds.
func (t DateTime) MarshalGQL(w io.Writer) {
	_, _ = io.WriteString(w, strconv.Quote(core.FormatTime(time.Time(t))))
}

// UnmarshalGQL accepts any RFC 3339 offset.
func (t *DateTime) UnmarshalGQL(v any) error {
	s, ok := v.(string)
	if !ok {
		return core.Errorf(core.CodeValidation, "a DateTime must be an RFC 3339 string")
	}
	parsed, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return core.Errorf(core.CodeValidation, "%q is not an RFC 3339 date-time", s)
	}
	*t = DateTime(parsed)
	return nil
}
