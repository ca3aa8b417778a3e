package web

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strings"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/sidekiq/api"
)

var unknownCommand = regexp.MustCompile("(?i)unknown command [`'\"]?([A-Za-z.|]+)")

// problem is the sentence a page shows for err. The error itself (which
// may quote a Redis reply, a key or a database URL) goes to the log only.
func problem(err error) string {
	msg := err.Error()
	var re redis.Error
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "The request was cancelled before the page was read."
	case errors.Is(err, context.DeadlineExceeded):
		return "Redis did not answer in time; try again in a moment (the details are in the dashboard's log)."
	case unknownCommand.MatchString(msg):
		cmd := strings.ToUpper(unknownCommand.FindStringSubmatch(msg)[1])
		return "This Redis server does not support the " + cmd + " command this page needs (a Redis older than 6.2, or a server that only imitates Redis). " +
			"The rest of the dashboard works; the details are in the dashboard's log."
	case strings.Contains(msg, "WRONGTYPE"):
		return "A Redis key this page reads holds another type than Sidekiq writes there; something else uses the key. The details are in the dashboard's log."
	case strings.Contains(msg, "NOPERM") || strings.Contains(msg, "NOAUTH"):
		return "Redis refused this page's commands for the dashboard's user (ACL or password). The details are in the dashboard's log."
	case errors.Is(err, api.ErrUnparsableJob):
		return "A job this page reads is not valid JSON; it is left as it is. The details are in the dashboard's log."
	case errors.As(err, &ne) || strings.Contains(msg, "connection refused") || strings.Contains(msg, "EOF"):
		return "Redis could not be reached; the page will work again once it is back (the details are in the dashboard's log)."
	case errors.As(err, &re):
		return "Redis refused a command of this page; the details are in the dashboard's log."
	}
	return "The page could not be read; the details are in the dashboard's log."
}
