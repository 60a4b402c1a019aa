package e2e

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
)

// BenchmarkReceiptWebhook: the time from a receipt's acknowledgement
// (POST /mounts/{uid}/commands/receipts answered) to its COMMAND_EXECUTED
// webhook, 1,000 receipts of one mount with a device key, 8 clients, paced
// at 200 a second; baseline in the same run: the same for 1,000 reports
// and their STATES_REPORTED webhook. docs/performance.md, "Receipts".
func BenchmarkReceiptWebhook(b *testing.B) {
	for name, newConfig := range backends(b) {
		b.Run(name, func(b *testing.B) {
			cfg := newConfig(b)
			cfg.WebhookAllowPrivate = true
			in := start(b, cfg)
			a := newFleet(in, "A")
			api := client.New(in.base, client.StaticToken(a.token))
			uid := uniqueUID("RW")
			_, device, _ := ed25519.GenerateKey(nil)
			pub := hex.EncodeToString(device.Public().(ed25519.PublicKey))
			if err := api.Do(context.Background(), http.MethodPost, "/mounts", map[string]any{"uid": uid, "devicePublicKey": pub}, nil); err != nil {
				b.Fatal(err)
			}
			if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/confirm-association", nil, nil); err != nil {
				b.Fatal(err)
			}
			reports, receipts := newDeliveryReceiver(), newReceiptReceiver()
			defer reports.Close()
			defer receipts.Close()
			for url, types := range map[string][]string{reports.URL: {"STATES_REPORTED"}, receipts.URL: {"COMMAND_EXECUTED"}} {
				if err := api.Do(context.Background(), http.MethodPost, "/webhooks", map[string]any{"url": url, "eventTypes": types}, nil); err != nil {
					b.Fatal(err)
				}
			}
			const n, perSecond = 1000, 200
			nonces := make([]string, n)
			for i := range nonces {
				var cmds []struct {
					ID string `json:"id"`
				}
				if err := api.Do(context.Background(), http.MethodGet, "/mounts/"+uid+"/query?code=RELEASE_HELMET", nil, &cmds); err != nil || len(cmds) != 1 {
					b.Fatal(err, cmds)
				}
				nonces[i] = cmds[0].ID
			}
			b.ResetTimer()
			base := time.Now().Add(-time.Hour)
			baseline := reports.run(b, api, uid, base, n, perSecond)
			acked := make([]time.Time, n)
			paced(n, perSecond, func(i int) {
				r := protocol.Receipt{UID: uid, Nonce: nonces[i], Outcome: protocol.OutcomeExecuted, Counter: uint64(i + 1),
					At: time.Now().UTC().Truncate(time.Millisecond)}
				body := map[string]any{"receipts": []protocol.UploadReceipt{{Nonce: r.Nonce, Outcome: r.Outcome, Counter: r.Counter,
					At: protocol.FormatTime(r.At), Signature: protocol.Sign(device, protocol.BuildReceiptText(r))}}}
				if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/commands/receipts", body, nil); err != nil {
					b.Error(err)
				}
				acked[i] = time.Now()
			})
			p99 := receipts.p99(b, nonces, acked)
			b.StopTimer()
			b.ReportMetric(p99, "receipt-p99-ms")
			b.ReportMetric(baseline.p99, "report-p99-ms")
			b.ReportMetric(p99/baseline.p99, "ratio")
		})
	}
}

// paced runs do(i) for i < n on 8 goroutines, perSecond a second.
func paced(n, perSecond int, do func(i int)) {
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				do(i)
			}
		})
	}
	began := time.Now()
	for i := range n {
		time.Sleep(time.Until(began.Add(time.Duration(i) * time.Second / time.Duration(perSecond))))
		work <- i
	}
	close(work)
	wg.Wait()
}

// receiptReceiver records when each command's COMMAND_* delivery arrived.
type receiptReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	received map[string]time.Time
}

func newReceiptReceiver() *receiptReceiver {
	r := &receiptReceiver{received: map[string]time.Time{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var c struct {
			Data struct {
				Command struct {
					ID string `json:"id"`
				} `json:"command"`
			} `json:"data"`
		}
		_ = json.Unmarshal(body, &c)
		now := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, seen := r.received[c.Data.Command.ID]; !seen {
			r.received[c.Data.Command.ID] = now
		}
	}))
	return r
}

// p99 waits for every command's delivery and returns the p99 from its
// receipt's acknowledgement, in milliseconds.
func (r *receiptReceiver) p99(b *testing.B, ids []string, acked []time.Time) float64 {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r.mu.Lock()
		got := len(r.received)
		r.mu.Unlock()
		if got >= len(ids) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	lat := make([]time.Duration, 0, len(ids))
	for i, id := range ids {
		got, ok := r.received[id]
		if !ok {
			b.Fatalf("command %s: no COMMAND_EXECUTED delivery", id)
		}
		lat = append(lat, max(0, got.Sub(acked[i])))
	}
	slices.Sort(lat)
	return float64(lat[len(lat)*99/100].Microseconds()) / 1000
}
