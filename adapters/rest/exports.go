package rest

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mountd/mountd/core"
)

// Exports is what the REST transport asks of the export rules.
type Exports interface {
	ExportMounts(ctx context.Context, p core.Principal, filter string, yield func(core.Mount) error) error
	ExportStates(ctx context.Context, p core.Principal, uid string, f core.StateFilter, yield func(core.StateEntry) error) error
}

// ExportWriteTimeout is how long an export waits for its client to take a
// chunk (MOUNTD_EXPORT_WRITE_TIMEOUT; zero: DefaultExportWriteTimeout):
// a client that reads nothing is cut then, and its database connection
// and export slot freed, rather than held for core.MaxExportDuration.
type ExportWriteTimeout time.Duration

// DefaultExportWriteTimeout is ExportWriteTimeout's default.
const DefaultExportWriteTimeout = 30 * time.Second

// The formats of the exports (docs/api.md, "Exports").
const (
	formatCSV    = "csv"
	formatNDJSON = "ndjson"
)

// mountCSVHeader is the REST Mount's field names in MountJSON's order.
var mountCSVHeader = csvHeader(MountJSON{})

// stateCSVHeader is the states' CSV header line (docs/api.md, "Exports"):
// a state entry with its mount's uid.
const stateCSVHeader = "uid,code,value,occurredAt,receivedAt,verified"

// csvHeader lists v's JSON field names in declaration order, so the CSV
// header cannot drift from the JSON object.
func csvHeader(v any) string {
	b, _ := json.Marshal(v)
	var names []string
	dec := json.NewDecoder(strings.NewReader(string(b)))
	_, _ = dec.Token() // {
	for dec.More() {
		k, _ := dec.Token()
		names = append(names, k.(string))
		var skip json.RawMessage
		_ = dec.Decode(&skip)
	}
	return strings.Join(names, ",")
}

// exportFormat reads format=, csv by default.
func (q *query) exportFormat() string {
	f := q.str("format")
	if f == nil || *f == formatCSV {
		return formatCSV
	}
	if *f == formatNDJSON {
		return formatNDJSON
	}
	q.v.Add("format", "must be csv or ndjson")
	return ""
}

func (s *Server) exportMounts(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "format", "filter")
	format := q.exportFormat()
	filter := q.str("filter")
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := newExportWriter(w, r, s, format, "mounts", mountCSVHeader)
	out.finish(s.Exports.ExportMounts(r.Context(), p, deref(filter), func(m core.Mount) error {
		if format == formatNDJSON {
			return out.json(mountJSON(m))
		}
		return out.row(func(b []byte) []byte { return appendMountCSV(b, m) })
	}))
}

func (s *Server) exportStates(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "mountUid", "format", "from", "to")
	format := q.exportFormat()
	uid := deref(q.str("mountUid"))
	var f core.StateFilter
	f.From, f.To = q.time("from"), q.time("to")
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := newExportWriter(w, r, s, format, "states-"+uid, stateCSVHeader)
	out.finish(s.Exports.ExportStates(r.Context(), p, uid, f, func(e core.StateEntry) error {
		return out.row(func(b []byte) []byte {
			if format == formatNDJSON {
				return appendStateJSON(b, uid, e)
			}
			return appendStateCSV(b, uid, e)
		})
	}))
}

// exportWriter streams an export. The status line and headers wait for
// the first row (or the end of an empty export), so that a refusal found
// before it (a mount of another account, too many exports) is still a
// problem+json answer. Rows gather in a buffer that goes out, and is
// flushed to the client, every exportChunk bytes or exportFlushEvery.
type exportWriter struct {
	w       http.ResponseWriter
	r       *http.Request
	s       *Server
	rc      *http.ResponseController
	format  string
	name    string
	header  string
	started bool
	failed  bool
	buf     []byte
	flushed time.Time
}

const (
	exportChunk      = 64 << 10
	exportFlushEvery = time.Second
)

func newExportWriter(w http.ResponseWriter, r *http.Request, s *Server, format, name, header string) *exportWriter {
	return &exportWriter{w: w, r: r, s: s, rc: http.NewResponseController(w), format: format, name: name,
		header: header, buf: make([]byte, 0, exportChunk+4096)}
}

func (e *exportWriter) start() {
	e.started = true
	h := e.w.Header()
	ext, ctype := ".csv", "text/csv; charset=utf-8"
	if e.format == formatNDJSON {
		ext, ctype = ".ndjson", "application/x-ndjson"
	}
	h.Set("Content-Type", ctype)
	h.Set("Content-Disposition", `attachment; filename="`+safeFilename(e.name)+ext+`"`)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	// nginx would otherwise spool a big export to its disk: streamed, the
	// client's pace reaches the database cursor.
	h.Set("X-Accel-Buffering", "no")
	e.w.WriteHeader(http.StatusOK)
	e.flushed = time.Now()
	if e.format == formatCSV {
		e.buf = append(append(e.buf, e.header...), '\r', '\n')
	}
}

// row appends one line made by add; an error means the client is gone
// and stops the export (and its query).
func (e *exportWriter) row(add func([]byte) []byte) error {
	if !e.started {
		e.start()
	}
	e.buf = add(e.buf)
	if len(e.buf) >= exportChunk || time.Since(e.flushed) >= exportFlushEvery {
		return e.flush()
	}
	return nil
}

func (e *exportWriter) json(v any) error {
	return e.row(func(b []byte) []byte {
		j, _ := json.Marshal(v) // a REST object always marshals
		return append(append(b, j...), '\n')
	})
}

func (e *exportWriter) flush() error {
	timeout := time.Duration(e.s.ExportWriteTimeout)
	if timeout <= 0 {
		timeout = DefaultExportWriteTimeout
	}
	// Each chunk gets the timeout anew: a slow reader goes on, one that
	// reads nothing is cut.
	_ = e.rc.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := e.w.Write(e.buf); err != nil {
		e.failed = true
		return err
	}
	e.buf = e.buf[:0]
	e.flushed = time.Now()
	if err := e.rc.Flush(); err != nil {
		e.failed = true
		return err
	}
	return nil
}

// finish ends the export with the result of the core call. Before the
// first byte an error is a problem+json answer as anywhere else. After
// it the status is sent, so a failure aborts the connection instead: the
// client sees the body end without its terminating chunk (an unexpected
// EOF), never a short file that looks complete (docs/api.md, "Exports").
func (e *exportWriter) finish(err error) {
	if err == nil {
		if !e.started {
			e.start()
		}
		err = e.flush()
		if err == nil {
			// The connection may serve another request.
			_ = e.rc.SetWriteDeadline(time.Time{})
			return
		}
	}
	if !e.started {
		writeError(e.w, e.r, e.s.Logger, err)
		return
	}
	if e.failed || ClientGone(e.r, err) {
		e.s.Logger.DebugContext(e.r.Context(), "export ended by its client", "path", e.r.URL.Path, "err", err)
	} else {
		e.s.Logger.ErrorContext(e.r.Context(), "export failed after its first bytes; aborting the connection", "path", e.r.URL.Path, "err", err)
	}
	panic(http.ErrAbortHandler)
}

var unsafeFilename = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// safeFilename keeps a mount uid's characters that every file system and
// the header's quoting accept (a uid may hold ':').
func safeFilename(s string) string { return unsafeFilename.ReplaceAllString(s, "_") }

// appendMountCSV writes m in mountCSVHeader's columns: null as an empty
// cell, booleans as true/false, times as the API writes them.
func appendMountCSV(b []byte, m core.Mount) []byte {
	j := mountJSON(m)
	for i, text := range []string{j.UID, j.Name, j.SerialNumber, j.MACAddress, j.FirmwareRevision,
		j.SoftwareRevision, j.ModelNumber, j.AssociationState} {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendCSVCell(b, text)
	}
	b = append(b, ',')
	if j.MountLocked != nil {
		b = strconv.AppendBool(b, *j.MountLocked)
	}
	b = append(b, ',')
	if j.HelmetMounted != nil {
		b = strconv.AppendBool(b, *j.HelmetMounted)
	}
	b = append(b, ',')
	if j.BatteryLevel != nil {
		b = strconv.AppendInt(b, int64(*j.BatteryLevel), 10)
	}
	b = append(b, ',')
	if j.CPUTemperature != nil {
		b = strconv.AppendFloat(b, *j.CPUTemperature, 'f', -1, 64)
	}
	b = append(b, ',')
	if j.AssociatedAt != nil {
		b = appendTime(b, time.Time(*j.AssociatedAt))
	}
	b = append(b, ',')
	if j.DevicePublicKey != nil {
		b = appendCSVCell(b, *j.DevicePublicKey)
	}
	b = append(b, ',')
	if j.LastSeenAt != nil {
		b = appendTime(b, time.Time(*j.LastSeenAt))
	}
	b = append(b, ',')
	b = appendCSVCell(b, j.Presence)
	b = append(b, ',')
	if j.Offline != nil {
		// An object in one cell: its JSON, as NDJSON has it.
		raw, _ := json.Marshal(j.Offline)
		b = appendCSVCell(b, string(raw))
	}
	return append(b, '\r', '\n')
}

// appendStateCSV writes one history entry in stateCSVHeader's columns.
func appendStateCSV(b []byte, uid string, e core.StateEntry) []byte {
	b = appendCSVCell(b, uid)
	b = append(b, ',')
	b = appendCSVCell(b, string(e.Code))
	b = append(b, ',')
	b = appendCSVCell(b, e.Value)
	b = append(b, ',')
	b = appendTime(b, e.OccurredAt)
	b = append(b, ',')
	b = appendTime(b, e.ReceivedAt)
	b = append(b, ',')
	b = strconv.AppendBool(b, e.Verified)
	return append(b, '\r', '\n')
}

// appendStateJSON writes the REST state entry with its mount's uid (and
// verified), by hand: a million lines through
// json.Marshal would cost more than the database's part.
func appendStateJSON(b []byte, uid string, e core.StateEntry) []byte {
	b = append(b, `{"uid":`...)
	b = appendJSONString(b, uid)
	b = append(b, `,"code":`...)
	b = appendJSONString(b, string(e.Code))
	b = append(b, `,"value":`...)
	b = appendJSONString(b, e.Value)
	b = append(b, `,"occurredAt":"`...)
	b = appendTime(b, e.OccurredAt)
	b = append(b, `","receivedAt":"`...)
	b = appendTime(b, e.ReceivedAt)
	b = append(b, `","verified":`...)
	b = strconv.AppendBool(b, e.Verified)
	return append(b, '}', '\n')
}

func appendTime(b []byte, t time.Time) []byte { return t.UTC().AppendFormat(b, core.TimeLayout) }

// appendJSONString quotes s as encoding/json does, with a fast path for
// the plain ASCII that uids, codes and values are.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s)
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plainNumber is a decimal number as the API writes them; a cell holding
// one is data, never a formula, even with a leading minus.
var plainNumber = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)

// appendCSVCell writes a text cell. One rule with the console's CSV: a
// cell that a spreadsheet would run as a formula (it starts with = + - @
// tab or carriage return, and is not a plain number like -12.5) gets a
// leading apostrophe; a cell holding a comma, quote, line break or
// surrounding space is quoted (RFC 4180).
func appendCSVCell(b []byte, s string) []byte {
	if s != "" && strings.IndexByte("=+-@\t\r", s[0]) >= 0 && !plainNumber.MatchString(s) {
		s = "'" + s
	}
	if strings.ContainsAny(s, "\",\r\n") || s != strings.TrimSpace(s) {
		b = append(b, '"')
		b = append(b, strings.ReplaceAll(s, `"`, `""`)...)
		return append(b, '"')
	}
	return append(b, s...)
}
