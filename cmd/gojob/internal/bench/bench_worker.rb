# Loaded by `gojob bench --ruby` into Debian's Ruby Sidekiq: a no-op job, and
# job logging off as Sidekiq's own bin/sidekiqload does, so Ruby is measured
# at its best.
require "sidekiq"

Sidekiq.configure_server do |config|
  Sidekiq.logger.level = Logger::WARN
end

class BenchJob
  include Sidekiq::Worker
  def perform(*)
  end
end
