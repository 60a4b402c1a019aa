package core_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mountd/mountd/core"
)

// redisReply is an error reply as go-redis returns it (proto.RedisError).
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

// TestIsUnavailableRedisReplies: a cluster without a master for a slot, or
// a server loading, is a dependency down; other error replies are not.
func TestIsUnavailableRedisReplies(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{redisReply("CLUSTERDOWN The cluster is down"), true},
		{fmt.Errorf("state cache offer: %w", redisReply("CLUSTERDOWN Hash slot not served")), true},
		{redisReply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{redisReply("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{redisReply("LOADING Redis is loading the dataset in memory"), true},
		{redisReply("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{errors.New("CLUSTERDOWN in a message that is no Redis reply"), false},
	} {
		if got := core.IsUnavailable(tc.err); got != tc.want {
			t.Errorf("IsUnavailable(%q) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
