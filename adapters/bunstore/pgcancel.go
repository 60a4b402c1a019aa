package bunstore

import (
	"context"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun/driver/pgdriver"
)

// pgdriver stops waiting for a statement when its context ends (a read
// deadline on the socket) and then closes the socket, but it never asks
// PostgreSQL to stop: a backend whose client went away computes on until
// it tries to send, minutes later for an expensive filter. cancelConnector
// wraps pgdriver's connections so that the end of a statement's context
// sends PostgreSQL a cancel request (the protocol's CancelRequest, on a
// connection of its own, with the backend's process id and secret key), and
// the backend stops within a round trip.

// cancelRequestCode is the protocol's CancelRequest code (1234 << 16 | 5678).
const cancelRequestCode = 80877102

// cancelDialTimeout bounds the connection that carries a cancel request.
const cancelDialTimeout = 2 * time.Second

type cancelConnector struct {
	inner *pgdriver.Connector
	// cancels counts cancel requests sent (tests).
	cancels atomic.Int64
}

func newCancelConnector(inner *pgdriver.Connector) *cancelConnector {
	return &cancelConnector{inner: inner}
}

func (c *cancelConnector) Driver() driver.Driver { return c.inner.Driver() }

func (c *cancelConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	cn := &cancelConn{inner: dc, connector: c}
	cn.pid, cn.key, cn.cancellable = backendKey(dc)
	return cn, nil
}

// backendKey reads the process id and secret key that PostgreSQL sent at
// start-up (BackendKeyData) from pgdriver's connection, which keeps them
// unexported: reflect reads them without unsafe. ok is false if a version of
// pgdriver names them differently (TestPostgresCancelsOnDeadline would say).
func backendKey(dc driver.Conn) (pid, key int32, ok bool) {
	v := reflect.ValueOf(dc)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return 0, 0, false
	}
	v = v.Elem()
	if v.Kind() != reflect.Struct {
		return 0, 0, false
	}
	p, k := v.FieldByName("processID"), v.FieldByName("secretKey")
	if !p.IsValid() || !k.IsValid() || p.Kind() != reflect.Int32 || k.Kind() != reflect.Int32 {
		return 0, 0, false
	}
	return int32(p.Int()), int32(k.Int()), p.Int() != 0
}

// sendCancel asks PostgreSQL to cancel what backend pid runs now.
func (c *cancelConnector) sendCancel(pid, key int32) {
	conf := c.inner.Config()
	d := net.Dialer{Timeout: cancelDialTimeout}
	conn, err := d.Dial(conf.Network, conf.Addr)
	if err != nil {
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(cancelDialTimeout))
	var msg [16]byte
	binary.BigEndian.PutUint32(msg[0:], 16)
	binary.BigEndian.PutUint32(msg[4:], cancelRequestCode)
	binary.BigEndian.PutUint32(msg[8:], uint32(pid))
	binary.BigEndian.PutUint32(msg[12:], uint32(key))
	if _, err := conn.Write(msg[:]); err != nil {
		return
	}
	c.cancels.Add(1)
	// The server closes the connection once it has read the request.
	var b [1]byte
	_, _ = conn.Read(b[:])
}

// cancelConn is a pgdriver connection whose statements are cancelled on
// the server when their context ends. A connection whose statement was
// cancelled is not reused: the cancel request may arrive after the
// statement finished and hit the next one.
type cancelConn struct {
	inner       driver.Conn
	connector   *cancelConnector
	pid, key    int32
	cancellable bool
	cancelled   atomic.Bool
}

// watch sends a cancel request when ctx ends while the statement runs.
// The returned finish, called with the statement's result, sends one too
// when the statement failed on its context or on a read timeout: pgdriver's
// socket deadline (the context's deadline) may fire a moment before the
// context's own timer, and the socket is then closed with the backend
// still at work.
func (cn *cancelConn) watch(ctx context.Context) (finish func(error)) {
	if !cn.cancellable {
		return func(error) {}
	}
	unwatch := func() bool { return true }
	if ctx.Done() != nil {
		unwatch = context.AfterFunc(ctx, cn.cancel)
	}
	return func(err error) {
		if unwatch() && err != nil && (ctx.Err() != nil || isTimeout(err)) {
			go cn.cancel()
		}
	}
}

// cancel asks PostgreSQL once to stop what the connection runs, and keeps
// the connection from being used again.
func (cn *cancelConn) cancel() {
	if cn.cancelled.CompareAndSwap(false, true) {
		cn.connector.sendCancel(cn.pid, cn.key)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (cn *cancelConn) Prepare(query string) (driver.Stmt, error) {
	return cn.PrepareContext(context.Background(), query)
}

func (cn *cancelConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	finish := cn.watch(ctx)
	st, err := cn.inner.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	finish(err)
	if err != nil {
		return nil, err
	}
	return &cancelStmt{Stmt: st, cn: cn}, nil
}

func (cn *cancelConn) Close() error { return cn.inner.Close() }

func (cn *cancelConn) Begin() (driver.Tx, error) {
	return cn.BeginTx(context.Background(), driver.TxOptions{})
}

func (cn *cancelConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	finish := cn.watch(ctx)
	tx, err := cn.inner.(driver.ConnBeginTx).BeginTx(ctx, opts)
	finish(err)
	return tx, err
}

func (cn *cancelConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	finish := cn.watch(ctx)
	res, err := cn.inner.(driver.ExecerContext).ExecContext(ctx, query, args)
	finish(err)
	return res, err
}

func (cn *cancelConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	finish := cn.watch(ctx)
	rows, err := cn.inner.(driver.QueryerContext).QueryContext(ctx, query, args)
	if err != nil {
		finish(err)
		return nil, err
	}
	// Rows are read after QueryContext returns: keep watching until closed.
	return &cancelRows{Rows: rows, cn: cn, finish: finish}, nil
}

func (cn *cancelConn) Ping(ctx context.Context) error {
	finish := cn.watch(ctx)
	err := cn.inner.(driver.Pinger).Ping(ctx)
	finish(err)
	return err
}

func (cn *cancelConn) IsValid() bool {
	return !cn.cancelled.Load() && cn.inner.(driver.Validator).IsValid()
}

func (cn *cancelConn) ResetSession(ctx context.Context) error {
	if cn.cancelled.Load() {
		return driver.ErrBadConn
	}
	return cn.inner.(driver.SessionResetter).ResetSession(ctx)
}

var (
	_ driver.Connector          = (*cancelConnector)(nil)
	_ driver.ConnPrepareContext = (*cancelConn)(nil)
	_ driver.ConnBeginTx        = (*cancelConn)(nil)
	_ driver.ExecerContext      = (*cancelConn)(nil)
	_ driver.QueryerContext     = (*cancelConn)(nil)
	_ driver.Pinger             = (*cancelConn)(nil)
	_ driver.Validator          = (*cancelConn)(nil)
	_ driver.SessionResetter    = (*cancelConn)(nil)
)

// cancelStmt is a prepared statement of a cancelConn.
type cancelStmt struct {
	driver.Stmt
	cn *cancelConn
}

func (st *cancelStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	finish := st.cn.watch(ctx)
	res, err := st.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
	finish(err)
	return res, err
}

func (st *cancelStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	finish := st.cn.watch(ctx)
	rows, err := st.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		finish(err)
		return nil, err
	}
	return &cancelRows{Rows: rows, cn: st.cn, finish: finish}, nil
}

var (
	_ driver.StmtExecContext  = (*cancelStmt)(nil)
	_ driver.StmtQueryContext = (*cancelStmt)(nil)
)

// cancelRows keeps its statement's watch until the rows are closed.
type cancelRows struct {
	driver.Rows
	cn       *cancelConn
	finish   func(error)
	finished bool
}

func (r *cancelRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err != nil && err != io.EOF && isTimeout(err) {
		// The read timed out on the context's deadline: the backend runs on.
		go r.cn.cancel()
	}
	return err
}

func (r *cancelRows) Close() error {
	err := r.Rows.Close()
	if !r.finished {
		r.finished = true
		r.finish(err)
	}
	return err
}
