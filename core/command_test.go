package core_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/protocol"
)

// ParsePayload is BuildPayload's inverse and refuses any other shape.
func TestParsePayload(t *testing.T) {
	at := time.UnixMilli(1795320000123).UTC()
	nonce := protocol.NewNonce()
	built := protocol.BuildPayload(at, string(core.CmdSyncNfcTags), "M-1", map[string]string{"tagUids": "04A1+04B2", "x": "1"}, nonce)
	p, ok := protocol.ParsePayload(built)
	if !ok || !p.GeneratedAt.Equal(at) || p.Code != string(core.CmdSyncNfcTags) || p.MountUID != "M-1" || p.Nonce != nonce ||
		len(p.Params) != 2 || p.Params["x"] != "1" || len(protocol.ListParam(p.Params["tagUids"])) != 2 {
		t.Fatalf("ParsePayload(%q) = %+v, %v", built, p, ok)
	}
	for _, bad := range []string{
		"", "1;CODE;M-1;;" + nonce + ";extra", "x;CODE;M-1;;" + nonce, "1;;M-1;;" + nonce, "1;CODE;;;" + nonce,
		"1;CODE;M-1;novalue;" + nonce, "1;CODE;M-1;a=1,a=2;" + nonce, "1;CODE;M-1;;" + strings.ToUpper(nonce), "1;CODE;M-1;;abc",
	} {
		if _, ok := protocol.ParsePayload(bad); ok {
			t.Errorf("ParsePayload(%q) accepted", bad)
		}
	}
}
