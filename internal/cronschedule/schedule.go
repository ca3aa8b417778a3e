// Package cronschedule parses cron lines as sidekiq-cron reads them
// (through the fugit gem), for package cron and its compatibility tests.
package cronschedule

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	rcron "github.com/robfig/cron/v3"
)

// Schedule is a parsed cron line as sidekiq-cron accepts it (through the
// fugit gem): 5 fields (minute first, at second 0) or 6 (second first), a
// descriptor (@hourly, @daily, @midnight, @noon, @weekly, @monthly,
// @yearly, @annually), and an optional trailing time zone, a name such as
// Europe/Berlin or an offset such as +0100. Without a zone it is evaluated
// in the scheduler's default location (fugit: the process's local zone).
//
// Natural language: the subset of fugit's that natural.go reads.
//
// Not supported (an error at parse, never a silently different schedule):
// the rest of fugit's natural language ("every day at five"), L and
// negative days of the month, dow#n, dow%n and the & suffix.
type Schedule struct {
	expr  string
	sched rcron.Schedule
	loc   *time.Location // nil: the caller's default
}

var parser = rcron.NewParser(rcron.SecondOptional | rcron.Minute | rcron.Hour | rcron.Dom | rcron.Month | rcron.Dow | rcron.Descriptor)

var offsetRE = regexp.MustCompile(`^([+-])(\d\d):?(\d\d)$`)

// Parse parses a cron line.
func Parse(expr string) (*Schedule, error) {
	s := &Schedule{expr: expr}
	fields := strings.Fields(expr)
	if len(fields) == 0 {
		return nil, fmt.Errorf("cron: empty schedule")
	}
	if len(fields) > 1 {
		last := fields[len(fields)-1]
		if loc, ok, err := parseZone(last); err != nil {
			return nil, fmt.Errorf("cron %q: %w", expr, err)
		} else if ok {
			s.loc = loc
			fields = fields[:len(fields)-1]
		}
	}
	spec := strings.Join(fields, " ")
	if strings.HasPrefix(spec, "@") {
		switch strings.ToLower(spec) {
		case "@noon":
			spec = "0 12 * * *"
		case "@reboot":
			return nil, fmt.Errorf("cron %q: @reboot is not a periodic schedule", expr)
		case "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly":
			spec = strings.ToLower(spec)
		default:
			return nil, fmt.Errorf("cron %q: unknown descriptor", expr)
		}
		fields = strings.Fields(spec)
	}
	if strings.EqualFold(fields[0], "every") {
		line, ok, err := naturalToCron(spec)
		if err != nil {
			return nil, fmt.Errorf("cron %q: %w", expr, err)
		}
		if !ok {
			return nil, fmt.Errorf("cron %q: natural language gojob does not read (it reads \"every 5 minutes\", \"every weekday at 7:30\" and the like; docs/cron.md)", expr)
		}
		spec = line
		fields = strings.Fields(spec)
	}
	if len(fields) == 5 || len(fields) == 6 {
		for _, f := range fields {
			if strings.ContainsAny(f, "L#%&") || strings.HasPrefix(f, "-") {
				return nil, fmt.Errorf("cron %q: %q uses fugit syntax gojob does not support (L, negative days, #, %%, &)", expr, f)
			}
		}
		// fugit reads day of week 7 as Sunday.
		dow := len(fields) - 1
		items := strings.Split(fields[dow], ",")
		for i, it := range items {
			if it == "7" {
				items[i] = "0"
			}
		}
		fields[dow] = strings.Join(items, ",")
		spec = strings.Join(fields, " ")
	} else if !strings.HasPrefix(spec, "@") {
		return nil, fmt.Errorf("cron %q: want 5 or 6 fields, a descriptor, or natural language gojob reads (\"every 5 minutes\", \"every weekday at 7:30\"; docs/cron.md)", expr)
	}
	sched, err := parser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %w", expr, err)
	}
	s.sched = sched
	return s, nil
}

// parseZone reads a trailing time zone: a zone name, UTC/Z, or an offset.
func parseZone(f string) (*time.Location, bool, error) {
	if m := offsetRE.FindStringSubmatch(f); m != nil {
		var h, mm int
		fmt.Sscanf(m[2], "%d", &h)
		fmt.Sscanf(m[3], "%d", &mm)
		off := h*3600 + mm*60
		if m[1] == "-" {
			off = -off
		}
		return time.FixedZone(f, off), true, nil
	}
	switch f {
	case "UTC", "Z", "GMT", "Etc/UTC":
		return time.UTC, true, nil
	}
	if !strings.Contains(f, "/") {
		return nil, false, nil
	}
	loc, err := time.LoadLocation(f)
	if err != nil {
		return nil, false, fmt.Errorf("unknown time zone %q", f)
	}
	return loc, true, nil
}

// String returns the line as given.
func (s *Schedule) String() string { return s.expr }

// Next returns the first tick after t.
func (s *Schedule) Next(t time.Time, def *time.Location) time.Time {
	return s.sched.Next(t.In(s.location(def)))
}

func (s *Schedule) location(def *time.Location) *time.Location {
	if s.loc != nil {
		return s.loc
	}
	if def != nil {
		return def
	}
	return time.Local
}

// Previous returns the latest tick fugit's previous_time(now) would give
// (the greatest matching second at or before now−1 s, whole seconds), if
// it is no older than within; ok is false when there is none that recent.
func (s *Schedule) Previous(now time.Time, within time.Duration, def *time.Location) (time.Time, bool) {
	bound := now.Add(-time.Second).Truncate(time.Second)
	from := now.Truncate(time.Second).Add(-within - time.Second)
	var last time.Time
	for t := s.Next(from, def); !t.After(bound); t = s.Next(t, def) {
		last = t
	}
	return last, !last.IsZero()
}
