package wire

import "errors"

// ErrInvalidJob is what the errors of a refused push match (errors.Is): a
// payload that Sidekiq's client refuses to push, as its JobUtil#validate
// does (a class name, args an array, a queue name, tags an array,
// retry_for a relative number of seconds).
var ErrInvalidJob = errors.New("sidekiq: invalid job")
