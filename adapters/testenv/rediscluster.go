package testenv

import (
	"context"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RedisCluster is a Redis Cluster of a test's own (3 masters, 3 replicas),
// whose nodes it may kill: the shared one of scripts/test-services.sh must
// keep its topology for the tests running beside it.
type RedisCluster struct {
	// URL is go-redis's cluster URL naming every node.
	URL   string
	Addrs []string
	nodes map[string]*exec.Cmd
}

// clusterNodeTimeout is how long the nodes wait before they hold a silent
// master failed: short, so that a replica takes over within a few seconds.
const clusterNodeTimeout = 1000

// StartRedisCluster starts a cluster in a temp dir and waits until it
// serves every slot; the test's cleanup stops it. Without redis-server and
// redis-cli the test is skipped (failed where the servers are required).
func StartRedisCluster(tb testing.TB) *RedisCluster {
	tb.Helper()
	server, err1 := exec.LookPath("redis-server")
	cli, err2 := exec.LookPath("redis-cli")
	if err1 != nil || err2 != nil {
		if os.Getenv("MOUNTD_TEST_REQUIRE_SERVICES") != "" {
			tb.Fatal("redis-server or redis-cli is not installed although the test servers are required")
		}
		tb.Skip("redis-server or redis-cli not installed: run `make test`")
	}
	dir := tb.TempDir()
	c := &RedisCluster{nodes: map[string]*exec.Cmd{}}
	tb.Cleanup(func() {
		for addr := range c.nodes {
			c.Kill(addr)
		}
	})
	for _, port := range clusterPorts(tb, 6) {
		addr := "127.0.0.1:" + strconv.Itoa(port)
		nodeDir := filepath.Join(dir, strconv.Itoa(port))
		if err := os.Mkdir(nodeDir, 0o755); err != nil {
			tb.Fatal(err)
		}
		// --repl-diskless-sync-delay 0: a master would wait 5 s for more
		// replicas before it syncs the first.
		cmd := exec.Command(server, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"),
			"--cluster-node-timeout", strconv.Itoa(clusterNodeTimeout),
			"--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0", "--dir", nodeDir, "--logfile", filepath.Join(nodeDir, "redis.log"))
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		c.nodes[addr] = cmd
		c.Addrs = append(c.Addrs, addr)
	}
	for _, addr := range c.Addrs {
		WaitFor(tb, 5*time.Second, "redis node "+addr+" listening", func() bool {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				_ = conn.Close()
			}
			return err == nil
		})
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	out, err := exec.Command(cli, append(args, "--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range c.Addrs {
		c.WaitState(tb, addr, "ok")
	}
	// Each replica must have synced with its master, or it cannot take
	// over when that master dies.
	WaitFor(tb, 30*time.Second, "every replica in sync", func() bool {
		synced := 0
		for _, addr := range c.Addrs {
			if strings.Contains(c.cli(addr, "info", "replication"), "master_link_status:up") {
				synced++
			}
		}
		return synced == len(c.Addrs)/2
	})
	c.URL = "redis://" + c.Addrs[0] + "?addr=" + strings.Join(c.Addrs[1:], "&addr=")
	return c
}

// Kill stops the node at addr at once (SIGKILL), as a crash would.
func (c *RedisCluster) Kill(addr string) {
	cmd, ok := c.nodes[addr]
	if !ok {
		return
	}
	delete(c.nodes, addr)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

// WaitState waits until the node at addr says cluster_state:<state>.
func (c *RedisCluster) WaitState(tb testing.TB, addr, state string) {
	tb.Helper()
	WaitFor(tb, 30*time.Second, "cluster_state:"+state+" on "+addr, func() bool {
		return strings.Contains(c.cli(addr, "cluster", "info"), "cluster_state:"+state+"\r\n")
	})
}

// cli runs redis-cli against the node at addr and returns its output
// (empty on failure).
func (c *RedisCluster) cli(addr string, args ...string) string {
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", host, "-p", port}, args...)...).Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// clusterPorts picks n free ports whose cluster bus ports (port + 10000)
// are free too, in 12000-21999: both stay below the ephemeral range
// (32768 up), where an outgoing connection could take one meanwhile.
func clusterPorts(tb testing.TB, n int) []int {
	tb.Helper()
	free := func(port int) bool {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			return false
		}
		_ = l.Close()
		return true
	}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			tb.Fatalf("no %d free port pairs in 12000-21999", n)
		}
		port := 12000 + rand.IntN(10000)
		taken := false
		for _, p := range ports {
			taken = taken || p == port
		}
		if !taken && free(port) && free(port+10000) {
			ports = append(ports, port)
		}
	}
	return ports
}

// WaitFor polls cond every 50 ms until it holds, failing tb after timeout.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
