package protocol

import (
	"fmt"
	"strconv"
	"strings"
)

// ValidateState checks one entry's code and value.
func ValidateState(code StateCode, value string) error {
	_, err := CanonicalState(code, value)
	return err
}

// MaxStateValueLength bounds a state value's text.
const MaxStateValueLength = 32

// CanonicalState checks value for code and returns the text stored for it.
// Numbers are plain decimals only (an optional minus, digits, an optional
// fraction: no exponent, hex, underscores or plus sign, which Go's
// ParseFloat would take), written canonically: no leading zeros, no
// trailing fractional zeros, no "-0". One value then has one text, so
// equal reports are duplicates and byte order ties break the same way on
// every replica and database.
func CanonicalState(code StateCode, value string) (string, error) {
	if len(value) > MaxStateValueLength {
		return "", fmt.Errorf("must be at most %d characters", MaxStateValueLength)
	}
	number := func(lo, hi float64) (string, error) {
		c, ok := canonicalDecimal(value)
		if !ok {
			return "", fmt.Errorf("must be a plain decimal number from %g to %g", lo, hi)
		}
		f, err := strconv.ParseFloat(c, 64)
		if err != nil || f < lo || f > hi {
			return "", fmt.Errorf("must be a number from %g to %g", lo, hi)
		}
		return c, nil
	}
	switch code {
	case StateBatteryLevel:
		return number(0, 100)
	case StateCPUTemperature:
		return number(-60, 150)
	case StateMountLocked, StateHelmetMounted:
		if value != "0" && value != "1" {
			return "", fmt.Errorf("must be 1 or 0")
		}
		return value, nil
	}
	return "", fmt.Errorf("unknown code")
}

// canonicalDecimal rewrites -?digits(.digits)? canonically; ok is false for
// any other text.
func canonicalDecimal(s string) (string, bool) {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	whole, frac, hasFrac := strings.Cut(s, ".")
	if whole == "" || hasFrac && frac == "" || !allDigits(whole) || !allDigits(frac) {
		return "", false
	}
	whole = strings.TrimLeft(whole, "0")
	if whole == "" {
		whole = "0"
	}
	frac = strings.TrimRight(frac, "0")
	out := whole
	if frac != "" {
		out += "." + frac
	}
	if neg && out != "0" {
		out = "-" + out
	}
	return out, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
