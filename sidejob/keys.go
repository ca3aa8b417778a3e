package sidejob

import (
	"strconv"
	"time"

	"github.com/gojob/gojob/internal/sidejobwire"
)

// rateKey returns the run counter of a job for the minute of t (unix seconds
// / 60, integer division).
func rateKey(id int64, t time.Time) string {
	return sidejobwire.JobKey(id) + ":rate:" + strconv.FormatInt(t.Unix()/60, 10)
}
