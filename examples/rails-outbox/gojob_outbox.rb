# frozen_string_literal: true

require "json"
require "securerandom"

# GojobOutbox enqueues a Sidekiq job in the caller's database transaction:
# the job's durable row (the table of Amigo::DurableJob, which gojob
# shares) is written as a row "to push". When the transaction commits,
# a gojob relay (every `gojob work --durable`, or `gojob durable relay`)
# pushes the job to Redis once; when it rolls back, the job never existed.
# See docs/durable.md, "Outbox", for the row and the exactly-once argument.
#
#   DB.transaction do
#     order_id = DB[:orders].insert(total: 42)
#     GojobOutbox.enqueue(DB, "ChargeOrder", order_id, queue: "billing")
#   end
#
# With ActiveRecord, run the same INSERT and NOTIFY through
# ActiveRecord::Base.connection inside ActiveRecord::Base.transaction
# (GojobOutbox.row returns the values to insert).
module GojobOutbox
  # locked_by of a row whose job is still to be pushed.
  MARK = "gojob:outbox"
  # The channel gojob relays listen on; a NOTIFY is delivered at commit.
  CHANNEL = "gojob_durable_outbox"
  # Amigo's default heartbeat_extension.
  DEFAULT_EXTENSION = 5 * 60

  module_function

  # row returns the durable_jobs columns of a job to push: the Sidekiq item
  # as Sidekiq's client normalizes it (lib/sidekiq/client.rb,
  # normalize_item); created_at and enqueued_at are set when gojob pushes.
  def row(klass, args, queue: "default", at: nil, extension: DEFAULT_EXTENSION, jid: SecureRandom.hex(12))
    item = {"retry" => true, "queue" => queue, "class" => klass.to_s, "args" => args, "jid" => jid}
    item["at"] = at.to_f if at
    # The request's trace, as opentelemetry-instrumentation-sidekiq would
    # inject it at a push: gojob's spans continue it (docs/tracing.md).
    OpenTelemetry.propagation.inject(item) if defined?(OpenTelemetry) && OpenTelemetry.respond_to?(:propagation)
    now = Time.now
    run_at = at ? Time.at(at.to_f) : now
    {
      job_id: jid, job_class: klass.to_s, job_item_json: JSON.generate(item), queue: queue,
      inserted_at: now, assume_dead_at: run_at + extension, locked_by: MARK,
    }
  end

  # enqueue writes the row in db's current transaction (a Sequel::Database;
  # call it inside db.transaction) and returns the jid.
  def enqueue(db, klass, *args, table: Sequel[:public][:durable_jobs], **opts)
    r = row(klass, args, **opts)
    db[table].insert(r)
    db.run("SELECT pg_notify('#{CHANNEL}', '')") if db.database_type == :postgres
    r[:job_id]
  end
end
