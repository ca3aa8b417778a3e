package wire

import (
	_ "embed"

	"github.com/gomodule/redigo/redis"
)

// The poller's zpopbyscore scripts pop the first member of a sorted set
// whose score is at most now:
//
//	KEYS[1]: the sorted set (retry or schedule)
//	ARGV[1]: now, float epoch seconds
//	returns: the member, or nil when none is due
//
// The files hold exactly the text of Ruby's LUA_ZPOPBYSCORE heredoc
// (lib/sidekiq/scheduled.rb, 6.4/7.0 and 7.1+), with no comment lines, so
// that gojob's EVALSHA uses the same SHA1 as Ruby's and adds no script of
// its own to the script cache.
var (
	//go:embed lua/zpopbyscore_6.lua
	zpopByScore6Src string
	//go:embed lua/zpopbyscore_7.lua
	zpopByScore7Src string

	zpopByScore6 = redis.NewScript(1, zpopByScore6Src)
	zpopByScore7 = redis.NewScript(1, zpopByScore7Src)
)

// ZPopByScore returns the poller script of version v (ZRANGEBYSCORE up to
// 7.0, ZRANGE … BYSCORE from 7.1).
func ZPopByScore(v Version) *redis.Script {
	if v.AtLeast(7, 1, 0) {
		return zpopByScore7
	}
	return zpopByScore6
}
