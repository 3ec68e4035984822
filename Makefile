# Two entry points for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV_VERSION := 0.13.8
# uv installs the workspace; it reads the platform's CA certificates like pip does.
UV := UV_SYSTEM_CERTS=1 $(BIN)/uv
COMPONENTS := client broker operator spark

.PHONY: install lock tools kafka-deps spark-deps run test lint fmt docs clean kube-deps kube-up kube-down \
	test-kube images spark-image helm-deps chart chart-sync

install: $(STAMP)

## Every component (editable) and the test tools, at the versions requirements-dev.lock pins.
$(STAMP): requirements-dev.lock $(COMPONENTS:%=%/pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv==$(UV_VERSION)
	$(UV) pip sync --quiet --python $(BIN)/python requirements-dev.lock
	touch $(STAMP)

## Re-resolve the workspace (pyproject.toml's dev group and each component's dependencies)
## to the newest allowed versions and write requirements-dev.lock.
lock: $(STAMP)
	$(UV) lock --quiet --upgrade
	$(UV) export --quiet --all-packages --group dev --format requirements-txt \
		--output-file requirements-dev.lock

## System tools the end-to-end tests drive (Debian packages): kcat, prometheus (which brings
## promtool) for the monitoring tests, and for the fault-injection suite (e2e/chaos) iproute2
## and nftables (namespaces, partitions, packet loss), e2fsprogs and mount (the nodes' disks
## that a crash can drop) and gcc (the clock-jump library). Installs only what is missing.
TOOLS := kcat:kcat promtool:prometheus ip:iproute2 nft:nftables mkfs.ext4:e2fsprogs \
	losetup:mount cc:gcc
tools:
	@missing=""; for pair in $(TOOLS); do \
		PATH="$$PATH:/usr/sbin:/sbin" command -v $${pair%%:*} >/dev/null 2>&1 \
			|| missing="$$missing $${pair#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing; \
	fi

## Apache Kafka's broker, tools and Java client from Maven Central (needs java, javac, mvn),
## cached outside the repository (MOLDAU_KAFKA_HOME overrides where: java/fetch-kafka.sh).
kafka-deps:
	bash java/fetch-kafka.sh

## Java 17+ and Spark's Kafka connector for the Spark tests: one line says what is missing;
## the connector's jars are resolved by Spark once, under a lock, into an Ivy cache outside the
## repository keyed by its version (~/.cache/moldau/spark-ivy-<version>, MOLDAU_SPARK_IVY
## overrides it; e2e/spark/deps.py). Cold ~20 s; then nothing is started.
spark-deps: install
	$(BIN)/python -m e2e.spark.deps

## The Kubernetes test bed (e2e/kube/, docs/kubernetes.md): Debian packages, then Kubernetes,
## etcd, CNI plugins, crictl, CoreDNS, helm and three images built into a cache outside the
## repository (~/.cache/moldau/kube-<version>; cold: ~36 CPU-minutes, ~9 GB of disk).
kube-deps:
	bash e2e/kube/deps.sh

## helm alone (the chart's tests in `make test` need it), built as kube-deps builds it, into the
## same cache: cold ~300 CPU-seconds (10 min wall on a busy two-core machine), then cached.
helm-deps:
	bash e2e/kube/deps.sh helm

## Copy into the chart the repository files it ships (Helm reads nothing outside the chart);
## the chart's tests fail while a copy differs from its source.
chart-sync:
	cp monitoring/rules/moldau-rules.yaml charts/moldau/files/
	rm -f charts/moldau/files/dashboards/*.json
	cp monitoring/dashboards/*.json charts/moldau/files/dashboards/
	for crd in crds/*.yaml; do if [ -f "$$crd" ]; then cp "$$crd" charts/moldau/crds/; fi; done

## Lint the Helm chart and package it into $(CHART_DIST)/ (docs/helm.md).
CHART_DIST ?= dist
chart:
	bash charts/helm.sh lint --strict charts/moldau
	bash charts/helm.sh package charts/moldau --destination $(CHART_DIST)

## Start the single-node test bed (state under /tmp/moldau-kube); writes its kubeconfig there.
kube-up:
	bash e2e/kube/up.sh

## Stop it and restore the machine (iptables, sysctls, addresses, mounts).
kube-down:
	bash e2e/kube/down.sh

## The tests marked `kube`: against $$KUBECONFIG's cluster if set, else the local test bed,
## and the image tests (podman; the Spark jobs image needs spark-deps' connector).
test-kube: install kube-deps spark-deps
	$(BIN)/pytest -m kube e2e/kube e2e/images

## The images localhost/moldau-broker:<version> and localhost/moldau-operator:<version>, into
## the test bed's podman storage.
images: install
	bash e2e/images/build.sh broker operator

## The Spark jobs image localhost/moldau-spark:<version> (docs/spark.md#on-kubernetes): PySpark,
## moldau-spark, Spark's Kafka connector from spark-deps' Ivy cache and spark/jobs/.
spark-image: spark-deps
	bash e2e/images/build.sh spark

## Start one broker on localhost:9092, data under ./data/broker (see README.md).
run: install
	$(BIN)/moldau broker

## Run the whole test suite: unit tests and real-client end-to-end tests, then the tests marked
## `kube` on the Kubernetes test bed (started and stopped by the tests; needs root). The
## slowest tests are listed at the end of each phase, to keep the run within its time budget.
test: install tools kafka-deps kube-deps spark-deps
	$(BIN)/ruff check .
	$(BIN)/pytest --durations=25
	$(BIN)/pytest -m kube e2e/kube e2e/images --durations=15

## Regenerate docs/configuration.md from the config definitions.
docs: install
	$(BIN)/python -m moldau.broker.config_doc > docs/configuration.md

lint: install
	$(BIN)/ruff check .

fmt: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) data build */build */src/*.egg-info uv.lock

## Exactly-once consume-transform-produce under kill -9 over many seeded fault schedules
## (EOS_SCHEDULES, 20 by default here; the normal suite runs 2). See e2e/test_eos.py.
EOS_SCHEDULES ?= 20
.PHONY: eos-soak
eos-soak: install
	EOS_SCHEDULES=$(EOS_SCHEDULES) $(BIN)/pytest -q -s e2e/test_eos.py

## Moldau next to Apache Kafka on this machine, same workloads and load generators (~20 min;
## BENCH_ARGS=--quick for a few); writes docs/benchmarks.md. See bench/harness.py.
.PHONY: bench
bench: install kafka-deps
	$(BIN)/python -m bench $(BENCH_ARGS)

## The names of every setting Kafka's broker defines, printed by the pinned Kafka release itself
## (java/tools/KafkaBrokerConfigNames.java): the Kafka-only keys a broker accepts.
.PHONY: kafka-config-names
kafka-config-names: kafka-deps
	java -cp "$$(bash java/fetch-kafka.sh | tail -n 1)/lib/*" \
		java/tools/KafkaBrokerConfigNames.java > client/src/moldau/client/kafka_broker_configs.txt

## Soak the fault-injection suite (e2e/chaos, needs root for network namespaces): the queue,
## the transactional and the metadata-quorum workloads, each under CHAOS_SCHEDULES seeded
## schedules from CHAOS_FIRST_SEED; see docs/chaos.md.
CHAOS_SCHEDULES ?= 100
CHAOS_FIRST_SEED ?= 1
.PHONY: chaos
chaos: install tools
	CHAOS_SCHEDULES=$(CHAOS_SCHEDULES) CHAOS_FIRST_SEED=$(CHAOS_FIRST_SEED) \
		$(BIN)/pytest -m chaos e2e/chaos/test_chaos.py e2e/chaos/test_txn.py \
		e2e/chaos/test_metadata_quorum.py

## Soak the protocol fuzz targets (fuzz/, atheris): FUZZ_RUNS inputs per target under RSS and
## per-input time limits, new inputs kept under build/fuzz/; each prints libFuzzer's final
## stats (runs, seconds, exec/s, peak RSS). A finding stops it (see docs/chaos.md).
FUZZ_RUNS ?= 1000000
FUZZ_TARGETS ?= frames batches sasl
FUZZ_RSS_LIMIT_MB ?= 2048
FUZZ_TIMEOUT_S ?= 10
.PHONY: fuzz fuzz-corpus
fuzz: install
	@for target in $(FUZZ_TARGETS); do \
		echo "== fuzz $$target: $(FUZZ_RUNS) inputs"; \
		$(BIN)/python -m fuzz $$target --runs $(FUZZ_RUNS) \
			--rss-limit-mb $(FUZZ_RSS_LIMIT_MB) --timeout $(FUZZ_TIMEOUT_S) $(FUZZ_ARGS) \
			|| exit 1; \
	done

## Regenerate the seed corpus (fuzz/corpus/) from real clients' traffic to a broker.
fuzz-corpus: install kafka-deps
	$(BIN)/python -m fuzz.capture
