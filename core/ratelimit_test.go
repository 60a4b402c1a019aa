package core_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

func TestParseRate(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want core.Rate
		ok   bool
	}{
		{"1200/m", core.Rate{Limit: 1200, Period: time.Minute}, true},
		{"20/s", core.Rate{Limit: 20, Period: time.Second}, true},
		{" 50000/h ", core.Rate{Limit: 50000, Period: time.Hour}, true},
		{"0/m", core.Rate{}, false},
		{"-1/m", core.Rate{}, false},
		{"1200", core.Rate{}, false},
		{"1200/d", core.Rate{}, false},
		{"many/m", core.Rate{}, false},
		{"2000000/s", core.Rate{}, false},
	} {
		got, err := core.ParseRate(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseRate(%q) = %+v, %v", tt.in, got, err)
		}
	}
}

// scriptedLimiter answers with a fixed decision or error and records keys.
type scriptedLimiter struct {
	decision core.RateDecision
	err      error
	keys     []string
}

func (l *scriptedLimiter) Allow(_ context.Context, key string, _ core.Rate) (core.RateDecision, error) {
	l.keys = append(l.keys, key)
	return l.decision, l.err
}

func TestAPIRateLimit(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rate := core.Rate{Limit: 100, Period: time.Minute}
	p := core.Principal{AccountID: "acc_1"}
	for _, tt := range []struct {
		name    string
		limiter *scriptedLimiter
		code    core.Code // "" when let through
		wait    time.Duration
	}{
		{"within the limit", &scriptedLimiter{decision: core.RateDecision{Allowed: true, Limit: 100, Remaining: 7}}, "", 0},
		{"over the limit", &scriptedLimiter{decision: core.RateDecision{Limit: 100, RetryAfter: 600 * time.Millisecond}}, core.CodeRateLimited, 600 * time.Millisecond},
		{"the limiter is down", &scriptedLimiter{err: errors.New("connection refused")}, "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := core.NewAPIRateLimit(tt.limiter, rate, quiet).Take(context.Background(), p)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
			} else {
				var ce *core.Error
				if !errors.As(err, &ce) || ce.Code != tt.code || ce.RetryAfter != tt.wait {
					t.Fatalf("err = %v, want %s after %v", err, tt.code, tt.wait)
				}
			}
			if len(tt.limiter.keys) != 1 || tt.limiter.keys[0] != "api:acc_1" {
				t.Fatalf("keys = %v, want one per account", tt.limiter.keys)
			}
		})
	}
}
