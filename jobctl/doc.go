// Package jobctl controls running jobs from outside: it cancels a job that
// runs in this process when anyone, in any process, asks (api.Cancel,
// `gojob cancel`, the dashboard's Busy page), and keeps each job's
// progress, message, result and outcome in a hash that Ruby and the CLI
// can read (docs/job-control.md).
//
// A cancel request is the key gojob-cancel:<jid> (kept a day) plus a
// message on the channel gojob-cancel. The channel wakes the process at
// once; the key makes the request durable: the control also checks the keys
// of its running jobs every PollInterval, so a request made while its
// subscription was down, or before the job started, is not lost. The
// same check honours Sidekiq's cancel of an iterable job (7.3+:
// Sidekiq::Client#cancel! sets the field "cancelled" of it-<jid>, which
// api.Cancel sets too), so a job cancelled from Ruby stops here within a
// PollInterval, at no cost per job. The cancelled job's context ends with a *CancelledError as its cause; when
// the handler returns an error the job goes to the dead set as
// Gojob::Cancelled and is not retried.
//
// The control (New) asks its server to cancel a job (sidekiq.Server.CancelRunning)
// and costs the jobs it does not cancel nothing:
//
//	ctl, err := jobctl.New(&jobctl.Config{Pool: pool, Server: srv})
//	srv.Serve(ctl) // a sidekiq.Service: runs for the server's life
package jobctl
