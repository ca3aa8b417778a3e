# Shared helpers for capture.rb (6.4.1) and captured_*.rb (7.3.10, 8.1.7,
# cut from captures). They write one raw file per Redis value and a
# manifest.json whose "expect" blocks are computed by Ruby's own reading of
# each value, so the Go tests compare gojob against Ruby, not against itself.
require "json"
require "zlib"
require "base64"

module FixtureLib
  TIMESTAMP_FIELDS = %w[created_at enqueued_at failed_at retried_at discarded_at].freeze

  # Manifest collects fixture entries and observations for one directory.
  class Manifest
    attr_reader :dir, :fixtures, :observations

    def initialize(dir, header)
      @dir = dir
      @header = header
      @fixtures = []
      @observations = []
    end

    # write stores bytes exactly as given (no added newline).
    def write(file, bytes)
      File.binwrite(File.join(@dir, file), bytes)
    end

    # add writes the file and records its manifest entry.
    def add(file, bytes, kind:, produced_by:, redis: nil, source: nil, expect: nil, group: nil, notes: nil)
      raise "duplicate fixture #{file}" if @fixtures.any? { |f| f["file"] == file }
      write(file, bytes)
      e = {"file" => file, "kind" => kind, "produced_by" => produced_by}
      e["source"] = source if source
      e["redis"] = redis if redis
      e["group"] = group if group
      e["notes"] = notes if notes
      if %w[job process_info work].include?(kind)
        expect ||= {}
        # Ruby's parse + generate (json #{JSON::VERSION}); equal to the file for
        # everything Ruby wrote, different only for hand-written exponent
        # floats, which today's generator writes in Float#to_s form.
        re = JSON.generate(JSON.parse(bytes))
        expect["ruby_reencode"] = re unless re == bytes
      end
      if kind == "work" && (inner = JSON.parse(bytes)["payload"]).is_a?(String)
        raise "#{file}: payload does not survive Ruby parse + generate" unless JSON.generate(JSON.parse(inner)) == inner
      end
      e["expect"] = expect if expect
      @fixtures << e
      e
    end

    # job adds a job payload with expectations derived by Ruby.
    def job(file, bytes, **kw)
      add(file, bytes, kind: "job", expect: FixtureLib.job_expect(bytes), **kw)
    end

    def observe(claim, result, detail = nil)
      o = {"claim" => claim, "result" => result}
      o["detail"] = detail if detail
      @observations << o
    end

    def save
      doc = @header.merge("fixtures" => @fixtures, "observations" => @observations)
      File.write(File.join(@dir, "manifest.json"), JSON.pretty_generate(doc) + "\n")
    end
  end

  # Capture reads a capture of real Ruby Sidekiq (the shared reference
  # data's layout: MONITOR logs and redis-cli --no-raw state dumps).
  class Capture
    def initialize(dir)
      @dir = dir
    end

    # unquote reads one redis-cli quoted argument (sdscatrepr): \" \\ \n \r \t
    # \a \b and \xHH.
    def self.unquote(s)
      out = +""
      i = 0
      while i < s.length
        c = s[i]
        if c != "\\"
          out << c
          i += 1
          next
        end
        n = s[i + 1]
        case n
        when "x" then out << s[i + 2, 2].to_i(16).chr; i += 4
        when "n" then out << "\n"; i += 2
        when "r" then out << "\r"; i += 2
        when "t" then out << "\t"; i += 2
        when "a" then out << "\a"; i += 2
        when "b" then out << "\b"; i += 2
        else out << n; i += 2
        end
      end
      out.b
    end

    # monitor parses a MONITOR capture into [time, client, [args…]] rows.
    def monitor(file)
      File.readlines(File.join(@dir, file), chomp: true).filter_map do |line|
        next unless line =~ /\A(\d+\.\d+) \[\d+ ([^\]]+)\] (.*)\z/
        [$1, $2, $3.scan(/"((?:[^"\\]|\\.)*)"/).map { |(a)| Capture.unquote(a) }]
      end
    end

    # redis_cli_value reads the value printed after "### key=K" in a --no-raw
    # state dump: the lines after TYPE, TTL and PTTL.
    def state_value(file, key)
      lines = File.readlines(File.join(@dir, file), chomp: true)
      at = lines.index("\"### key=#{key}\"") or raise "#{key} not in #{file}"
      rest = lines[(at + 4)..].take_while { |l| !l.start_with?("\"### key=") }
      rest.map { |l| Capture.unquote(l.sub(/\A\s*(\d+\) )?"/, "").sub(/"\z/, "")) }
    end
  end

  module_function

  # unix_ns reads a job timestamp the way Sidekiq 8.x's
  # JobRecord#time_from_timestamp does: Float = seconds, Integer = ms.
  def unix_ns(v)
    case v
    when Float then (v.to_r * 1_000_000_000).round
    when Integer then v * 1_000_000
    else raise "not a timestamp: #{v.inspect}"
    end
  end

  # decode_backtrace is Sidekiq's reader (6.4 Base64.decode64, 7.2.1+
  # unpack1("m"); both skip newlines).
  def decode_backtrace(s)
    JSON.parse(Zlib::Inflate.inflate(s.unpack1("m")))
  end

  # encode_backtrace_mime / _strict are Sidekiq's writers (≤7.2.0 / 7.2.1+).
  def encode_backtrace_mime(lines)
    Base64.encode64(Zlib::Deflate.deflate(JSON.generate(lines)))
  end

  def encode_backtrace_strict(lines)
    [Zlib::Deflate.deflate(JSON.generate(lines))].pack("m0")
  end

  # job_expect is what Ruby reads from a payload: the typed values the Go
  # accessors must agree with.
  def job_expect(bytes)
    msg = JSON.parse(bytes)
    e = {}
    %w[class queue jid wrapped error_class error_message].each { |k| e[k] = msg[k] if msg.key?(k) }
    e["args"] = msg["args"]
    e["retry_present"] = msg.key?("retry")
    e["retry"] = msg["retry"] if msg.key?("retry")
    e["retry_enabled"] = !!msg["retry"]
    e["retry_max"] = msg["retry"].is_a?(Integer) ? msg["retry"] : 25 if msg["retry"]
    e["retry_count"] = msg["retry_count"] if msg.key?("retry_count")
    bt = msg["backtrace"]
    e["backtrace_all"] = bt == true
    e["backtrace_limit"] = (bt && bt != true) ? bt.to_i : 0
    ts = {}
    TIMESTAMP_FIELDS.each do |k|
      next unless msg.key?(k)
      v = msg[k]
      ts[k] = {"lexical" => v.is_a?(Integer) ? "integer" : "float", "unix_ns" => unix_ns(v)}
    end
    e["timestamps"] = ts
    if (s = msg["error_backtrace"])
      e["error_backtrace_form"] = s.include?("\n") ? "mime" : "strict"
      e["error_backtrace"] = decode_backtrace(s)
    end
    e["keys"] = msg.keys
    e
  end
end
