package sidejob

import (
	"context"
	"fmt"
	"strings"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// Publish sends message to channel as SideJob.publish does (docs/sidejob.md#channels):
//
//  1. a Redis PUBLISH of its JSON to the exact channel;
//  2. a reliable delivery walk, with "channel": channel added to the log
//     context: for the channel and each ancestor (ascend), every job listed
//     in channel:<level> whose inports subscribe to exactly that level gets
//     the message written to those ports (which runs the job, as any input
//     write does). Jobs that are gone or no longer subscribed are removed
//     from the set (lazy cleanup).
//
// As in Ruby, a port subscribed to both /a and /a/b receives a message
// published to /a/b twice. message is converted with rubyjson.FromGo.
func (c *Client) Publish(ctx context.Context, channel string, message any) error {
	v, err := rubyjson.FromGo(message)
	if err != nil {
		return fmt.Errorf("sidejob: publish to %s: %w", channel, err)
	}
	if _, err := c.do(ctx, "PUBLISH", channel, v.Encode()); err != nil {
		return fmt.Errorf("sidejob: publish to %s: %w", channel, err)
	}
	wctx := withContext(ctx, "channel", channel)
	subs := map[string]*subscriber{}
	for _, level := range ascend(channel) {
		ids, err := redis.Strings(c.do(ctx, "SMEMBERS", sidejobwire.ChannelKey(level)))
		if err != nil {
			return fmt.Errorf("sidejob: publish to %s: %w", channel, err)
		}
		for _, raw := range ids {
			s, ok := subs[raw]
			if !ok {
				if s, err = c.subscriber(ctx, raw); err != nil {
					return fmt.Errorf("sidejob: publish to %s: %w", channel, err)
				}
				subs[raw] = s
			}
			var ports []string
			if s != nil {
				ports = s.ports[level]
			}
			if len(ports) == 0 {
				if _, err := c.do(ctx, "SREM", sidejobwire.ChannelKey(level), raw); err != nil {
					return fmt.Errorf("sidejob: publish to %s: %w", channel, err)
				}
				continue
			}
			for _, name := range ports {
				p, err := s.job.Input(wctx, name)
				if err != nil {
					return fmt.Errorf("sidejob: publish to %s: %w", channel, err)
				}
				if err := p.Write(wctx, v); err != nil {
					return fmt.Errorf("sidejob: publish to %s: %w", channel, err)
				}
			}
		}
	}
	return nil
}

// subscriber is a job seen during one publish with its channel → inports
// map.
type subscriber struct {
	job   *Job
	ports map[string][]string
}

// subscriber loads a channel member; nil when the job does not exist.
func (c *Client) subscriber(ctx context.Context, raw string) (*subscriber, error) {
	id, ok := rubyToI(raw)
	if !ok {
		return nil, nil
	}
	j := c.job(id)
	replies, err := c.pipeline(ctx,
		command("SISMEMBER", sidejobwire.KeyJobs, id),
		command("HGETALL", j.key("inports:channels")))
	if err != nil {
		return nil, err
	}
	if exists, _ := redis.Bool(replies[0], nil); !exists {
		return nil, nil
	}
	kv, err := redis.Strings(replies[1], nil)
	if err != nil {
		return nil, err
	}
	s := &subscriber{job: j, ports: map[string][]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		chans, err := sidejobwire.DecodeChannels(kv[i+1])
		if err != nil {
			return nil, fmt.Errorf("job %d port %s channels: %w", id, kv[i], err)
		}
		for _, ch := range chans {
			s.ports[ch] = append(s.ports[ch], kv[i])
		}
	}
	return s, nil
}

// ascend returns channel and its ancestors as Ruby's Pathname#ascend yields
// them: "/a/b" → "/a/b", "/a", "/"; "a/b" → "a/b", "a"; a trailing slash is
// kept only on the first element ("/a/b/" → "/a/b/", "/a", "/"); ".." is not
// resolved.
func ascend(channel string) []string {
	out := []string{channel}
	path := channel
	for {
		prefix, _, ok := chopBasename(path)
		if !ok {
			break
		}
		path = prefix
		if path == "" {
			break
		}
		out = append(out, delTrailingSeparator(path))
	}
	return out
}

// chopBasename splits path into the part before its last component and
// that component (Pathname#chop_basename); ok is false when the basename is
// empty or "/".
func chopBasename(path string) (prefix, base string, ok bool) {
	trimmed := strings.TrimRight(path, "/")
	if trimmed == "" {
		return "", "", false
	}
	i := strings.LastIndex(trimmed, "/")
	return path[:i+1], trimmed[i+1:], true
}

// delTrailingSeparator is Pathname#del_trailing_separator.
func delTrailingSeparator(path string) string {
	if prefix, base, ok := chopBasename(path); ok {
		return prefix + base
	}
	if strings.HasSuffix(path, "/") {
		return "/"
	}
	return path
}
