package protocol

// TEMPORARY: stands in for protocol/offline.go of the device work until it
// is merged; deleted then.

import (
	"crypto/ecdh"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

type Grant struct {
	UID, ID, RiderKey   string
	Rights              []string
	NotBefore, NotAfter time.Time
	Epoch               int64
}

func BuildGrantText(g Grant) string {
	return "grant;" + g.UID + ";" + g.ID + ";" + g.RiderKey + ";" + strings.Join(g.Rights, "+") + ";" +
		strconv.FormatInt(g.NotBefore.UnixMilli(), 10) + ";" + strconv.FormatInt(g.NotAfter.UnixMilli(), 10) + ";" + strconv.FormatInt(g.Epoch, 10)
}

type Revocations struct {
	UID            string
	Version, Epoch int64
	GrantIDs       []string
}

func BuildRevocationsText(r Revocations) string {
	return "revocations;" + r.UID + ";" + strconv.FormatInt(r.Version, 10) + ";" + strconv.FormatInt(r.Epoch, 10) + ";" + strings.Join(r.GrantIDs, "+")
}

func BuildTimeText(uid string, at time.Time, nonce string) string {
	return "time;" + uid + ";" + strconv.FormatInt(at.UnixMilli(), 10) + ";" + nonce
}

func ParseRiderKey(s string) (*ecdh.PublicKey, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 65 || b[0] != 4 {
		return nil, errors.New("rider key")
	}
	return ecdh.P256().NewPublicKey(b)
}
