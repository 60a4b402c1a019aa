package main

import (
	"testing"

	"github.com/mountd/mountd/client"
)

func TestParseCondition(t *testing.T) {
	for in, want := range map[string]client.AlarmCondition{
		"BATTERY_LEVEL<20":      {Code: "BATTERY_LEVEL", Op: "<", Value: "20"},
		"battery_level <= 20":   {Code: "BATTERY_LEVEL", Op: "<=", Value: "20"},
		"CPU_TEMPERATURE>=70.5": {Code: "CPU_TEMPERATURE", Op: ">=", Value: "70.5"},
		"MOUNT_LOCKED==0":       {Code: "MOUNT_LOCKED", Op: "==", Value: "0"},
		"HELMET_MOUNTED=1":      {Code: "HELMET_MOUNTED", Op: "==", Value: "1"},
		"HELMET_MOUNTED!=1":     {Code: "HELMET_MOUNTED", Op: "!=", Value: "1"},
		"CPU_TEMPERATURE>-5":    {Code: "CPU_TEMPERATURE", Op: ">", Value: "-5"},
		"presence=OFFLINE":      {Presence: "OFFLINE"},
		"Presence == offline":   {Presence: "OFFLINE"},
	} {
		got, err := parseCondition(in)
		if err != nil || got != want {
			t.Errorf("parseCondition(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "BATTERY_LEVEL", "<20", "20"} {
		if _, err := parseCondition(bad); err == nil {
			t.Errorf("parseCondition(%q) accepted", bad)
		}
	}
}
