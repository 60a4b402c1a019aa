package bunstore

import (
	"database/sql"
	"reflect"
	"testing"
)

// TestArrayLiterals: the report's arrays are PostgreSQL array literals
// whatever the values hold (they are validated before, but the literal
// must not depend on it).
func TestArrayLiterals(t *testing.T) {
	text := func(vs ...string) string {
		var b []byte
		for i, v := range vs {
			b = appendArrayText(b, i, len(vs), v)
		}
		return string(b)
	}
	for _, tt := range []struct{ got, want string }{
		{text("BATTERY_LEVEL"), `{"BATTERY_LEVEL"}`},
		{text("1", "-0.5", ""), `{"1","-0.5",""}`},
		{text(`a"b`, `c\d`, "NULL", "{x,y}"), `{"a\"b","c\\d","NULL","{x,y}"}`},
	} {
		if tt.got != tt.want {
			t.Errorf("got %s, want %s", tt.got, tt.want)
		}
	}
	var b []byte
	for i, v := range []int64{1732608000000, -5, 0} {
		b = appendArrayInt(b, i, 3, v)
	}
	if string(b) != "{1732608000000,-5,0}" {
		t.Errorf("integers: %s", b)
	}
}

// TestDecodeOpenAlarms: the open episodes as the report's statement
// answers them (json_build_array in alarmColumns' order), nulls included.
func TestDecodeOpenAlarms(t *testing.T) {
	for _, tt := range []struct {
		name, text string
		want       []alarmRow
		wantErr    bool
	}{
		{name: "none", text: `[]`, want: []alarmRow{}},
		{name: "pending", text: `[["alm_1","acc_1","rul_1","low",2,"m1","WARNING","PENDING",10,20,null,null,null,null,null,null]]`,
			want: []alarmRow{{ID: "alm_1", AccountID: "acc_1", RuleID: "rul_1", RuleName: "low", RuleRevision: 2, MountUID: "m1",
				Severity: "WARNING", State: "PENDING", Since: 10, DueAt: 20}}},
		{name: "active, acknowledged", text: `[["alm_2","acc_1","rul_1","low",1,"m1","CRITICAL","ACTIVE",10,10,11,null,12,"usr_1","{\"BATTERY_LEVEL\":\"5\"}","Ann"]]`,
			want: []alarmRow{{ID: "alm_2", AccountID: "acc_1", RuleID: "rul_1", RuleName: "low", RuleRevision: 1, MountUID: "m1",
				Severity: "CRITICAL", State: "ACTIVE", Since: 10, DueAt: 10, RaisedAt: sql.NullInt64{Int64: 11, Valid: true},
				AcknowledgedAt: sql.NullInt64{Int64: 12, Valid: true}, AcknowledgedBy: sql.NullString{String: "usr_1", Valid: true},
				Values: sql.NullString{String: `{"BATTERY_LEVEL":"5"}`, Valid: true}, AcknowledgedByName: sql.NullString{String: "Ann", Valid: true}}}},
		{name: "a column short", text: `[["alm_1","acc_1","rul_1","low",2,"m1","WARNING","PENDING",10,20,null,null,null,null,null]]`, wantErr: true},
		{name: "a column more", text: `[["alm_1","acc_1","rul_1","low",2,"m1","WARNING","PENDING",10,20,null,null,null,null,null,null,1]]`, wantErr: true},
		{name: "wrong type", text: `[["alm_1","acc_1","rul_1","low","2","m1","WARNING","PENDING",10,20,null,null,null,null,null,null]]`, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeOpenAlarms(tt.text)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
