package main

import (
	"strconv"
	"sync/atomic"
	"time"
)

// stateCodes in the order entries cycle through them.
var stateCodes = [4]string{"BATTERY_LEVEL", "CPU_TEMPERATURE", "MOUNT_LOCKED", "HELMET_MOUNTED"}

var (
	batteryValues [101]string  // "0" … "100"
	tempValues    [2101]string // "-60.0" … "150.0"
	binaryValues  = [2]string{"0", "1"}
)

func init() {
	for i := range batteryValues {
		batteryValues[i] = strconv.Itoa(i)
	}
	for i := range tempValues {
		tempValues[i] = strconv.FormatFloat(float64(i-600)/10, 'f', 1, 64)
	}
}

// generator hands out batches of valid state entries. Entry n (a global
// sequence number) has occurredAt = base + n milliseconds, so no two entries
// of a run share an instant and none is a duplicate of another; codes cycle
// through the four state codes and values stay inside their ranges.
type generator struct {
	batch int
	base  int64 // Unix milliseconds of entry 0
	seq   atomic.Int64
	// steady keeps values in a band a fleet at rest reports (battery
	// 50-59 %, 30-39.9 °C, locked with its helmet), instead of sweeping
	// each code's whole range.
	steady bool
}

// batchRef names one batch: entries first … first+n-1 for mount index mount.
type batchRef struct {
	mount int
	first int64
	n     int
}

func newGenerator(batch int, base time.Time) *generator {
	return &generator{batch: batch, base: base.UnixMilli()}
}

// next reserves the following batch for mount index mount.
func (g *generator) next(mount int) batchRef {
	first := g.seq.Add(int64(g.batch)) - int64(g.batch)
	return batchRef{mount: mount, first: first, n: g.batch}
}

// entry returns the code, value and occurredAt (Unix ms) of entry n.
func (g *generator) entry(n int64) (code, value string, at int64) {
	k := n / 4
	if g.steady {
		switch n % 4 {
		case 0:
			value = batteryValues[50+k%10]
		case 1:
			value = tempValues[900+k%100]
		default:
			value = binaryValues[1]
		}
		return stateCodes[n%4], value, g.base + n
	}
	switch n % 4 {
	case 0:
		value = batteryValues[k%int64(len(batteryValues))]
	case 1:
		value = tempValues[k%int64(len(tempValues))]
	case 2:
		value = binaryValues[k%2]
	default:
		value = binaryValues[(k/2)%2]
	}
	return stateCodes[n%4], value, g.base + n
}

const rfc3339Millis = "2006-01-02T15:04:05.000Z07:00"

// appendBody appends the JSON body of POST /api/v1/mounts/{uid}/states for
// the batch: {"states":[{"code":…,"value":…,"occurredAt":…},…]}. Every
// string is plain ASCII without characters that JSON escapes.
func (g *generator) appendBody(buf []byte, b batchRef) []byte {
	buf = append(buf, `{"states":[`...)
	for i := range b.n {
		code, value, at := g.entry(b.first + int64(i))
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"code":"`...)
		buf = append(buf, code...)
		buf = append(buf, `","value":"`...)
		buf = append(buf, value...)
		buf = append(buf, `","occurredAt":"`...)
		buf = time.UnixMilli(at).UTC().AppendFormat(buf, rfc3339Millis)
		buf = append(buf, `"}`...)
	}
	return append(buf, `]}`...)
}

// appendRows appends the batch as mount_states rows.
func (g *generator) appendRows(rows []stateRow, b batchRef, uid, accountID string, receivedAt int64) []stateRow {
	for i := range b.n {
		code, value, at := g.entry(b.first + int64(i))
		rows = append(rows, stateRow{MountUID: uid, AccountID: accountID, Code: code, OccurredAt: at, Value: value, ReceivedAt: receivedAt})
	}
	return rows
}
