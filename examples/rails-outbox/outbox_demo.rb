# frozen_string_literal: true

# Writes COUNT outbox rows with GojobOutbox in transactions of BATCH rows,
# committing every other transaction and rolling back the others, and
# prints the jids of the committed ones, one a line. DATABASE_URL, TABLE
# (default durable_jobs), QUEUE (default default), CLASS (default
# OutboxJob). Used by gojob's tests with Debian's ruby-sequel and ruby-pg.
require "sequel"
require_relative "gojob_outbox"

db = Sequel.connect(ENV.fetch("DATABASE_URL"))
table = Sequel[:public][ENV.fetch("TABLE", "durable_jobs").to_sym]
count = Integer(ENV.fetch("COUNT", "10"))
batch = Integer(ENV.fetch("BATCH", "10"))
committed = []
(count / batch).times do |t|
  jids = []
  db.transaction(rollback: t.odd? ? :always : nil) do
    batch.times do |i|
      jids << GojobOutbox.enqueue(db, ENV.fetch("CLASS", "OutboxJob"), "ruby", t, i,
        queue: ENV.fetch("QUEUE", "default"), table: table)
    end
  end
  committed.concat(jids) if t.even?
end
puts committed
