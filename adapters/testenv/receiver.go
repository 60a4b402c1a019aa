package testenv

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// HeaderFloodReceiver listens on loopback and answers every request 200
// after about headerBytes of short header lines, as a hostile webhook
// receiver would. It returns the receiver's URL.
func HeaderFloodReceiver(t testing.TB, headerBytes int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	lines := strings.Repeat("X-A: b\r\n", headerBytes/8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n"+lines+"Content-Length: 0\r\n\r\n")
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/hook"
}
