#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine: redis-server, and
# Debian's Ruby Sidekiq 6.4.1 (with ActiveJob and WEBrick for the Web UI) for
# the compat tests. Does nothing when everything is present.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v ruby >/dev/null 2>&1 || need+=(ruby)
if command -v ruby >/dev/null 2>&1; then
  ruby -e 'require "sidekiq"' >/dev/null 2>&1 || need+=(ruby-sidekiq)
  ruby -e 'require "active_job"' >/dev/null 2>&1 || need+=(ruby-activejob)
  ruby -e 'require "webrick"' >/dev/null 2>&1 || need+=(ruby-webrick)
  ruby -e 'require "rack/test"' >/dev/null 2>&1 || need+=(ruby-rack-test)
else
  need+=(ruby-sidekiq ruby-activejob ruby-webrick ruby-rack-test)
fi

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

echo "deps: installing ${need[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${need[@]}" >/dev/null
