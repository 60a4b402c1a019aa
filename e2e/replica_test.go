package e2e

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/testenv"
)

// TestReadReplica runs mountd with MOUNTD_DATABASE_READ_URL on a streaming
// replica that replays every commit 250 ms late (scripts/test-services.sh):
// a client that writes and at once reads sees its write, a thousand times
// in a row, over REST and GraphQL, while another client's reads reach the
// replica and, right after the write, may see the name before it.
func TestReadReplica(t *testing.T) {
	dbURL := testenv.PostgresReplicatedURL(t)
	cfg := testConfig(t.TempDir(), dbURL)
	cfg.DatabaseReadURL = testenv.PostgresReadURL(t, testenv.DatabaseName(t, dbURL))
	// Well above the replica's 250 ms, so that a machine busy with other
	// tests' databases streaming to the replica still uses it.
	cfg.ReadMaxLag = 3 * time.Second
	in := start(t, cfg)
	owner := newFleet(in, "Replica")
	uid := uniqueUID("RR")
	owner.associated(t, uid)
	// Another token of the same account is another client (CONTRACT §22).
	other := fleet{in: in, creds: owner.creds, token: in.ownerToken(owner.creds)}

	// The other client may find the mount missing for a moment: the
	// replica is behind the association by up to a second.
	testenv.WaitFor(t, 30*time.Second, "the replica to serve reads", func() bool {
		before := replicaReads(t, in)
		other.call(http.MethodGet, "/api/v1/mounts/"+uid, nil)
		return replicaReads(t, in) > before
	})

	t.Run("a client reads its own write at once", func(t *testing.T) {
		for i := range 1000 {
			name := fmt.Sprintf("bike-%d", i)
			var got string
			switch i % 3 {
			case 0:
				owner.ok(t, http.MethodPatch, "/api/v1/mounts/"+uid, map[string]any{"name": name})
				got = owner.get(t, uid).Name
			case 1:
				owner.ok(t, http.MethodPatch, "/api/v1/mounts/"+uid, map[string]any{"name": name})
				page := decode[struct {
					Mounts []mountView `json:"mounts"`
				}](t, owner.ok(t, http.MethodGet, "/api/v1/mounts?mountUid="+uid, nil))
				if len(page.Mounts) == 1 {
					got = page.Mounts[0].Name
				}
			case 2:
				field[struct{ Name string }](t, owner.gql(t, `mutation($uid: ID!, $name: String) { updateMount(uid: $uid, input: {name: $name}) { name } }`,
					map[string]any{"uid": uid, "name": name}), "updateMount")
				got = field[struct{ Name string }](t, owner.gql(t, `query($uid: ID!) { mount(uid: $uid) { name } }`,
					map[string]any{"uid": uid}), "mount").Name
			}
			if got != name {
				t.Fatalf("write %d: read back %q, want %q (a read after the client's own write reached the lagging replica)", i, got, name)
			}
		}
	})

	t.Run("another client's reads reach the replica", func(t *testing.T) {
		// The replica replays 250 ms late: a read right after a write
		// finds the name before it, unless it went to the primary.
		stale := false
		for i := 0; i < 50 && !stale; i++ {
			name := fmt.Sprintf("seen-%d", i)
			owner.ok(t, http.MethodPatch, "/api/v1/mounts/"+uid, map[string]any{"name": name})
			stale = other.get(t, uid).Name != name
		}
		if !stale {
			t.Fatal("50 reads right after another client's write all saw it: none reached the lagging replica")
		}
		_, body := in.call(http.MethodGet, "/metrics", "", nil)
		m := regexp.MustCompile(`(?m)^mountd_db_replica_lag_seconds\{replica="[^"]+"\} (\S+)$`).FindSubmatch(body)
		if m == nil {
			t.Fatal("metrics lack mountd_db_replica_lag_seconds")
		}
		if lag, err := strconv.ParseFloat(string(m[1]), 64); err != nil || lag < 0 || lag >= 3 {
			t.Fatalf("mountd_db_replica_lag_seconds %s, want 0 to 3 s", m[1])
		}
	})
}

// replicaReads is mountd_db_reads_total{target="replica"}.
func replicaReads(t *testing.T, in *instance) int {
	t.Helper()
	res, body := in.call(http.MethodGet, "/metrics", "", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %d", res.StatusCode)
	}
	m := regexp.MustCompile(`(?m)^mountd_db_reads_total\{target="replica"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatal("metrics lack mountd_db_reads_total{target=\"replica\"}")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}
