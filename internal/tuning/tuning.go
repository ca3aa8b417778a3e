// Package tuning holds the defaults of sidekiq.ServerConfig's tuning
// fields, which the command line shows as the defaults of its flags.
package tuning

import "time"

// FetchPipeline is how many BRPOPs one fetch connection carries at once
// unless ServerConfig.FetchPipeline says otherwise.
const FetchPipeline = 8

// FetchAhead is how many jobs a busy slot of the reliable fetch holds
// fetched ahead at most unless ServerConfig.FetchAhead says otherwise.
const FetchAhead = 16

// CancelGrace is how long a handler cancelled for a missed deadline has
// to return before it is left behind and its slot freed, unless
// ServerConfig.CancelGrace says otherwise.
const CancelGrace = 5 * time.Second
