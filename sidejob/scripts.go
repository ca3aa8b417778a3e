package sidejob

import (
	_ "embed"

	"github.com/gomodule/redigo/redis"
)

var (
	//go:embed lua/set_status.lua
	setStatusLua    string
	setStatusScript = redis.NewScript(2, setStatusLua)
)
