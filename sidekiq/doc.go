// Package sidekiq is gojob's runtime: a Client that pushes jobs and a Server
// that fetches, runs, retries and buries them exactly as Ruby Sidekiq 6.4,
// 7.x and 8.x do, so that a Go process shares one Redis with Ruby
// processes, Ruby clients and the Sidekiq Web UI.
//
//   - Client: Push, PushBulk, scheduled pushes, client middleware.
//   - Server: Handle a class with a Handler, Use server middleware, Start
//     and Stop; failures follow the target version's retry algorithm, with
//     Discard, Kill and RetryIn for a handler's own decisions, and Snooze
//     to run again later without a failure (docs/job-control.md).
//
// The layers below and beside it:
//
//   - sidekiq/wire: the payload (wire.Job) and the Sidekiq versions;
//   - sidekiq/activejob: ActiveJob payloads and argument types;
//   - sidekiq/api: the admin API (Ruby's Sidekiq::API);
//   - sidekiq/typed: handlers and pushes whose arguments are Go types;
//   - sidekiq/sidekiqtest: fake and inline modes and a drain for tests
//     (Ruby's Sidekiq::Testing);
//   - sidekiq/rubyjson: JSON exactly as Ruby generates it.
//
// docs/go.md puts a Ruby job and its Go port side by side.
//
// The wire facts the code follows, with their Ruby sources, are in
// docs/sidekiq-wire.md.
package sidekiq
