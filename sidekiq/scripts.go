package sidekiq

import (
	_ "embed"

	"github.com/gomodule/redigo/redis"
)

var (
	//go:embed lua/zpopbyscore_6.lua
	zpopByScore6Src string
	//go:embed lua/zpopbyscore_7.lua
	zpopByScore7Src string

	zpopByScore6 = redis.NewScript(1, zpopByScore6Src)
	zpopByScore7 = redis.NewScript(1, zpopByScore7Src)
)

// zpopByScore returns the poller script of version v (ZRANGEBYSCORE up to
// 7.0, ZRANGE … BYSCORE from 7.1).
func zpopByScore(v Version) *redis.Script {
	if v.AtLeast(7, 1, 0) {
		return zpopByScore7
	}
	return zpopByScore6
}
