#!/usr/bin/env bash
# Every test: install, lint, type-check, check import boundaries, then run the test suite.
# `scripts/test.sh --fast`: the same checks, then the unit tests only (tests/unit: no server
# process, cluster or browser; a few minutes), for the loop of a change. Other arguments go to
# pytest. The full run prints the 30 slowest tests (docs/results/tests.md keeps a copy).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
cd "$(dirname "$0")/.."
fast=""
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
ruff check src tests benchmarks
mypy
bash scripts/mypy_tests.sh
lint-imports
if [ -n "$fast" ]; then
  exec pytest -n 2 -q tests/unit "$@"
fi
# --- PostgreSQL for the store and server tests (issue 3, control plane) ---------------------
# Those tests start a throwaway cluster themselves (src/aipaas/store/pgtest.py: initdb + pg_ctl
# on a free port, as the postgres user when run as root) and stop it at the end. They need
# Debian's server binaries: installed here when absent; without them the tests skip, saying so.
if ! command -v pg_ctl >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq postgresql >/dev/null) \
      || echo "postgresql could not be installed: the PostgreSQL tests will skip" >&2
  fi
fi
# --- end PostgreSQL ---------------------------------------------------------------------------
# --- Slurm for the Slurm backend's tests (issue 12) -------------------------------------------
# tests/integration/slurm_cluster.py starts a throwaway cluster itself (scripts/slurm_cluster.sh:
# munged, slurmctld and two slurmds on this host) and stops it at the end. It needs Debian's
# slurm-wlm and munge (about 20 s of apt), and for the accounting test slurmdbd and
# mariadb-server (about 30 s more): installed here, in one apt call, when absent; without them
# those tests skip, saying so.
slurm_packages=""
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  slurm_packages="slurm-wlm munge"
fi
if ! command -v slurmdbd >/dev/null 2>&1 || ! command -v mariadbd >/dev/null 2>&1; then
  slurm_packages="$slurm_packages slurmdbd mariadb-server"
fi
if [ -n "$slurm_packages" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # shellcheck disable=SC2086 # a list of package names
    (apt-get install -y -qq $slurm_packages >/dev/null 2>&1 \
      || (apt-get update -qq && apt-get install -y -qq $slurm_packages >/dev/null)) \
      || echo "$slurm_packages could not be installed: the Slurm tests will skip" >&2
  fi
fi
# --- end Slurm --------------------------------------------------------------------------------
# --- Chromium for the dashboard's browser tests (issue 15) ----------------------------------
# tests/integration/test_dashboard_browser.py drives Debian's chromium with Playwright (no
# browser download); installed here when absent (about 50 s of apt); without it those tests skip.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get install -y -qq chromium >/dev/null 2>&1 \
    || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)) \
    || echo "chromium could not be installed: the dashboard's browser tests will skip" >&2
fi
# --- end Chromium -----------------------------------------------------------------------------
# --- Prometheus for the scrape test (issue 15) -------------------------------------------------
# tests/integration/test_prometheus_scrape.py starts Debian's prometheus on a free port against
# a real server; installed here when absent (about 20 s of apt); without it that test skips.
if ! command -v prometheus >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 \
    || (apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null)) \
    || echo "prometheus could not be installed: the Prometheus scrape test will skip" >&2
fi
# --- end Prometheus ---------------------------------------------------------------------------
# --- podman for the tests of tasks in images (issue 27) ---------------------------------------
# tests/integration/test_task_images*.py import an image from a root filesystem of
# busybox-static's applets and run tasks in it through Debian's podman with runc (crun refuses
# the hybrid cgroup layout of these machines); installed here when absent (about 10 s of apt);
# without them those tests skip, saying so.
podman_packages=""
command -v podman >/dev/null 2>&1 || podman_packages="podman"
command -v runc >/dev/null 2>&1 || podman_packages="$podman_packages runc"
# a static busybox: the image has no C library (ldd fails on a static program)
if ! command -v busybox >/dev/null 2>&1 || ldd "$(command -v busybox)" >/dev/null 2>&1; then
  podman_packages="$podman_packages busybox-static"
fi
if [ -n "$podman_packages" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  # shellcheck disable=SC2086 # a list of package names
  (apt-get install -y -qq $podman_packages >/dev/null 2>&1 \
    || (apt-get update -qq && apt-get install -y -qq $podman_packages >/dev/null)) \
    || echo "$podman_packages could not be installed: the image tests will skip" >&2
fi
# --- end podman -------------------------------------------------------------------------------
# --- Kubernetes for the kube tests (issue 26) -------------------------------------------------
# tests/kube start a throwaway control plane once per run (scripts/kube_cluster.sh: etcd,
# kube-apiserver 1.37 and kwok on loopback, certificates made with openssl). Its binaries are
# built here from their Go modules when absent (scripts/kube_build.sh: about 10 minutes cold on
# 2 cores, then cached by version under ~/.cache/aipaas/kube); openssl is installed when absent.
# Without them the kube tests fail rather than skip: they are the backend's only tests.
if ! command -v openssl >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get install -y -qq openssl >/dev/null 2>&1 \
    || (apt-get update -qq && apt-get install -y -qq openssl >/dev/null)) \
    || echo "openssl could not be installed: the kube tests will fail" >&2
fi
bash scripts/kube_build.sh >/dev/null || echo "scripts/kube_build.sh failed: the kube tests will fail" >&2
# --- end Kubernetes ---------------------------------------------------------------------------
# --dist loadgroup: an integration module's tests share one worker (its cluster or server
# starts once), and the modules that start Slurm clusters share one (tests/integration/conftest.py).
pytest -n 2 --dist loadgroup --durations=30 "$@"
