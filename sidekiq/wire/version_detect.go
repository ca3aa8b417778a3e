package wire

import (
	"context"
	"fmt"

	"github.com/gomodule/redigo/redis"
)

// DetectVersion reads the `version` of the live processes registered in
// Redis and returns the oldest, so that gojob writes a format every reader
// understands. Processes that report no version are 6.x (the key appeared in
// 7.0.2), so any of them makes the answer Version6. With no live process it
// returns Version6. found lists what each process reported.
func DetectVersion(ctx context.Context, pool *redis.Pool) (v Version, found []string, err error) {
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return Version{}, nil, fmt.Errorf("sidekiq: detect version: %w", err)
	}
	defer conn.Close()
	ids, err := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", KeyProcesses))
	if err != nil {
		return Version{}, nil, fmt.Errorf("sidekiq: detect version: %w", err)
	}
	for _, id := range ids {
		conn.Send("HGET", id, "info")
	}
	if err := conn.Flush(); err != nil {
		return Version{}, nil, fmt.Errorf("sidekiq: detect version: %w", err)
	}
	var oldest Version
	for _, id := range ids {
		info, err := redis.Bytes(conn.Receive())
		if err != nil {
			continue // expired process: not live
		}
		job, err := ParseJob(info)
		if err != nil {
			continue
		}
		s := job.str("version")
		pv := Version6
		if s != "" {
			if p, err := ParseVersion(s); err == nil {
				pv = p
			}
		}
		found = append(found, id+"="+pv.String())
		if oldest.IsZero() || !pv.AtLeast(oldest.Major, oldest.Minor, oldest.Patch) {
			oldest = pv
		}
	}
	if oldest.IsZero() {
		oldest = Version6
	}
	return oldest, found, nil
}
