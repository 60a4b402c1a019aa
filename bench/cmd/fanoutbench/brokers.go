package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
)

// payloadTemplate is a message whose first occurredAt value is replaced
// by each message's key; brokers send these bytes, so their subscribers do
// the same work per message as the GraphQL ones and the sizes match.
type payloadTemplate struct {
	raw        []byte
	start, end int // the key's value within raw
}

func newTemplate(raw []byte) (payloadTemplate, error) {
	i := bytes.Index(raw, keyMarker)
	if i < 0 {
		return payloadTemplate{}, errors.New("template holds no occurredAt")
	}
	start := i + len(keyMarker)
	j := bytes.IndexByte(raw[start:], '"')
	if j < 0 {
		return payloadTemplate{}, errors.New("template occurredAt is not terminated")
	}
	return payloadTemplate{raw: bytes.Clone(raw), start: start, end: start + j}, nil
}

// syntheticTemplate is a GraphQL-shaped message padded to size bytes, for
// runs without mountd.
func syntheticTemplate(size int) (payloadTemplate, error) {
	head := `{"payload":{"data":{"mountStateChanged":{"states":[{"occurredAt":"` + keyAt(0) + `","pad":"`
	tail := `"}]}}},"id":"1","type":"next"}`
	pad := max(0, size-len(head)-len(tail))
	return newTemplate([]byte(head + strings.Repeat("x", pad) + tail))
}

func (t payloadTemplate) message(ms int64) []byte {
	key := keyAt(ms)
	out := make([]byte, 0, len(t.raw)-(t.end-t.start)+len(key))
	out = append(out, t.raw[:t.start]...)
	out = append(out, key...)
	return append(out, t.raw[t.end:]...)
}

// parallel runs fn(0..n-1) on at most width goroutines; the first error
// stops the others from starting.
func parallel(ctx context.Context, n, width int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(width, max(n, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// natsSystem: N connections, one subscription each, on one subject; the
// publisher's acknowledgement is Flush (the server's PONG after the PUB).
type natsSystem struct {
	url, subject string
	tpl          payloadTemplate
	concurrency  int

	subs []*nats.Conn
	pub  *nats.Conn
}

func (s *natsSystem) Name() string { return "nats" }

func (s *natsSystem) Connect(ctx context.Context, n int, deliver func(int, []byte, int64), now func() int64) error {
	s.subs = make([]*nats.Conn, n)
	pub, err := nats.Connect(s.url, nats.Name("fanoutbench-pub"), nats.NoReconnect())
	if err != nil {
		return err
	}
	s.pub = pub
	return parallel(ctx, n, s.concurrency, func(ctx context.Context, i int) error {
		nc, err := nats.Connect(s.url, nats.Name(fmt.Sprintf("fanoutbench-%d", i)), nats.NoReconnect(), nats.Timeout(10*time.Second))
		if err != nil {
			return fmt.Errorf("subscriber %d: %w", i, err)
		}
		s.subs[i] = nc
		if _, err := nc.Subscribe(s.subject, func(m *nats.Msg) {
			at := now()
			deliver(i, m.Data, at)
		}); err != nil {
			return err
		}
		return nc.FlushTimeout(10 * time.Second)
	})
}

func (s *natsSystem) Publish(ctx context.Context, ms int64) error {
	if err := s.pub.Publish(s.subject, s.tpl.message(ms)); err != nil {
		return err
	}
	return s.pub.FlushTimeout(5 * time.Second)
}

func (s *natsSystem) Ended() int {
	c := 0
	for _, nc := range s.subs {
		if nc != nil && !nc.IsConnected() {
			c++
		}
	}
	return c
}

func (s *natsSystem) LastError() string { return "" }

func (s *natsSystem) Close() {
	for _, nc := range s.subs {
		if nc != nil {
			nc.Close()
		}
	}
	if s.pub != nil {
		s.pub.Close()
	}
}

// mqttSystem: N MQTT clients subscribed with QoS 0 to one topic; the
// publisher's acknowledgement is the QoS 0 token (written to the socket;
// QoS 0 has no broker acknowledgement).
type mqttSystem struct {
	url, topic, clientPrefix string
	tpl                      payloadTemplate
	concurrency              int

	subs []mqtt.Client
	pub  mqtt.Client
}

func (s *mqttSystem) Name() string { return "mqtt" }

func (s *mqttSystem) client(id string) (mqtt.Client, error) {
	opts := mqtt.NewClientOptions().AddBroker(s.url).SetClientID(id).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectRetry(false).SetKeepAlive(60 * time.Second).
		SetConnectTimeout(10 * time.Second).SetOrderMatters(true)
	c := mqtt.NewClient(opts)
	tok := c.Connect()
	if !tok.WaitTimeout(15 * time.Second) {
		return nil, errors.New("connect timed out")
	}
	return c, tok.Error()
}

func (s *mqttSystem) Connect(ctx context.Context, n int, deliver func(int, []byte, int64), now func() int64) error {
	s.subs = make([]mqtt.Client, n)
	pub, err := s.client(s.clientPrefix + "pub")
	if err != nil {
		return err
	}
	s.pub = pub
	return parallel(ctx, n, s.concurrency, func(ctx context.Context, i int) error {
		c, err := s.client(fmt.Sprintf("%s%d", s.clientPrefix, i))
		if err != nil {
			return fmt.Errorf("subscriber %d: %w", i, err)
		}
		s.subs[i] = c
		tok := c.Subscribe(s.topic, 0, func(_ mqtt.Client, m mqtt.Message) {
			at := now()
			deliver(i, m.Payload(), at)
		})
		if !tok.WaitTimeout(15 * time.Second) {
			return fmt.Errorf("subscriber %d: SUBACK timed out", i)
		}
		return tok.Error()
	})
}

func (s *mqttSystem) Publish(ctx context.Context, ms int64) error {
	tok := s.pub.Publish(s.topic, 0, false, s.tpl.message(ms))
	if !tok.WaitTimeout(5 * time.Second) {
		return errors.New("publish timed out")
	}
	return tok.Error()
}

func (s *mqttSystem) Ended() int {
	c := 0
	for _, cl := range s.subs {
		if cl != nil && !cl.IsConnected() {
			c++
		}
	}
	return c
}

func (s *mqttSystem) LastError() string { return "" }

func (s *mqttSystem) Close() {
	var wg sync.WaitGroup
	for _, c := range append(s.subs, s.pub) {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); c.Disconnect(100) }()
	}
	wg.Wait()
}
