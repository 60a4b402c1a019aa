package rest

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/mountd/mountd/core"
)

// TestAlarmRuleBodyNamesTheCondition: a condition's decoding error names
// the condition and its field; a well-formed body reaches core as sent.
func TestAlarmRuleBodyNamesTheCondition(t *testing.T) {
	for _, c := range []struct{ body, field string }{
		{`{"conditions":[{"code":"BATTERY_LEVEL","op":"<","value":20}]}`, "conditions[0].value"},
		{`{"conditions":[{"presence":"OFFLINE"},{"code":"BATTERY_LEVEL","op":1,"value":"2"}]}`, "conditions[1].op"},
		{`{"conditions":[{"presence":"OFFLINE","colour":"red"}]}`, "conditions[0].colour"},
		{`{"conditions":["BATTERY_LEVEL<20"]}`, "conditions[0]"},
		{`{"conditions":[[]]}`, "conditions[0]"},
	} {
		var b alarmRuleBody
		if err := decodeJSONBytes([]byte(c.body), &b); err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		_, err := b.input()
		var ce *core.Error
		if !errors.As(err, &ce) || ce.Code != core.CodeValidation || len(ce.Fields) != 1 || ce.Fields[0].Field != c.field {
			t.Errorf("%s: %v, want VALIDATION_FAILED on %s", c.body, err, c.field)
		}
	}
	var b alarmRuleBody
	if err := decodeJSONBytes([]byte(`{"name":"n","conditions":[{"code":"BATTERY_LEVEL","op":"<","value":"20"},{"presence":"OFFLINE"}]}`), &b); err != nil {
		t.Fatal(err)
	}
	in, err := b.input()
	if err != nil || in.Conditions == nil || len(*in.Conditions) != 2 || in.ForSeconds != nil {
		t.Fatalf("input %+v, %v", in, err)
	}
	want := []core.AlarmCondition{{Code: core.StateCode("BATTERY_LEVEL"), Op: "<", Value: "20"}, {Presence: core.PresenceOffline}}
	for i, c := range *in.Conditions {
		if c != want[i] {
			t.Errorf("condition %d = %+v, want %+v", i, c, want[i])
		}
	}
	out, _ := json.Marshal(conditionsJSON(want))
	var back []map[string]string
	_ = json.Unmarshal(out, &back)
	if len(back) != 2 || len(back[0]) != 3 || back[0]["op"] != "<" || back[0]["value"] != "20" || len(back[1]) != 1 || back[1]["presence"] != "OFFLINE" {
		t.Errorf("conditions render as %s", out)
	}
}
