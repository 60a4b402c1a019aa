package main

import (
	"fmt"
	"strconv"
	"time"
)

// seedModel names the value model below in the cache key: a dump seeded
// with another model would make the expected totals wrong.
const seedModel = "v1"

// mountValues is what mount i of the fleet reports, the same every time it
// reports (seed and ingest), so that no report changes which filters select
// it. Shares (of a large fleet): models HM-1…HM-5 at 30, 25, 20, 15 and
// 10 %; battery below 20 for 10 %; temperature above 60 for 15 %; unlocked
// 30 %; no helmet 60 %. Each field draws on its own bits of a hash of i,
// so the fields are independent of each other and of the uid's order.
type mountValues struct {
	Model          string
	Battery        float64 // 1.0–99.9, one decimal
	CPUTemperature float64 // 25.0–79.9, one decimal
	Locked         bool
	HelmetMounted  bool
}

func valuesOf(i int) mountValues {
	h := splitmix64(uint64(i))
	var v mountValues
	switch m := h % 100; {
	case m < 30:
		v.Model = "HM-1"
	case m < 55:
		v.Model = "HM-2"
	case m < 75:
		v.Model = "HM-3"
	case m < 90:
		v.Model = "HM-4"
	default:
		v.Model = "HM-5"
	}
	if b := (h >> 8) % 1000; b < 100 {
		v.Battery = 1 + float64(b%190)/10 // 1.0–19.9
	} else {
		v.Battery = 20 + float64(b%800)/10 // 20.0–99.9
	}
	if t := (h >> 20) % 1000; t < 150 {
		v.CPUTemperature = 60.5 + float64(t%195)/10 // 60.5–79.9
	} else {
		v.CPUTemperature = 25 + float64(t%350)/10 // 25.0–59.9
	}
	v.Locked = (h>>32)%100 < 70
	v.HelmetMounted = (h>>40)%100 < 40
	return v
}

// splitmix64 is a well-mixed hash of x (Steele, Lea and Flood's SplitMix64
// finaliser).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// uidOf names mount i of the fleet.
func uidOf(i int) string { return fmt.Sprintf("fb-%06d", i) }

// report is the body of one state report of mount i: one entry per code.
func (v mountValues) report(at time.Time) []byte {
	ts := at.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	return []byte(`{"states":[{"code":"BATTERY_LEVEL","value":"` + strconv.FormatFloat(v.Battery, 'f', 1, 64) +
		`","occurredAt":"` + ts + `"},{"code":"CPU_TEMPERATURE","value":"` + strconv.FormatFloat(v.CPUTemperature, 'f', 1, 64) +
		`","occurredAt":"` + ts + `"},{"code":"MOUNT_LOCKED","value":"` + bit(v.Locked) +
		`","occurredAt":"` + ts + `"},{"code":"HELMET_MOUNTED","value":"` + bit(v.HelmetMounted) +
		`","occurredAt":"` + ts + `"}]}`)
}

func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// probe is one read the tool sends; expected is the totalItems it must
// answer with (-1: unknown, checked for stability only).
type probe struct {
	Name     string
	Filter   string
	expected int
	// atMost bounds totalItems when expected is unknown (-1: unbounded).
	atMost int
	// presence marks a filter whose total moves when mounts report (ingest).
	presence bool
}

// fleetProbes are the fleet reads of issue 40's target 1, rotating, with
// the totals the seeded fleet of n mounts must give.
func fleetProbes(n int) []probe {
	var low, hotHM1, loose int
	for i := range n {
		v := valuesOf(i)
		if v.Battery < 20 {
			low++
		}
		if v.Model == "HM-1" && v.CPUTemperature > 60 {
			hotHM1++
		}
		if !v.Locked && !v.HelmetMounted {
			loose++
		}
	}
	return []probe{
		{Name: "battery", Filter: `batteryLevel < 20`, expected: low, atMost: -1},
		{Name: "battery-offline", Filter: `batteryLevel < 20 AND presence = "OFFLINE"`, expected: -1, atMost: low, presence: true},
		{Name: "model-hot", Filter: `modelNumber = "HM-1" AND cpuTemperature > 60`, expected: hotHM1, atMost: -1},
		{Name: "unlocked-empty", Filter: `mountLocked = false AND helmetMounted = false`, expected: loose, atMost: -1},
		{Name: "unfiltered", Filter: "", expected: n, atMost: -1},
	}
}

// check says what is wrong with a total the probe got, given the first
// total it got in the same phase (-1: none yet); "" when nothing is.
func (p probe) check(total, first int, ingest bool) string {
	switch {
	case p.expected >= 0 && total != p.expected:
		return fmt.Sprintf("%s: totalItems %d, the seeded fleet has %d", p.Name, total, p.expected)
	case p.atMost >= 0 && (total < 0 || total > p.atMost):
		return fmt.Sprintf("%s: totalItems %d, outside 0…%d", p.Name, total, p.atMost)
	case first >= 0 && total != first && !(ingest && p.presence):
		return fmt.Sprintf("%s: totalItems %d, %d before in the same phase", p.Name, total, first)
	}
	return ""
}
