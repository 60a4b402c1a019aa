package rest

import (
	"encoding/json"
	"time"
)

// TimeLayout is the contract's output format: UTC with milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// Time marshals as the contract's date-time text.
type Time time.Time

// MarshalJSON implements json.Marshaler.
func (t Time) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Time(t).UTC().Format(TimeLayout))
}

// FormatTime renders t in the contract's text form.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }
