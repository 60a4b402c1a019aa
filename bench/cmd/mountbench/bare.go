package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

// bareServeEnv, set in mountbench's environment, makes it the bare handler
// alone (serveBare) instead of the load tool.
const bareServeEnv = "MOUNTBENCH_SERVE_BARE"

// bareServer starts the bare handler: this binary again, in a process of
// its own as mountd is, so that the baseline pays for its own scheduling
// and does not share the load tool's runtime (issue 40's definition of the
// GET baseline). It answers GET /api/v1/mounts/{uid} with the bytes mountd
// gave for that mount, on 127.0.0.1:0, and nothing else; stop ends it.
func bareServer(bodies map[string][]byte) (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	in, err := json.Marshal(bodies)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), bareServeEnv+"=1")
	cmd.Stderr = os.Stderr
	// The pipe stays open while this process runs: its end ends the
	// server, also when this process is killed.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() }
	if _, err := stdin.Write(append(in, '\n')); err != nil {
		stop()
		return "", nil, err
	}
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("baseline server: %w", err)
	}
	return "http://" + strings.TrimSpace(addr), stop, nil
}

// serveBare is the bare handler's process: the bodies by uid as JSON on
// stdin, the address it listens on as the first line of stdout; it serves
// until stdin ends.
func serveBare(stdin io.Reader, stdout io.Writer) error {
	var bodies map[string][]byte
	dec := json.NewDecoder(stdin)
	if err := dec.Decode(&bodies); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/mounts/{uid}", func(w http.ResponseWriter, r *http.Request) {
		body, ok := bodies[r.PathValue("uid")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(body)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(stdout, ln.Addr().String()); err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		_, _ = io.Copy(io.Discard, io.MultiReader(dec.Buffered(), stdin))
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
