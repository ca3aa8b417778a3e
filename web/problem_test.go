package web

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

func TestProblemNeverQuotesTheError(t *testing.T) {
	cases := map[error]string{
		fmt.Errorf("sidekiq: metrics: %w", redis.Error("ERR unknown command `BITFIELD`, with args beginning with: `stat:m`")): "does not support the BITFIELD command",
		redis.Error("WRONGTYPE Operation against a key holding the wrong kind of value"):                                      "another type",
		errors.New("dial unix /tmp/x.sock: connect: connection refused"):                                                      "could not be reached",
		redis.Error("NOPERM this user has no permissions to run the 'zscan' command"):                                         "ACL",
		errors.New("pq: secret-table-name broke"):                                                                             "could not be read",
	}
	for err, want := range cases {
		got := problem(err)
		if !strings.Contains(got, want) || strings.Contains(got, "ERR") || strings.Contains(got, "secret") {
			t.Errorf("problem(%q) = %q, want a sentence with %q", err, got, want)
		}
	}
}

func TestCompactNum(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999_999: "999,999", 1_000_000: "1.00M", 1_234_567_890: "1.23B", 12_345_678: "12.3M", 999_999_999_999: "999B", -2_500_000: "-2.50M"} {
		if got := compactNum(n); got != want {
			t.Errorf("compactNum(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int]string{1: "1 job", 0: "0 jobs", 1234: "1,234 jobs"} {
		if got := plural(n, "job"); got != want {
			t.Errorf("plural(%d) = %q, want %q", n, got, want)
		}
	}
	if got := plural(2, "match"); got != "2 matches" {
		t.Errorf("plural match: %q", got)
	}
}

func TestStampShowsSideJobTimesLikeEveryOther(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	got := string(stamp(now, "2026-11-26T11:56:59.123456789Z"))
	if !strings.Contains(got, ">3 min ago</time>") || !strings.Contains(got, "2026-11-26 11:56:59 UTC") || strings.Contains(got, ".123") {
		t.Errorf("stamp = %q", got)
	}
	if got := string(stamp(now, "not a time")); got != "not a time" {
		t.Errorf("stamp of text = %q", got)
	}
}
