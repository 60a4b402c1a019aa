package protocol

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// BuildPayload renders the text a command's signature covers:
// `<generatedAt ms>;<code>;<mountUid>;<params>;<nonce>`, params as key=value
// sorted by key and joined by ',' (list items joined by '+').
func BuildPayload(generatedAt time.Time, code string, uid string, params map[string]string, nonce string) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = k + "=" + params[k]
	}
	return strconv.FormatInt(generatedAt.UnixMilli(), 10) + ";" + code + ";" + uid + ";" +
		strings.Join(pairs, ",") + ";" + nonce
}

// Payload is a command's signed text taken apart: what BuildPayload joined.
type Payload struct {
	GeneratedAt time.Time
	Code        string
	MountUID    string
	Params      map[string]string
	Nonce       string
}

// ParsePayload takes a payload apart; false for anything not in
// BuildPayload's shape (five fields, a millisecond instant, code and uid
// present, key=value parameters without repeats, a nonce as NewNonce makes).
func ParsePayload(s string) (Payload, bool) {
	parts := strings.Split(s, ";")
	if len(parts) != 5 {
		return Payload{}, false
	}
	ms, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || parts[1] == "" || parts[2] == "" || !ValidNonce(parts[4]) {
		return Payload{}, false
	}
	p := Payload{GeneratedAt: time.UnixMilli(ms).UTC(), Code: parts[1], MountUID: parts[2],
		Params: map[string]string{}, Nonce: parts[4]}
	if parts[3] != "" {
		for _, pair := range strings.Split(parts[3], ",") {
			k, v, ok := strings.Cut(pair, "=")
			if !ok || k == "" {
				return Payload{}, false
			}
			if _, dup := p.Params[k]; dup {
				return Payload{}, false
			}
			p.Params[k] = v
		}
	}
	return p, true
}

// ListParam reads a list parameter of a payload: items joined by '+',
// nil for none.
func ListParam(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, "+")
}

// ValidNonce reports whether s is a nonce as NewNonce makes them: 32
// lowercase hex characters (a command's id).
func ValidNonce(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// NewNonce returns 32 lowercase hex characters, fresh for every command.
func NewNonce() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return hex.EncodeToString(b)
}
