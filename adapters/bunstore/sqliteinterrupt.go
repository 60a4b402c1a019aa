package bunstore

import (
	"context"
	"database/sql/driver"
	"reflect"
	"sync"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// modernc's SQLite driver interrupts a statement whose context ends only
// while the statement's first step runs (in QueryContext): the steps of
// rows.Next run on, and database/sql's close of the rows waits for them, so
// a query whose work comes after its first row ran for minutes past its
// request. interruptConnector wraps its connections so that the end of a
// query's context interrupts the connection (sqlite3_interrupt) for as long
// as the query's rows are open.

type interruptConnector struct {
	drv driver.Driver
	dsn string
}

func (c *interruptConnector) Driver() driver.Driver { return c.drv }

func (c *interruptConnector) Connect(ctx context.Context) (driver.Conn, error) {
	var dc driver.Conn
	var err error
	if dctx, ok := c.drv.(driver.DriverContext); ok {
		var conn driver.Connector
		if conn, err = dctx.OpenConnector(c.dsn); err != nil {
			return nil, err
		}
		dc, err = conn.Connect(ctx)
	} else {
		dc, err = c.drv.Open(c.dsn)
	}
	if err != nil {
		return nil, err
	}
	return &interruptConn{Conn: dc, db: sqliteHandle(dc)}, nil
}

// sqliteHandle is the sqlite3* of a modernc connection (its unexported
// field db, read through reflect), or 0 when the driver is another one
// (mattn's, built with cgo) or names it differently; TestStatementsStopAtTheirDeadline
// would say.
func sqliteHandle(dc driver.Conn) uintptr {
	v := reflect.ValueOf(dc)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return 0
	}
	f := v.Elem().FieldByName("db")
	if !f.IsValid() || f.Kind() != reflect.Uintptr {
		return 0
	}
	return uintptr(f.Uint())
}

// interruptConn is a SQLite connection whose queries' rows are interrupted
// when their context ends. Everything else is the driver's own.
type interruptConn struct {
	driver.Conn
	db uintptr
}

func (cn *interruptConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := cn.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &interruptStmt{Stmt: st, cn: cn}, nil
}

func (cn *interruptConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return cn.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (cn *interruptConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return cn.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (cn *interruptConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := cn.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
	if err != nil {
		return nil, err
	}
	return cn.watch(ctx, rows), nil
}

func (cn *interruptConn) Ping(ctx context.Context) error { return cn.Conn.(driver.Pinger).Ping(ctx) }

func (cn *interruptConn) IsValid() bool { return cn.Conn.(driver.Validator).IsValid() }

func (cn *interruptConn) ResetSession(ctx context.Context) error {
	return cn.Conn.(driver.SessionResetter).ResetSession(ctx)
}

// watch interrupts the connection if ctx ends before rows are closed.
func (cn *interruptConn) watch(ctx context.Context, rows driver.Rows) driver.Rows {
	if cn.db == 0 || ctx.Done() == nil {
		return rows
	}
	r := &interruptRows{Rows: rows}
	r.stop = context.AfterFunc(ctx, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.closed {
			tls := libc.NewTLS()
			sqlite3.Xsqlite3_interrupt(tls, cn.db)
			tls.Close()
		}
	})
	return r
}

var (
	_ driver.Connector          = (*interruptConnector)(nil)
	_ driver.ConnPrepareContext = (*interruptConn)(nil)
	_ driver.ConnBeginTx        = (*interruptConn)(nil)
	_ driver.ExecerContext      = (*interruptConn)(nil)
	_ driver.QueryerContext     = (*interruptConn)(nil)
	_ driver.Pinger             = (*interruptConn)(nil)
	_ driver.Validator          = (*interruptConn)(nil)
	_ driver.SessionResetter    = (*interruptConn)(nil)
)

type interruptStmt struct {
	driver.Stmt
	cn *interruptConn
}

func (st *interruptStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return st.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (st *interruptStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := st.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	return st.cn.watch(ctx, rows), nil
}

// interruptRows stops interrupting once closed: the connection may then
// run another statement, or be closed.
type interruptRows struct {
	driver.Rows
	mu     sync.Mutex
	closed bool
	stop   func() bool
}

func (r *interruptRows) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.stop()
	return r.Rows.Close()
}
