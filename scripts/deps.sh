#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine: redis-server;
# Chromium for the dashboard's browser tests; tmux for gojob top's;
# Debian's Ruby Sidekiq 6.4.1 (with ActiveJob and WEBrick for the Web UI) for
# the compat tests; the sidekiq-cron gem 1.8.0 for the cron tests; PostgreSQL, and Ruby's Sequel and pg for the durable
# table's Ruby check. Does nothing when everything is present.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# Headless Chromium for the dashboard's browser tests (web/).
[ -x /usr/bin/chromium ] || need+=(chromium)
# tmux: gojob top runs in a tmux pane in cli/top_test.go.
command -v tmux >/dev/null 2>&1 || need+=(tmux)
command -v ruby >/dev/null 2>&1 || need+=(ruby)
if command -v ruby >/dev/null 2>&1; then
  ruby -e 'require "sidekiq"' >/dev/null 2>&1 || need+=(ruby-sidekiq)
  ruby -e 'require "active_job"' >/dev/null 2>&1 || need+=(ruby-activejob)
  ruby -e 'require "webrick"' >/dev/null 2>&1 || need+=(ruby-webrick)
  ruby -e 'require "rack/test"' >/dev/null 2>&1 || need+=(ruby-rack-test)
  ruby -e 'require "sequel"' >/dev/null 2>&1 || need+=(ruby-sequel)
  ruby -e 'require "pg"' >/dev/null 2>&1 || need+=(ruby-pg)
  ruby -e 'require "sidekiq-cron"' >/dev/null 2>&1 || need+=(ruby-sidekiq-cron)
else
  need+=(ruby-sidekiq ruby-activejob ruby-webrick ruby-rack-test ruby-sequel ruby-pg ruby-sidekiq-cron)
fi

command -v pg_ctlcluster >/dev/null 2>&1 || need+=(postgresql)
command -v psql >/dev/null 2>&1 || need+=(postgresql-client)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive

if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# PostgreSQL for the durable tests: a running cluster that lets the postgres
# role in over TCP from 127.0.0.1 without a password (the tests create and
# drop their own databases). Override with TEST_DATABASE_URL.
if [ -z "${TEST_DATABASE_URL:-}" ]; then
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    ver=$(ls /etc/postgresql 2>/dev/null | sort -n | tail -1)
    if [ -n "$ver" ]; then
      echo "deps: starting PostgreSQL $ver"
      $SUDO pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
    fi
    for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
  fi
  if ! psql -h 127.0.0.1 -U postgres -d postgres -tAc 'select 1' >/dev/null 2>&1; then
    ver=$(ls /etc/postgresql 2>/dev/null | sort -n | tail -1)
    hba="/etc/postgresql/$ver/main/pg_hba.conf"
    if [ -f "$hba" ] && ! grep -q '^# gojob-tests' "$hba"; then
      echo "deps: allowing the postgres role from 127.0.0.1 without a password (test machine)"
      $SUDO sed -i '1i # gojob-tests\nhost all postgres 127.0.0.1/32 trust' "$hba"
      $SUDO pg_ctlcluster --skip-systemctl-redirect "$ver" main reload || true
    fi
  fi
fi
