package core

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"
)

// UnavailableRetry is the Retry-After given when a dependency is down.
const UnavailableRetry = 5 * time.Second

// IsUnavailable reports whether err says a dependency (the database,
// Redis) cannot be reached, rather than that the request or mountd is at
// fault: the API answers those 503 UNAVAILABLE with Retry-After.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Code == CodeUnavailable
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &opErr), errors.As(err, &dnsErr),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, driver.ErrBadConn):
		return true
	}
	// PostgreSQL's connection exceptions (class 08), shutdown or start-up
	// refusals (57P01..57P03) and a server or role at its connection limit
	// (53300 too_many_connections: "sorry, too many clients already"), read
	// through the driver's Field method.
	var pg interface{ Field(byte) string }
	if errors.As(err, &pg) {
		code := pg.Field('C')
		return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03" || code == "53300"
	}
	// A Redis Cluster without a master for a slot (during a failover) and a
	// server still loading answer with these error replies, which go-redis
	// marks with a RedisError method.
	var re interface {
		error
		RedisError()
	}
	if errors.As(err, &re) {
		for _, prefix := range []string{"CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING"} {
			if strings.HasPrefix(re.Error(), prefix) {
				return true
			}
		}
	}
	// go-redis names these without a typed error.
	msg := err.Error()
	return strings.Contains(msg, "redis: connection pool timeout") || strings.Contains(msg, "redis: client is closed")
}
