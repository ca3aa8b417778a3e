package web

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/cron"
	"github.com/gojob/gojob/durable"
	"github.com/gojob/gojob/sidejob"
	"github.com/gojob/gojob/sidekiq/api"
)

// Config configures the dashboard.
type Config struct {
	// Pool is the Redis pool shared with Sidekiq. Required.
	Pool *redis.Pool
	// API reads and changes the jobs. Default api.New on Pool.
	API *api.API
	// SideJob reads SideJob jobs. Default sidejob.NewClient on Pool.
	SideJob *sidejob.Client
	// Cron, when set, adds the Cron page (sidekiq-cron's jobs).
	Cron *cron.Store
	// Durable, when set, adds the Durable page (its rows and the jobs its
	// reconciler found lost).
	Durable *durable.Durable
	// ReadOnly hides every button and refuses every POST.
	ReadOnly bool
	// BasicAuth is "user:password": every request must carry it (HTTP basic
	// authentication). Empty: no basic authentication.
	BasicAuth string
	// Token, when set, must come as "Authorization: Bearer <token>", the
	// gojob_token cookie, or once as ?token=<token> (which sets the
	// cookie). With BasicAuth too, either one is enough.
	Token string
	// AllowHosts are the host names (or IP addresses) besides the loopback
	// ones that requests may name in their Host and Origin headers: the
	// listen address and the names a proxy forwards. "*" allows any host
	// (only behind a proxy that checks it). Other hosts get 403.
	AllowHosts []string
	// BasePath is the path prefix the dashboard is mounted under behind a
	// proxy ("/sidekiq"): every link, form, asset and redirect starts with
	// it. Requests may come with or without it. Empty: the root.
	BasePath string
	// Clock is the time source. Default the system clock.
	Clock clock.Clock
	// Logger logs failed requests. Default zerolog.Nop().
	Logger zerolog.Logger
}

func (c *Config) validate() error {
	if c.Pool == nil {
		return errors.New("web: Config.Pool is required")
	}
	if c.BasePath != "" && (!strings.HasPrefix(c.BasePath, "/") || strings.HasSuffix(c.BasePath, "/") ||
		strings.ContainsAny(c.BasePath, "?#\"\\ ")) {
		return fmt.Errorf("web: Config.BasePath %q must start with / and not end with one, e.g. /sidekiq", c.BasePath)
	}
	if c.BasicAuth != "" {
		if u, p, ok := strings.Cut(c.BasicAuth, ":"); !ok || u == "" || p == "" {
			return errors.New("web: Config.BasicAuth must be user:password")
		}
	}
	return nil
}
