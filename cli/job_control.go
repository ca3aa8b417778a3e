package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/jobctl"
	"github.com/gojob/gojob/sidekiq/api"
)

// jobControlCommands are cancel and job.
func jobControlCommands() []*ucli.Command {
	return []*ucli.Command{
		{
			Name:      "cancel",
			Usage:     "cancel a job: remove it from its queue, schedule or retry set, or stop it where it runs (it goes to the dead set as Gojob::Cancelled)",
			ArgsUsage: "JID",
			Flags:     []ucli.Flag{newRedisFlag(), newJSONFlag()},
			Before:    oneArg("gojob cancel", "JID"),
			Action:    withAPI(cancelAction),
		},
		{
			Name:      "job",
			Usage:     "show a job wherever it is (queue, schedule, retry, dead, running) with its payload, backtrace and status",
			ArgsUsage: "JID",
			Flags:     []ucli.Flag{newRedisFlag(), newJSONFlag()},
			Before:    oneArg("gojob job", "JID"),
			Action:    withAPI(jobAction),
		},
	}
}

func cancelAction(ctx context.Context, e *adminEnv) error {
	jid := e.c.Args().First()
	loc, err := e.api.Cancel(ctx, jid)
	if errors.Is(err, api.ErrJobNotFound) && loc != nil && loc.Where == "dead" {
		if e.json {
			e.printJSON(map[string]any{"jid": jid, "from": "dead", "requested": true})
		}
		return ucli.Exit(fmt.Sprintf("cancel: job %s is in the dead set already; the request is kept for a day in case it is retried", jid), exitNotFound)
	}
	if errors.Is(err, api.ErrJobNotFound) {
		if e.json {
			e.printJSON(map[string]any{"jid": jid, "from": "", "requested": true})
		}
		return ucli.Exit(fmt.Sprintf("cancel: no job %s in a queue, a set, an in-progress list or a process's work; the request is kept for a day in case it starts", jid), exitNotFound)
	}
	if err != nil {
		return err
	}
	from := cancelledFrom(loc)
	if e.json {
		return e.printJSON(map[string]any{"jid": jid, "from": from, "requested": from == "running" || from == "orphaned"})
	}
	switch from {
	case "running":
		fmt.Fprintf(e.out, "cancel of running job %s requested (%s)\n", jid, loc.Process)
		return nil
	case "orphaned":
		fmt.Fprintf(e.out, "cancel of job %s requested: it is cancelled when it runs again (orphaned by %s)\n", jid, loc.Process)
		return nil
	}
	fmt.Fprintf(e.out, "removed %s from %s\n", jid, from)
	return nil
}

// cancelledFrom names where a cancelled job was: "queue:<name>",
// "schedule", "retry", "running" or "orphaned".
func cancelledFrom(loc *api.Location) string {
	if loc.Where == "queue" {
		return "queue:" + loc.Queue
	}
	return loc.Where
}

// jobView is `gojob job`'s answer.
type jobView struct {
	JID string `json:"jid"`
	// Where is "queue", "schedule", "retry", "dead", "running",
	// "orphaned", or "" when only the status hash is left.
	Where   string     `json:"where"`
	Queue   string     `json:"queue,omitempty"`
	At      *time.Time `json:"at,omitempty"`
	Process string     `json:"process,omitempty"`
	TID     string     `json:"tid,omitempty"`
	// StartedAfter is, for a job running too briefly for its process's
	// work hash to show it, the heartbeat it started after.
	StartedAfter *time.Time      `json:"started_after,omitempty"`
	Payload      json.RawMessage `json:"payload,omitempty"`
	// Class is the class a person reads (an ActiveJob's wrapped class, a
	// mailer's "Mailer#method"); Wrapper the payload's class when it
	// differs; Args the arguments shown (JobRecord.DisplayArgs); JobID an
	// ActiveJob's job_id.
	Class    string          `json:"class,omitempty"`
	Wrapper  string          `json:"wrapper,omitempty"`
	Args     json.RawMessage `json:"display_args,omitempty"`
	JobID    string          `json:"active_job_id,omitempty"`
	Error    string          `json:"error_message,omitempty"`
	ErrClass string          `json:"error_class,omitempty"`
	// Backtrace is error_backtrace decoded (zlib + base64 since Sidekiq 7).
	Backtrace []string       `json:"error_backtrace,omitempty"`
	Status    *jobctl.Status `json:"status,omitempty"`
}

func jobAction(ctx context.Context, e *adminEnv) error {
	jid := e.c.Args().First()
	v, err := findJob(ctx, e.api, jid)
	if err != nil {
		return err
	}
	if v.Status, err = jobctl.ReadStatus(ctx, e.pool, jid); err != nil {
		return err
	}
	if v.Where == "" && v.Status == nil {
		return ucli.Exit(fmt.Sprintf("job: no job %s in a queue, a set, an in-progress list, a process's work or a status hash", jid), exitNotFound)
	}
	if e.json {
		return e.printJSON(v)
	}
	printJobView(e, v)
	return nil
}

// findJob looks for jid (api.Locate); Where is "" when it is nowhere.
func findJob(ctx context.Context, a *api.API, jid string) (*jobView, error) {
	v := &jobView{JID: jid}
	loc, err := a.Locate(ctx, jid)
	if err != nil || loc == nil {
		return v, err
	}
	v.Where, v.Queue, v.Process, v.TID = loc.Where, loc.Queue, loc.Process, loc.TID
	if !loc.At.IsZero() {
		at := loc.At
		v.At = &at
	}
	if !loc.StartedAfter.IsZero() {
		after := loc.StartedAfter
		v.StartedAfter = &after
	}
	v.Payload = json.RawMessage(loc.Raw)
	if !json.Valid(loc.Raw) {
		v.Payload, _ = json.Marshal(string(loc.Raw))
	}
	if job := loc.Job; job != nil {
		v.Class = (&api.JobRecord{Job: job}).DisplayClass()
		if job.Class() != v.Class {
			v.Wrapper = job.Class()
		}
		v.Args = displayArgsJSON(job)
		v.JobID = contract.ActiveJobID(job)
		if m, ok := job.Get("error_message"); ok {
			v.Error, _ = m.Str()
		}
		if c, ok := job.Get("error_class"); ok {
			v.ErrClass, _ = c.Str()
		}
		if bt, err := job.ErrorBacktrace(); err == nil {
			v.Backtrace = bt
		}
	}
	return v, nil
}

func printJobView(e *adminEnv, v *jobView) {
	w := e.out
	where := v.Where
	switch v.Where {
	case "":
		where = "gone (status kept)"
	case "queue":
		where = "queue " + v.Queue
	case "running":
		where = "running on " + v.Process
		if v.TID != "" {
			where += " (thread " + v.TID + ")"
		}
		if v.Queue != "" {
			where += ", from queue " + v.Queue
		}
	case "orphaned":
		where = "orphaned in " + v.Queue + "'s in-progress list of the gone process " + v.Process + " (recovery pushes it back)"
	}
	fmt.Fprintf(w, "jid:      %s\nwhere:    %s\n", v.JID, where)
	if v.Class != "" {
		if v.Wrapper != "" {
			fmt.Fprintf(w, "class:    %s (%s)\n", v.Class, v.Wrapper)
		} else {
			fmt.Fprintf(w, "class:    %s\n", v.Class)
		}
	}
	if len(v.Args) > 0 {
		fmt.Fprintf(w, "args:     %s\n", v.Args)
	}
	if v.JobID != "" {
		fmt.Fprintf(w, "job_id:   %s\n", v.JobID)
	}
	switch {
	case v.Where == "running" && v.At != nil:
		fmt.Fprintf(w, "since:    %s (%s)\n", textTime(*v.At), time.Since(*v.At).Round(time.Second))
	case v.Where == "running" && v.StartedAfter != nil:
		fmt.Fprintf(w, "since:    after %s (its process's last heartbeat)\n", textTime(*v.StartedAfter))
	case v.At != nil:
		label := map[string]string{"schedule": "runs at", "retry": "retry at", "dead": "died at"}[v.Where]
		if label == "" {
			label = "at"
		}
		fmt.Fprintf(w, "%-9s %s\n", label+":", textTime(*v.At))
	}
	if v.Error != "" {
		fmt.Fprintf(w, "error:    %s: %s\n", v.ErrClass, v.Error)
	}
	if st := v.Status; st != nil {
		if st.Progress != nil {
			fmt.Fprintf(w, "progress: %.0f%% %s\n", *st.Progress*100, st.Message)
		} else if st.Message != "" {
			fmt.Fprintf(w, "message:  %s\n", st.Message)
		}
		if len(st.Result) > 0 {
			fmt.Fprintf(w, "result:   %s\n", st.Result)
		}
		if st.Outcome != "" {
			fmt.Fprintf(w, "outcome:  %s\n", st.Outcome)
		}
	}
	if len(v.Payload) > 0 {
		fmt.Fprintf(w, "payload:  %s\n", v.Payload)
	}
	if len(v.Backtrace) > 0 {
		fmt.Fprintln(w, "backtrace:")
		for _, l := range v.Backtrace {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
}
