# frozen_string_literal: true

# Makes a Ruby Sidekiq process (6.4 to 8.x) honour `gojob queue pause NAME`
# (docs/queue-pause.md): the process stops fetching from the queues in the
# Redis set gojob-paused-queues within about half a second, and puts a job
# its fetch popped from a queue paused meanwhile back where it was taken
# (RPUSH, the end BRPOP pops), without running it, as gojob processes do.
# Jobs stay in their queue; `gojob queue unpause NAME` resumes.
#
# Load it in the Sidekiq server process, after Sidekiq:
#   - Rails: an initializer, config/initializers/gojob.rb:
#       require Rails.root.join("vendor/gojob/gojob").to_s
#   - without Rails: require it from the file given to `sidekiq -r`.
#
# It changes Sidekiq::BasicFetch, Sidekiq's default fetch
# (lib/sidekiq/fetch.rb, 6.4.1 to 8.1.7: #queues_cmd builds BRPOP's queue
# list, #retrieve_work sleeps when that list holds no queue, and a
# UnitOfWork#requeue pushes a job back). Other fetch classes (Sidekiq Pro's
# super_fetch, a gem's reliable fetch) are left as they are.
require "sidekiq"
require "sidekiq/fetch"

module Gojob
  # QueuePause reads gojob's paused queues, at most every CHECK_EVERY
  # seconds, for every fetch of the process.
  module QueuePause
    KEY = "gojob-paused-queues"
    CHECK_EVERY = 0.5

    @mutex = Mutex.new
    @paused = [].freeze
    @checked_at = nil

    class << self
      # paused returns the names of the paused queues. When Redis cannot be
      # read, the last names are kept (the fetch itself reports the outage).
      def paused
        @mutex.synchronize do
          now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          if @checked_at.nil? || now - @checked_at >= CHECK_EVERY
            @checked_at = now
            begin
              names = Sidekiq.redis { |conn| conn.call("SMEMBERS", KEY) }.sort.freeze
              if names != @paused
                Sidekiq.logger.info("gojob: paused queues changed: #{names.empty? ? "none" : names.join(", ")}")
              end
              @paused = names
            rescue => ex
              Sidekiq.logger.warn("gojob: could not read the paused queues (#{ex.class}: #{ex.message}); keeping #{@paused.inspect}")
            end
          end
          @paused
        end
      end

      def paused?(queue)
        paused.include?(queue)
      end
    end

    # Fetch is prepended to Sidekiq::BasicFetch.
    module Fetch
      # queues_cmd leaves the paused queues out of BRPOP's list; the
      # trailing timeout of 6.x's list is kept. With every queue paused,
      # retrieve_work sleeps its timeout and fetches nothing.
      def queues_cmd
        cmd = super
        paused = QueuePause.paused
        return cmd if paused.empty?
        cmd.reject { |q| q.is_a?(String) && paused.include?(q.delete_prefix("queue:")) }
      end

      # retrieve_work puts back a job popped from a queue paused while the
      # BRPOP waited.
      def retrieve_work
        work = super
        if work && QueuePause.paused?(work.queue_name)
          work.requeue
          return nil
        end
        work
      end
    end
  end
end

Sidekiq::BasicFetch.prepend(Gojob::QueuePause::Fetch)
