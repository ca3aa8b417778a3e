package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gomodule/redigo/redis"
	ucli "github.com/urfave/cli/v2"
)

func sjPublish(ctx context.Context, e *sjEnv) error {
	if e.c.Args().Len() != 2 {
		return ucli.Exit("publish: CHANNEL and VALUE are required", exitUsage)
	}
	ch := e.c.Args().Get(0)
	if err := e.sj.Publish(ctx, ch, jsonArg(e.c.Args().Get(1))); err != nil {
		return err
	}
	if e.json {
		return e.printJSON(map[string]any{"channel": ch})
	}
	fmt.Fprintf(e.out, "published to %s\n", ch)
	return nil
}

func sjLog(ctx context.Context, e *sjEnv) error {
	if !e.c.Bool("follow") {
		msg := strings.Join(e.c.Args().Slice(), " ")
		if msg == "" {
			return ucli.Exit("log: MESSAGE or --follow is required", exitUsage)
		}
		return e.sj.Log(ctx, msg)
	}
	// A connection of its own: a subscribed connection cannot go back to
	// the pool.
	pool, err := sidekiq.NewPool(e.c.String("redis"))
	if err != nil {
		return err
	}
	conn, err := pool.DialContext(ctx)
	if err != nil {
		return err
	}
	psc := redis.PubSubConn{Conn: conn}
	if err := psc.Subscribe(sidejobwire.LogChannel); err != nil {
		conn.Close()
		return err
	}
	go func() {
		<-ctx.Done()
		conn.Close()
	}()
	for {
		switch v := psc.Receive().(type) {
		case redis.Message:
			if e.json {
				fmt.Fprintln(e.out, string(v.Data))
				continue
			}
			fmt.Fprintln(e.out, formatLogEntry(v.Data))
		case redis.Subscription:
			if v.Kind == "unsubscribe" && v.Count == 0 {
				return nil
			}
		case error:
			if ctx.Err() != nil {
				return nil
			}
			return v
		}
	}
}

// formatLogEntry renders a log entry on one line: time, context, then the
// event.
func formatLogEntry(data []byte) string {
	m, err := rubyjson.ParseObject(data)
	if err != nil {
		return string(data)
	}
	var ts string
	var parts []string
	for i := 0; i < m.Len(); i++ {
		k, v := m.At(i)
		switch k {
		case "timestamp":
			ts, _ = v.Str()
		case "read", "write":
			items, _ := v.Array()
			for _, it := range items {
				im, ok := it.Map()
				if !ok {
					continue
				}
				job, _ := im.Get("job")
				port := ""
				for _, pk := range []string{"inport", "outport"} {
					if pv, ok := im.Get(pk); ok {
						s, _ := pv.Str()
						port = strings.TrimSuffix(pk, "port") + ":" + s
					}
				}
				d, _ := im.Get("data")
				parts = append(parts, fmt.Sprintf("%s job %s %s %s", k, job.Encode(), port, d.Encode()))
			}
		default:
			if s, ok := v.Str(); ok {
				parts = append(parts, k+"="+s)
			} else {
				parts = append(parts, k+"="+string(v.Encode()))
			}
		}
	}
	if t, err := sidejobwire.ParseTimestamp(ts); err == nil {
		ts = t.UTC().Format("15:04:05.000Z")
	}
	return strings.TrimSpace(ts + " " + strings.Join(parts, " "))
}
