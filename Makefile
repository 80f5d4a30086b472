# klog: `make run` starts an appliance on the embedded default config and shows it working;
# `make test` installs everything the tests need (Debian packages and a venv) and runs them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# tests/ops scrapes with a real Prometheus (promtool comes with it)
APT_PACKAGES := kcat systemd zookeeper iptables prometheus e2fsprogs
# tests/security_tls makes its CA and certificates with the openssl command
APT_PACKAGES += openssl
# tests/deploy boots Debian hosts: debootstrap builds their root, systemd-nspawn boots them
APT_PACKAGES += debootstrap systemd-container
# Spark 4 (tests/pipeline, the load in `make run`) needs Java 17 or 21; bookworm has 17
JDK_PACKAGE := openjdk-17-jre-headless
PYTEST_ARGS ?=
# The suite mostly waits (on ZooKeeper sessions, elections, booted hosts), so it runs on
# pytest-xdist workers: each test module whole on one worker (tests/conftest.py groups them);
# TEST_WORKERS=0 runs everything in this one process
TEST_WORKERS ?= 3
XDIST := -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

.PHONY: all run run-cluster test lint deps venv soak perf clean

all: test

# the compiled codec is built by the editable install: new C sources need it run again
$(STAMP): pyproject.toml setup.py $(wildcard klog/protocol/_recordsc*.c klog/protocol/_recordsc*.h klog/producer/_sendc.c)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# Debian packages the interop tests talk to, and a JDK when there is no java at all;
# installed only when missing (slim images lack the man dir the JDK's postinst links into).
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v java >/dev/null 2>&1 || missing="$$missing $(JDK_PACKAGE)"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO mkdir -p /usr/share/man/man1; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ansible-lint --offline -q playbooks/

# the compiled record codec and send() must be the ones in use (they are optional at install
# time), and the codec and client tests run again on the pure-Python fallback, the reference;
# the slowest tests are listed, to keep the run near 30 minutes
test: deps venv lint
	$(PY) -c "from klog.protocol import records_codec as c; assert c.IMPLEMENTATION == 'C', c.FALLBACK_REASON"
	$(PY) -c "from klog.producer import fast_send as s; assert s.IMPLEMENTATION == 'C', s.FALLBACK_REASON"
	$(PY) -m pytest -q --durations=25 $(XDIST) $(PYTEST_ARGS)
	KLOG_PURE_PYTHON=1 $(PY) -m pytest -q -p no:cacheprovider $(XDIST) tests/protocol tests/client

run: deps venv
	$(PY) -m klog_cli.main demo

# a local fleet: ZooKeeper and three appliances on this host (cluster mode); a topic of three
# replicas keeps its data and takes acks=all while one appliance is stopped
run-cluster: deps venv
	$(PY) -m klog_cli.main demo-cluster

perf: deps venv
	@for b in perf/bench_*.py; do echo "== $$b"; $(PY) $$b --quick || exit 1; done

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
