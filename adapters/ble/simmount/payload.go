package simmount

import (
	"strconv"
	"strings"
)

// payload is a command's signed text, `<ms>;<code>;<uid>;<params>;<nonce>`
// (CONTRACT §6), taken apart.
type payload struct {
	millis int64
	code   string
	uid    string
	params map[string]string
	nonce  string
}

// parsePayload splits a payload; anything not in the contract's shape is
// refused before any key is involved.
func parsePayload(s string) (payload, bool) {
	parts := strings.Split(s, ";")
	if len(parts) != 5 {
		return payload{}, false
	}
	ms, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || parts[1] == "" || parts[2] == "" || !isNonce(parts[4]) {
		return payload{}, false
	}
	p := payload{millis: ms, code: parts[1], uid: parts[2], nonce: parts[4], params: map[string]string{}}
	if parts[3] != "" {
		for _, pair := range strings.Split(parts[3], ",") {
			k, v, ok := strings.Cut(pair, "=")
			if !ok || k == "" {
				return payload{}, false
			}
			if _, dup := p.params[k]; dup {
				return payload{}, false
			}
			p.params[k] = v
		}
	}
	return p, true
}

// isNonce: 32 lowercase hex characters.
func isNonce(s string) bool {
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

// splitList reads a list parameter: items joined by '+', empty for none.
func splitList(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, "+")
}
