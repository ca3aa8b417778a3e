// Package sidejob runs SideJob jobs in Go, sharing Redis with the Ruby
// sidejob gem 4.1.0: a job created in Ruby runs in Go and the other way
// round, and nothing in Redis tells the two apart.
//
// SideJob builds long-lived, flow-based jobs on Sidekiq: each job has a
// status, input and output ports (Redis lists of JSON envelopes, with
// optional defaults), channels (pub/sub with reliable delivery into
// subscribed inports), child jobs, state and a log. Writing to an inport
// runs its job; writing to an outport runs the job's parent; a job runs
// from the beginning each time and suspends until more input arrives.
//
// # Layout
//
//   - Client (client.go, queue.go): the SideJob module: Queue, Find (by
//     alias or id), Publish (channels.go), Log (log.go); the reaper
//     (reaper.go) queues again the jobs a dead process left running
//     (Registry.ReapInterval).
//   - Job (job.go, status.go, run.go, family.go, state.go): Info (status,
//     worker, aliases, timestamps), Run, Terminate, Delete, AddAlias,
//     Children (by name) and Parent, state (State, Set); child jobs are
//     created with Job.Queue.
//   - Port (ports.go, port_defs.go, data.go): Read, Write, Each,
//     SetDefault, envelopes (Data). Ports are declared as the gem's JSON
//     port hashes, in a worker's config and in QueueOpts.
//   - The log context (context.go, SideJob.context: the job id of a run,
//     the channel of a publish) and port groups (group.go) are carried by
//     context.Context.
//   - Worker, Starter, Stopper, Suspend, ForInputs (worker.go), Registry and
//     ServerSetup (setup.go): the server middleware (runtime.go) executes
//     jobs as a sidekiq.Handler.
//
// # Serving workers
//
//	reg := &sidejob.Registry{}
//	reg.Register("Sum", sumWorker{}, `{"inports":{"in":{}},"outports":{"sum":{}}}`)
//	os.Exit(cli.Run(ctx, os.Args, os.Stdout, os.Stderr,
//		cli.WithServerSetup(sidejob.ServerSetup("core", reg))))
//
// then `mybinary work -q core`. SideJob requires one queue per process, and
// ServerSetup replaces the queue's whole registry, so Ruby and Go processes
// must not serve the same queue.
//
// # Redis data (4.1.0 layout)
//
// jobs (set of ids), jobs:last_id (INCR), jobs:aliases (hash); per job
// job:<id>:worker ({"queue","class","args"}), :status (plain word),
// :created_at, :created_by, :ran_at (UTC ISO-8601 with 9 fractional
// digits), :aliases, :parent, :children, :state (field → JSON), :inports
// and :outports (name sets, "*" allowed), :in:<port> and :out:<port>
// (lists of {"data","context","options"} envelopes), :inports:default,
// :outports:default, :inports:channels, :outports:channels, :lock, :lock:worker
// and :rate:<minute>; channel:<channel> (set of ids); workers:<queue> (class
// → config JSON). Sidekiq items are {"retry":false,"queue","jid":<integer
// id>,"class","args"} pushed through sidekiq.Client. All JSON is written
// with sidekiq/rubyjson, byte for byte as Ruby writes it. Pub/sub channels:
// /sidejob/job/<id> ({"status"} and {"deleted":true}), /sidejob/log,
// /sidejob/workers/<queue>.
//
// The deviations from the gem (bug fixes) are listed in DEVIATIONS.md.
package sidejob
