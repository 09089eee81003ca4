#!/usr/bin/env bash
# Makes sure PostgreSQL (127.0.0.1:5432, trust auth, database `test`) and Redis (127.0.0.1:6379) answer:
# starts them when installed but down, installs them with apt-get when missing.
set -euo pipefail

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { [[ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" == "PONG" ]]; }

install_missing() {
  local pkgs=()
  command -v pg_ctlcluster >/dev/null || pkgs+=(postgresql)
  command -v redis-server >/dev/null || pkgs+=(redis-server)
  if ((${#pkgs[@]})); then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
  fi
}

start_postgres() {
  local version
  version=$(ls /etc/postgresql | sort -V | tail -1)
  local hba=/etc/postgresql/$version/main/pg_hba.conf
  # Tests connect as postgres over TCP without a password, like this machine's own cluster is set up.
  if ! grep -Eq '^host\s+all\s+all\s+127.0.0.1/32\s+trust' "$hba"; then
    sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || pg_ctlcluster --skip-systemctl-redirect "$version" main reload
}

if ! pg_up || ! redis_up; then
  install_missing
fi
if ! pg_up; then
  start_postgres
  for _ in $(seq 50); do pg_up && break; sleep 0.2; done
fi
if ! redis_up; then
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 50); do redis_up && break; sleep 0.1; done
fi
pg_up || { echo "PostgreSQL does not answer on 127.0.0.1:5432" >&2; exit 1; }
redis_up || { echo "Redis does not answer on 127.0.0.1:6379" >&2; exit 1; }
psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1 \
  || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test" >/dev/null
echo "services: PostgreSQL and Redis answer"
