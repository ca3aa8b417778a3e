package cronschedule

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The part of fugit's natural language (Fugit::Nat, which sidekiq-cron
// falls back to when a line is not a cron) that gojob reads, checked tick
// for tick against fugit 1.5.2 (compat_test):
//
//	every [N] second(s)|minute(s)|hour(s)|day(s)
//	every day|weekday|monday…sunday [and …] [at TIME]
//
// TIME is H, H:MM (24-hour), Ham/Hpm (12pm is noon), noon or midnight.
// Forms fugit versions read differently (12am, H:MMam/pm) and anything else
// are refused, never guessed.

var (
	natEvery = regexp.MustCompile(`^every(?: (\d+))? (second|minute|hour|day)s?$`)
	natDays  = regexp.MustCompile(`^every ([a-z, ]+?)(?: at ([0-9:apm]+|noon|midnight))?$`)
	natTime  = regexp.MustCompile(`^(\d{1,2})(?::(\d{2}))?(am|pm)?$`)
)

var dayNumbers = map[string]string{
	"sunday": "0", "monday": "1", "tuesday": "2", "wednesday": "3", "thursday": "4", "friday": "5", "saturday": "6",
	"sun": "0", "mon": "1", "tue": "2", "wed": "3", "thu": "4", "fri": "5", "sat": "6",
}

// naturalToCron translates a natural-language line (without its zone) to a
// cron line; ok is false for a line it does not read.
func naturalToCron(s string) (string, bool, error) {
	s = strings.Join(strings.Fields(strings.ToLower(s)), " ")
	if !strings.HasPrefix(s, "every ") && s != "every" {
		return "", false, nil
	}
	if m := natEvery.FindStringSubmatch(s); m != nil {
		n := 1
		if m[1] != "" {
			n, _ = strconv.Atoi(m[1])
		}
		if n < 1 {
			return "", true, fmt.Errorf("every 0 %ss", m[2])
		}
		step := "*"
		if n > 1 {
			step = "*/" + strconv.Itoa(n)
		}
		switch m[2] {
		case "second":
			return step + " * * * * *", true, nil
		case "minute":
			return step + " * * * *", true, nil
		case "hour":
			return "0 " + step + " * * *", true, nil
		default:
			return "0 0 " + step + " * *", true, nil
		}
	}
	m := natDays.FindStringSubmatch(s)
	if m == nil {
		return "", false, nil
	}
	dow := ""
	switch m[1] {
	case "day":
		dow = "*"
	case "weekday":
		dow = "1,2,3,4,5"
	default:
		var days []string
		for _, d := range strings.FieldsFunc(m[1], func(r rune) bool { return r == ',' || r == ' ' }) {
			if d == "and" {
				continue
			}
			n, ok := dayNumbers[d]
			if !ok {
				return "", false, nil
			}
			days = append(days, n)
		}
		if len(days) == 0 {
			return "", false, nil
		}
		dow = strings.Join(days, ",")
	}
	hour, minute := 0, 0
	switch at := m[2]; at {
	case "", "midnight":
	case "noon":
		hour = 12
	default:
		t := natTime.FindStringSubmatch(at)
		if t == nil {
			return "", false, nil
		}
		hour, _ = strconv.Atoi(t[1])
		if t[2] != "" {
			minute, _ = strconv.Atoi(t[2])
		}
		if t[2] != "" && t[3] != "" {
			// fugit 1.5.2 drops the pm of 11:45pm (reads 11:45): refuse.
			return "", true, fmt.Errorf("%q is read differently by fugit versions; write it in 24-hour form (23:45)", at)
		}
		switch t[3] {
		case "am", "pm":
			if hour == 12 && t[3] == "am" {
				// fugit 1.5.2 reads 12am as noon; other versions as
				// midnight: refuse rather than pick one.
				return "", true, fmt.Errorf("%q is read differently by fugit versions; write 0:00 or midnight", at)
			}
			if hour < 1 || hour > 12 {
				return "", true, fmt.Errorf("bad time %q", at)
			}
			if t[3] == "pm" && hour != 12 {
				hour += 12
			}
		}
		if hour > 23 || minute > 59 {
			return "", true, fmt.Errorf("bad time %q", at)
		}
	}
	return fmt.Sprintf("%d %d * * %s", minute, hour, dow), true, nil
}
