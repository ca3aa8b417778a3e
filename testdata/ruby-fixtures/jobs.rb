# Job classes for the 6.4.1 fixture capture (see capture.sh).
#
# Loaded twice: by the Sidekiq CLI (`sidekiq -r ./jobs.rb ...`), which runs
# the jobs, and by capture.rb, which enqueues them as a client. Everything
# talks to $REDIS_URL, the private redis-server that capture.sh started.
#
# Markers: jobs and death handlers RPUSH the jid onto small "capture:*" lists
# so capture.rb can wait for an outcome instead of sleeping.
require "json"
require "sidekiq"
require "sidekiq/api"

# redis-rb 4.8 warns about its 5.0 return types on every SADD; not our concern.
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

redis_url = ENV.fetch("REDIS_URL")
Sidekiq.configure_client { |c| c.redis = {url: redis_url} }
Sidekiq.configure_server do |c|
  c.redis = {url: redis_url}
  # Poll the retry/schedule sets every 0.5-1.5 s (default: 5 s scaled by
  # the process count, after a 10-15 s initial wait) so a rescheduled retry
  # comes back quickly. It does not change any payload.
  c.options[:poll_interval_average] = 1
  c.death_handlers << ->(job, _ex) { Sidekiq.redis { |r| r.rpush("capture:deaths", job["jid"].to_s) } }
end

# HardJob succeeds; it is the class of the client-side payload fixtures.
class HardJob
  include Sidekiq::Worker

  def perform(*args)
  end
end

# OptsJob has class-level sidekiq_options, which normalize_item merges in
# front of the caller's keys.
class OptsJob
  include Sidekiq::Worker
  sidekiq_options queue: "critical", backtrace: 5, custom_option: "kept"

  def perform(*args)
  end
end

# FailJob always raises ArgumentError("boom é") a few frames deep, so
# backtrace: 3 keeps fewer lines than backtrace: true.
class FailJob
  include Sidekiq::Worker

  def perform(*args)
    Sidekiq.redis { |r| r.rpush("capture:ran", jid) }
    level1(args)
  end

  def level1(args)
    level2(args)
  end

  def level2(args)
    raise ArgumentError, "boom é"
  end
end

# SlowJob runs until capture.rb sets the key capture:release (at most 60 s),
# so the heartbeat shows it in the busy count and the work hash.
class SlowJob
  include Sidekiq::Worker

  def perform(*args)
    Sidekiq.redis { |r| r.rpush("capture:slow_started", jid) }
    deadline = Time.now + 60
    sleep 0.05 until Sidekiq.redis { |r| r.get("capture:release") } || Time.now > deadline
  end
end
