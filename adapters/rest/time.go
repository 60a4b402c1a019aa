package rest

import (
	"encoding/json"
	"time"

	"github.com/mountd/mountd/core"
)

// Time marshals as the API's date-time text.
type Time time.Time

// MarshalJSON implements json.Marshaler.
func (t Time) MarshalJSON() ([]byte, error) {
	return json.Marshal(core.FormatTime(time.Time(t)))
}
