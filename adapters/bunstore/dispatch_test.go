package bunstore_test

import (
	"context"
	"testing"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/adapters/storetest"
	"github.com/mountd/mountd/core"
)

// TestDispatchReadsBodiesOfHookedAccountsOnly: the webhook dispatcher
// decodes the bodies of the events of accounts with an enabled webhook
// only. An account without one has an event whose body would not decode:
// the dispatcher passes it by, and plans the other account's event.
func TestDispatchReadsBodiesOfHookedAccountsOnly(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, _ string, store *bunstore.Store) {
		ctx := context.Background()
		acc, err := core.NewAccountService(store, nil).Create(ctx, "hooked")
		if err != nil {
			t.Fatal(err)
		}
		hooked := acc.AccountID
		if err := store.CreateWebhook(ctx, core.Webhook{ID: "wh_d1", AccountID: hooked, URL: "https://example.com/",
			EventTypes: []core.EventType{}, MountUIDs: []string{}, Enabled: true, SealedSecret: "sealed"}, 20); err != nil {
			t.Fatal(err)
		}
		for _, row := range [][2]string{{"acc_plain", `not json`}, {hooked, `{"mount":{"uid":"D1"}}`}} {
			if _, err := store.DB().NewRaw(`INSERT INTO events (account_id, type, mount_uid, occurred_at, body) VALUES (?, 'DELETED', 'D1', 1, ?)`,
				row[0], row[1]).Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// The hooked account's event is the later: once it shows, both do.
		storetest.WaitForEvents(t, store, core.EventQuery{AccountID: hooked}, 1)
		var planned []core.Event
		n, err := store.EnqueueDeliveries(ctx, 10, func(e core.Event, hooks []core.Webhook) ([]core.Delivery, error) {
			planned = append(planned, e)
			return nil, nil
		})
		if err != nil || n != 2 {
			t.Fatalf("enqueue: %d events, %v; want 2, nil", n, err)
		}
		if len(planned) != 1 || planned[0].AccountID != hooked || planned[0].Mount.UID != "D1" {
			t.Fatalf("planned %+v, want the hooked account's event with its body", planned)
		}
	})
}
