package main

import (
	"testing"
)

// TestVerify checks the Standard Webhooks signature against the
// specification's example, and that a changed body fails.
func TestVerify(t *testing.T) {
	r := &receiver{}
	if err := r.setSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"); err != nil {
		t.Fatal(err)
	}
	key, _ := r.secret.Load().([]byte)
	body := []byte(`{"test": 2432232314}`)
	sig := "v1,bm9ldHUjKzFob2VudXRob2VodWUzMjRvdWVvdW9ldQo= v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	if !verify(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body, sig) {
		t.Error("the specification's example does not verify")
	}
	if verify(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232315}`), sig) {
		t.Error("a changed body verifies")
	}
}

// TestOnceEach: the reconciliation of a subscription counts an event it
// missed, one it received twice and one not in the feed, and ignores
// events of mounts it does not watch and account-level ones.
func TestOnceEach(t *testing.T) {
	uid := func(s string) *string { return &s }
	feed := []feedEvent{{ID: "e1", UID: uid("A")}, {ID: "e2", UID: uid("B")}, {ID: "e3", UID: uid("A")}, {ID: "e4"}, {ID: "e5", UID: uid("A")}}
	known := map[string]int{}
	for i, e := range feed {
		known[e.ID] = i
	}
	good := &subscriber{n: 0, uids: []string{"A"}, received: []string{"e1", "e3", "e5"}}
	bad := &subscriber{n: 1, received: []string{"e1", "e2", "e2", "x9", "e5"}} // every mount: e3 missing
	follower := &subscriber{n: 2, feed: true, received: []string{"e1", "e2", "e3", "e4", "e5"}}
	r := &report{Reconnects: map[string]int{}, ReconnectReasons: map[string]int{}}
	r.onceEach("subscriptions", []*subscriber{good, bad}, feed, known)
	r.onceEach("feed followers", []*subscriber{follower}, feed, known)
	want := map[string]int{
		"subscriptions: feed events missing":           1,
		"subscriptions: events received twice":         1,
		"subscriptions: events not in the feed":        1,
		"subscriptions with any of the above":          1,
		"feed followers: feed events missing":          0,
		"feed followers with any of the above":         0,
		"subscriptions: events out of the log's order": 0,
	}
	got := map[string]int{}
	for _, c := range r.Checks {
		got[c.Name] = c.Count
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s: %d, want %d", name, got[name], n)
		}
	}
	if !r.failed() {
		t.Error("the report does not fail")
	}
}
