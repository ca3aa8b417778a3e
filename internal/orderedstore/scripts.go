package orderedstore

import (
	_ "embed"

	"github.com/gomodule/redigo/redis"
)

// The scripts of ordered queues (PushScript and the others below), one per file in lua/, each prefixed with
// lua/common.lua (key names and the helpers several scripts share). Each
// file starts with its ARGV/return header. They take no KEYS: a fetch
// reaches keys whose names it learns inside the script (the ordering keys
// of a shard), so every key is built from the queue prefix (ARGV[1]),
// whose hash tag {QUEUE} keeps all of a queue's keys in one cluster slot.
var (
	//go:embed lua/common.lua
	commonLua string
	//go:embed lua/push.lua
	pushLua string
	//go:embed lua/fetch.lua
	fetchLua string
	//go:embed lua/commit.lua
	commitLua string
	//go:embed lua/beat.lua
	beatLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/morgue.lua
	morgueLua string

	PushScript    = newScript(pushLua)
	FetchScript   = newScript(fetchLua)
	CommitScript  = newScript(commitLua)
	BeatScript    = newScript(beatLua)
	ReleaseScript = newScript(releaseLua)
	MorgueScript  = newScript(morgueLua)
)

func newScript(src string) *redis.Script { return redis.NewScript(0, commonLua+"\n"+src) }
